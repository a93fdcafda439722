package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
