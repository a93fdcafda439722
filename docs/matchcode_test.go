package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// The pages that show what the app receives name every kind of source:
// the README's diagram and the X-Dedupe-Broker row of the header tables,
// whose values are the source types (the pipeline sends a message's
// Kind, which is its source's type, and the webhook handler "webhook").
func TestDocsNameEverySource(t *testing.T) {
	readme := read(t, "README.md")
	diagram := readme[strings.Index(readme, "```\n")+4:]
	diagram = diagram[:strings.Index(diagram, "```")]
	for _, name := range []string{"RabbitMQ", "Kafka", "Redis list or stream", "webhooks", "seen-set"} {
		if !strings.Contains(diagram, name) {
			t.Errorf("the README's diagram does not name %s:\n%s", name, diagram)
		}
	}
	for _, page := range []string{"README.md", "docs/app.md"} {
		row := ""
		for _, l := range strings.Split(read(t, page), "\n") {
			if strings.HasPrefix(l, "|") && strings.Contains(l, "`X-Dedupe-Broker`") {
				row = l
			}
		}
		if row == "" {
			t.Errorf("%s: no X-Dedupe-Broker row", page)
			continue
		}
		for _, kind := range config.SourceTypes() {
			if !strings.Contains(row, "`"+kind+"`") {
				t.Errorf("%s: the X-Dedupe-Broker row does not name %q: %s", page, kind, row)
			}
		}
	}
}

// The proxy forwards the body as it is, never as a CloudEvent, so no
// page may promise that a Dapr app moves over unchanged.
func TestNoDaprUnchangedClaim(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("*.md"))
	for _, f := range append([]string{"README.md"}, files...) {
		if f != "README.md" {
			f = "docs/" + f
		}
		text := strings.Join(strings.Fields(read(t, f)), " ")
		if strings.Contains(text, "move over unchanged") {
			t.Errorf("%s says Dapr apps move over unchanged; the body is not a CloudEvent", f)
		}
	}
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
