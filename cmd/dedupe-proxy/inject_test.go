package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInjectCommand(t *testing.T) {
	golden := filepath.Join("..", "..", "internal", "inject", "testdata")
	in, err := os.ReadFile(filepath.Join(golden, "pod.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(golden, "pod.out.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"-f", "-"}, {"-f", filepath.Join(golden, "pod.in.yaml")}} {
		var out, errb bytes.Buffer
		code := injectCmd(args, bytes.NewReader(in), &out, &errb)
		if code != 0 || !bytes.Equal(out.Bytes(), want) {
			t.Errorf("inject %v: exit %d, stderr %q, stdout:\n%s", args, code, errb.String(), out.String())
		}
		if !strings.Contains(errb.String(), "1 document(s), sidecar in 1: Pod/debug-consumer") {
			t.Errorf("inject %v: stderr %q", args, errb.String())
		}
	}

	// The default image, which no registry publishes yet, is warned
	// about in one line, -q or not; an image of one's own is not.
	const warning = "dedupe-proxy inject: warning: ghcr.io/dedupe-proxy/dedupe-proxy is not published yet, so 1 sidecar(s) cannot pull their image: " +
		"build it from the repository's Dockerfile, push it and pass --image (or annotate dedupe-proxy.io/image)\n"
	for _, args := range [][]string{nil, {"-q"}, {"--image", "ghcr.io/dedupe-proxy/dedupe-proxy:0.2.0"}} {
		var out, errb bytes.Buffer
		if code := injectCmd(args, bytes.NewReader(in), &out, &errb); code != 0 || strings.Count(errb.String(), warning) != 1 {
			t.Errorf("inject %v: exit %d, stderr %q, want the warning once", args, code, errb.String())
		}
	}
	{
		var out, errb bytes.Buffer
		if code := injectCmd([]string{"--image", "registry.example.com/dedupe-proxy:v9"}, bytes.NewReader(in), &out, &errb); code != 0 || strings.Contains(errb.String(), "warning") {
			t.Errorf("inject --image of one's own: exit %d, stderr %q", code, errb.String())
		}
	}

	// Through run, as the binary is called.
	code, _, errOut := cli("inject", "-f", filepath.Join(golden, "nope.yaml"))
	if code != 1 || !strings.Contains(errOut, "nope.yaml") {
		t.Errorf("missing file: exit %d, %q", code, errOut)
	}
	code, _, _ = cli("inject", "extra")
	if code != 2 {
		t.Errorf("positional argument: exit %d, want 2", code)
	}

	// A bad annotation: exit 1, the reason on stderr, nothing on stdout.
	bad := strings.Replace(string(in), `dedupe-proxy.io/inject: "true"`, `dedupe-proxy.io/inject: "yes"`, 1)
	var out, errb bytes.Buffer
	code = injectCmd([]string{"-q"}, strings.NewReader(bad), &out, &errb)
	if code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), `Pod/debug-consumer: metadata.annotations: annotation dedupe-proxy.io/inject: must be "true" or "false", got "yes"`) {
		t.Errorf("bad annotation: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}

	// A shape inject cannot edit: the same, never a pod without its app.
	out.Reset()
	errb.Reset()
	code = injectCmd([]string{"-q", "-f", filepath.Join(golden, "invalid", "containers-string.yaml")}, strings.NewReader(""), &out, &errb)
	if code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), `Deployment/shop/orders: spec.template.spec.containers: want a list, got str "oops"`) {
		t.Errorf("containers: \"oops\": exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestInjectConfigMapLines: the ConfigMap the workload mounts is not in
// the input. With the chart's ConfigMap under another name, a warning
// names the annotation to add, -q or not; with none, a note says what to
// install (not with -q). -f DIR reads a directory's manifests.
func TestInjectConfigMapLines(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other-dedupe-proxy\n  labels: {app.kubernetes.io/name: dedupe-proxy}\n" +
		"data:\n  config.yaml: |\n    admin: {listen: 0.0.0.0:9090}\n"
	const deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: orders, namespace: shop}\nspec:\n  selector: {matchLabels: {app: o}}\n" +
		"  template:\n    metadata:\n      labels: {app: o}\n      annotations: {dedupe-proxy.io/inject: \"true\"}\n" +
		"    spec:\n      containers: [{name: app, image: app:1}]\n"
	const warning = "dedupe-proxy inject: warning: Deployment/shop/orders mounts ConfigMap dedupe-proxy, which is not in the input, " +
		"but the input holds the dedupe-proxy ConfigMap other-dedupe-proxy: add dedupe-proxy.io/config: other-dedupe-proxy to spec.template.metadata.annotations\n"
	const note = "dedupe-proxy inject: note: the input holds no dedupe-proxy ConfigMap; each of these pods starts only once its ConfigMap exists in its namespace " +
		"(Deployment/shop/orders: dedupe-proxy): install the chart in mode shared as a release of that full name " +
		"(release dedupe-proxy: helm install dedupe-proxy ./helm/dedupe-proxy --set mode=shared -f values.yaml), or name the one you have with the annotation dedupe-proxy.io/config\n"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cm), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "orders.yml"), []byte(deploy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		want  string
		not   string
	}{
		{"another name", nil, cm + "---\n" + deploy, warning, "note:"},
		{"another name, -q", []string{"-q"}, cm + "---\n" + deploy, warning, "note:"},
		{"-f DIR", []string{"-f", dir}, "", warning, "note:"},
		{"none", nil, deploy, note, "warning: Deployment"},
		{"none, -q", []string{"-q"}, deploy, "", "note:"},
	} {
		var out, errb bytes.Buffer
		code := injectCmd(tc.args, strings.NewReader(tc.stdin), &out, &errb)
		if code != 0 || !strings.Contains(out.String(), "name: dedupe-proxy\n") {
			t.Errorf("%s: exit %d, stderr %q, stdout:\n%s", tc.name, code, errb.String(), out.String())
			continue
		}
		if (tc.want != "" && strings.Count(errb.String(), tc.want) != 1) || strings.Contains(errb.String(), tc.not) {
			t.Errorf("%s: stderr %q, want %q once and no %q", tc.name, errb.String(), tc.want, tc.not)
		}
		if tc.name == "-f DIR" && !strings.Contains(out.String(), "name: other-dedupe-proxy\n") {
			t.Errorf("-f DIR: the ConfigMap is not in the output:\n%s", out.String())
		}
	}
}
