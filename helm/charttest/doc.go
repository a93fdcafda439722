// Package charttest renders the dedupe-proxy Helm chart with `helm template`
// and decodes every manifest strictly into the Kubernetes API types, so a
// mistyped or misplaced field fails instead of being dropped by the API
// server. It is its own module: the k8s.io dependencies stay out of the
// proxy's go.mod.
//
// The tests run with helm/check.sh (make chart-check); cmd/chartconfig
// extracts the proxy's config.yaml and environment from a render so that
// check.sh can run `dedupe-proxy validate` on exactly what a pod would get.
package charttest
