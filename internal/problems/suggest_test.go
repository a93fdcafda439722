package problems

import (
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"url", "url", 0},
		{"ulr", "url", 1}, // a transposition is one edit
		{"timout", "timeout", 1},
		{"queu", "queue", 1},
		{"adrs", "addrs", 1},
		{"tls", "url", 3},
		{"", "abc", 3},
		{"abc", "", 3},
		{"kitten", "sitting", 3},
	} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	id := func(s string) string { return s }
	for _, c := range []struct {
		typed string
		known []string
		want  string
	}{
		{"ulr", []string{"url", "timeout", "socket"}, " (did you mean url?)"},
		{"tls", []string{"url"}, ""}, // three edits: not a typo
		{"ab", []string{"id"}, ""},   // two edits of two letters: anything would match
		{"x", []string{"y"}, ""},     // one edit of one letter, likewise
		{"mode", []string{"mode"}, " (did you mean mode?)"},
		{"lsten", []string{"listen", "lstenx", "path"}, " (did you mean listen or lstenx?)"},
	} {
		if got := DidYouMean(c.typed, c.known, id); got != c.want {
			t.Errorf("DidYouMean(%q, %v) = %q, want %q", c.typed, c.known, got, c.want)
		}
	}
}
