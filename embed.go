// Package dedupeproxy holds the files of the repository's root that the
// binary carries: the example config, whose comments are the
// descriptions of `dedupe-proxy config schema`.
package dedupeproxy

import _ "embed"

// ExampleConfig is config.example.yaml.
//
//go:embed config.example.yaml
var ExampleConfig []byte
