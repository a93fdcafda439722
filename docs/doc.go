// Package docs holds the documentation's own tests: every relative link and
// #anchor in README.md and docs/*.md must resolve (links_test.go), and every
// command of first-afternoon.md must run (firstafternoon_test.go).
package docs
