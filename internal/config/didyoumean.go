package config

import "github.com/dedupe-proxy/dedupe-proxy/internal/problems"

// DidYouMean is problems.DidYouMean: the commands offer the same hints as
// the loader.
func DidYouMean(typed string, known []string, qualify func(string) string) string {
	return problems.DidYouMean(typed, known, qualify)
}
