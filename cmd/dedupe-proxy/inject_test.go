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
