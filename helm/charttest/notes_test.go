package charttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// renderNotes renders templates/NOTES.txt: `helm template` skips it and
// `helm install --dry-run` wants a cluster, so a copy of the chart wraps
// it in a ConfigMap.
func renderNotes(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "dedupe-proxy")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "templates", "NOTES.txt")); err != nil {
		t.Fatal(err)
	}
	tpl := "{{- define \"charttest.notes\" }}" + string(notes) + "{{- end }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "_notes.tpl"), []byte(tpl), 0o644); err != nil {
		t.Fatal(err)
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include \"charttest.notes\" . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := Template(dir, "ci", "", append([]string{"-s", "templates/notes.yaml"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs.ConfigMaps[0].Data["notes"]
}

// TestNotes: what NOTES.txt tells a user is what the proxy does.
func TestNotes(t *testing.T) {
	notes := renderNotes(t)
	for _, want := range []string{
		// A refused connection waits; it never dead-letters.
		"never count towards\ndelivery.max_attempts, so nothing is dead-lettered for it",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lacks %q:\n%s", want, notes)
		}
	}
	// The unpublished image: one line, whole.
	if !hasLine(notes, "WARNING: the proxy image ghcr.io/dedupe-proxy/dedupe-proxy:0.1.0 is not published yet, so pods cannot pull it: "+
		"build it from the repository's Dockerfile, push it and set proxy.image.") {
		t.Errorf("NOTES lack the one-line image warning:\n%s", notes)
	}
	if strings.Contains(notes, "dead-lettered after") || strings.Contains(notes, "enableServiceLinks") {
		t.Errorf("NOTES repeats a stale claim:\n%s", notes)
	}
	own := renderNotes(t, "--set", "proxy.image.repository=registry.example.com/dedupe-proxy", "--set", "config.app.health_url=/healthz")
	if strings.Contains(own, "not published yet") || strings.Contains(own, "health_url is not set") {
		t.Errorf("NOTES warns about settings that are fine:\n%s", own)
	}
	shared := renderNotes(t, "--set", "mode=shared", "--set", "fullnameOverride=orders-proxy")
	if !hasLine(shared, "WARNING: the proxy image ghcr.io/dedupe-proxy/dedupe-proxy:0.1.0 is not published yet, so pods cannot pull it: "+
		"build it from the repository's Dockerfile, push it and pass it to inject (--image, or annotate dedupe-proxy.io/image).") {
		t.Errorf("mode shared NOTES lack the one-line image warning:\n%s", shared)
	}
	for _, want := range []string{"mode shared", `dedupe-proxy.io/inject: "true"`, "dedupe-proxy.io/config: orders-proxy", "--post-renderer dedupe-proxy --post-renderer-args inject"} {
		if !strings.Contains(shared, want) {
			t.Errorf("mode shared NOTES lack %q:\n%s", want, shared)
		}
	}
}

func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// TestAppKeepsImageCmd: by default the chart sets neither command nor
// args on the app, so a user's image runs its own ENTRYPOINT and CMD.
func TestAppKeepsImageCmd(t *testing.T) {
	objs := render(t, "", "--set", "app.image.repository=registry.example.com/shop/worker")
	app := objs.Deployments[0].Spec.Template.Spec.Containers[0]
	if len(app.Command) > 0 || len(app.Args) > 0 {
		t.Errorf("app container overrides its image: command %q args %q", app.Command, app.Args)
	}
}
