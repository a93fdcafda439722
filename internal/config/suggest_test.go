package config

import (
	"os"
	"path/filepath"
	"strings"
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

// An unknown key names the known key nearest to it, at its own level of
// the file, and nothing when no key is near enough to be a typo.
func TestUnknownKeySuggestsNearestKnownKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	body := `consumer: c
app:
  ulr: http://127.0.0.1:8080
  frobnicate: 1
seenset:
  redis:
    adrs: ["x:1"]
sourcs: []
sources:
  - name: orders
    rabbitmq:
      queue: orders
      queu: typo
      url: amqp://127.0.0.1:5672/
`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, []string{})
	if err == nil {
		t.Fatal("loaded a file with unknown keys")
	}
	got := err.Error()
	for _, want := range []string{
		"app.ulr: unknown field (did you mean app.url?)\n",
		"app.frobnicate: unknown field\n",
		"seenset.redis.adrs: unknown field (did you mean seenset.redis.addrs?)\n",
		"sourcs: unknown field (did you mean sources?)\n",
		"sources[0].rabbitmq.queu: unknown field (did you mean sources[0].rabbitmq.queue?)",
	} {
		if !strings.Contains(got+"\n", want) {
			t.Errorf("missing %q in:\n%s", want, got)
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
