package keys

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// templateKey renders the template over the values of fields f0, f1, …
// through Key, as a message body would carry them.
func templateKey(t testing.TB, e *Extractor, vals []string) (string, string) {
	t.Helper()
	doc := map[string]string{}
	for i, v := range vals {
		doc[fmt.Sprintf("f%d", i)] = v
	}
	body, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return e.Key(&broker.Message{Body: body})
}

// words returns every string of 1 to n runes over the alphabet.
func words(alphabet []string, n int) []string {
	out := []string{""}
	var all []string
	for range n {
		var next []string
		for _, w := range out {
			for _, a := range alphabet {
				next = append(next, w+a)
			}
		}
		all = append(all, next...)
		out = next
	}
	return all
}

// TestTemplateKeysAreInjective: over every tuple of short values built
// from the template's own text, the escape character and other text, no
// two tuples give one key. Before values were escaped,
// {month:"2026-11:eu", customer:"42"} and {month:"2026-11",
// customer:"eu:42"} shared "inv:2026-11:eu:42", and the second message
// was acked as a duplicate of the first.
func TestTemplateKeysAreInjective(t *testing.T) {
	for _, tc := range []struct {
		template string
		fields   int
		alphabet []string
		maxLen   int
	}{
		{"inv:{{.f0}}:{{.f1}}", 2, []string{"x", ":", `\`, "i"}, 4},
		{"{{.f0}}::{{.f1}}", 2, []string{"x", ":", `\`}, 4},
		{"{{.f0}}:x{{.f1}}:", 2, []string{"x", ":", `\`}, 4},
		{"{{.f0}}ab{{.f1}}ba", 2, []string{"a", "b", `\`}, 4},
		{"{{.f0}}é{{.f1}}", 2, []string{"é", "e", `\`, "\u0301"}, 3},
		{`{{.f0}}:\{{.f1}}`, 2, []string{"x", ":", `\`}, 4},
		{"{{.f0}}/{{.f1}}:{{.f2}}", 3, []string{"x", ":", "/", `\`}, 2},
		{"{{.f0}}", 1, []string{"x", `\`, "{", "}"}, 4},
	} {
		t.Run(tc.template, func(t *testing.T) {
			e, err := Parse([]string{"template:" + tc.template})
			if err != nil {
				t.Fatal(err)
			}
			ws := words(tc.alphabet, tc.maxLen)
			seen := map[string][]string{}
			vals := make([]string, tc.fields)
			var walk func(i int)
			walk = func(i int) {
				if i == tc.fields {
					key, why := templateKey(t, e, vals)
					if why != "" {
						t.Fatalf("values %q: no key (%s)", vals, why)
					}
					if prev, ok := seen[key]; ok {
						t.Fatalf("values %q and %q give one key %q", prev, vals, key)
					}
					seen[key] = append([]string(nil), vals...)
					return
				}
				for _, w := range ws {
					vals[i] = w
					walk(i + 1)
				}
			}
			walk(0)
		})
	}
}

// TestTemplateKeyShape pins the documented shape: values without a
// backslash or a separator are written as they are (the keys from before
// escaping), the others get a backslash before each.
func TestTemplateKeyShape(t *testing.T) {
	e, err := Parse([]string{"template:inv:{{.f0}}:{{.f1}}"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		vals []string
		key  string
	}{
		{[]string{"2026-11", "42"}, "inv:2026-11:42"},
		{[]string{"2026-11:eu", "42"}, `inv:2026-11\:eu:42`},
		{[]string{"2026-11", "eu:42"}, `inv:2026-11:eu\:42`},
		{[]string{`a\`, "b"}, `inv:a\\:b`},
		{[]string{"a", `\:b`}, `inv:a:\\\:b`},
		{[]string{"inv", "i-n-v"}, "inv:inv:i-n-v"}, // only the text after a field counts
	} {
		if key, why := templateKey(t, e, tc.vals); key != tc.key || why != "" {
			t.Errorf("values %q: key %q (%s), want %q", tc.vals, key, why, tc.key)
		}
	}
}

// FuzzTemplateKeysAreInjective: two different value pairs never give one
// key (go test -fuzz=FuzzTemplateKeysAreInjective ./internal/keys).
func FuzzTemplateKeysAreInjective(f *testing.F) {
	f.Add("2026-11:eu", "42", "2026-11", "eu:42")
	f.Add(`a\`, ":b", "a", `\:b`)
	f.Add(`a\:`, "b", `a`, `\:b`)
	f.Add(`\\`, `\`, `\`, `\\`)
	e, err := Parse([]string{"template:inv:{{.f0}}:{{.f1}}"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a0, a1, b0, b1 string) {
		if a0 == b0 && a1 == b1 {
			return
		}
		ka, whyA := templateKey(t, e, []string{a0, a1})
		kb, whyB := templateKey(t, e, []string{b0, b1})
		if whyA == "" && whyB == "" && ka == kb {
			t.Fatalf("(%q, %q) and (%q, %q) give one key %q", a0, a1, b0, b1, ka)
		}
	})
}

// TestTemplatesThatCannotBeInjectiveAreRefused: with no text between two
// fields, or text that starts with the escape character, no escaping
// tells the values apart.
func TestTemplatesThatCannotBeInjectiveAreRefused(t *testing.T) {
	for _, tc := range []struct{ template, want string }{
		{"{{.a}}{{.b}}", "no text between them"},
		{"x{{.a}}{{- .b}}", "no text between them"},
		{"{{.a}} {{- .b}}", "no text between them"},
		{`{{.a}}\x{{.b}}`, "starts with a backslash"},
		{`{{.a}}\`, "starts with a backslash"},
	} {
		_, err := Parse([]string{"template:" + tc.template})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.template, err, tc.want)
		}
	}
	// Text split by a comment is one text.
	if _, err := Parse([]string{"template:{{.a}}:{{/* c */}}:{{.b}}"}); err != nil {
		t.Errorf("a comment between texts: %v", err)
	}
}
