package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// The kinds first-afternoon.md says `helm template` prints are all it
// prints, not some of them: the block is run as the page's test runs it
// and its output must be its #=> lines, no more.
func TestFirstAfternoonHelmKinds(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		helm = filepath.Join(strings.TrimSpace(string(gopath)), "bin", "helm")
		if _, err := os.Stat(helm); err != nil {
			t.Skip("helm is not installed (bash helm/helm.sh installs it)")
		}
	}
	root, _ := filepath.Abs("..")
	dir := t.TempDir()
	var block string
	for _, sec := range parsePage(t, read(t, "docs/"+afternoonPage)) {
		for _, s := range sec.steps {
			switch {
			case s.kind == "file" && s.path == "afternoon/values.yaml":
				if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(s.body), 0o644); err != nil {
					t.Fatal(err)
				}
			case s.kind == "sh" && strings.HasPrefix(s.body, "helm template "):
				block = s.body
			}
		}
	}
	if block == "" {
		t.Fatal("no helm template block")
	}
	var want []string
	cmdline, _, _ := strings.Cut(block, "\n")
	for _, l := range strings.Split(block, "\n")[1:] {
		if w, ok := strings.CutPrefix(l, "#=> "); ok {
			want = append(want, w)
		}
	}
	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", strings.ReplaceAll(cmdline, "afternoon/", dir+"/"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(helm)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("helm template prints\n  %s\nthe page says\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
