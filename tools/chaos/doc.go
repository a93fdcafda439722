// Package chaos is the fault suite behind the `chaos` build tag (make
// chaos): the real dedupe-proxy binary as two processes in front of one
// app that records every effect durably, while the suite SIGKILLs proxies,
// kills and restarts Redis, cuts broker connections and makes the app fail,
// time out and hang past app.timeout and the lease — then counts every
// effect and says what caused each double. See chaos_test.go. It is a test
// tool, not part of the product: it only drives the built binary.
package chaos
