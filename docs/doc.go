// Package docs holds the documentation's own test: every relative link and
// #anchor in README.md and docs/*.md must resolve (see links_test.go).
package docs
