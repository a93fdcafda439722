package claim

import (
	"strings"
	"testing"
)

// A token is a random 11-character prefix per protocol (64 bits,
// base64url) and a base-36 counter: distinct within a protocol and
// between protocols (replicas), with no ':' that could be read as part
// of the value's "inflight:"/"done:" form.
func TestTokensUniqueAndShort(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		p := New(Options{})
		first := p.tokens.Next()
		prefix := first[:len(first)-1]
		if len(prefix) != 11 || first[len(first)-1] != '1' {
			t.Fatalf("first token %q: want an 11-character prefix and the counter 1", first)
		}
		seen[first] = true
		var tok string
		for range 1295 { // to 36²: the counter reaches 3 digits
			tok = p.tokens.Next()
			if seen[tok] || strings.Contains(tok, ":") {
				t.Fatalf("token %q repeated or holds ':'", tok)
			}
			seen[tok] = true
		}
		if want := prefix + "100"; tok != want {
			t.Fatalf("token %d = %q, want %q", 1296, tok, want)
		}
	}
}
