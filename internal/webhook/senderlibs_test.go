package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// jsDir is where the senders' signing libraries of testdata/js live,
// installed from its lockfile once per lockfile into the user's cache
// (never into the repository): the path holding node_modules.
func jsDir(t *testing.T) string {
	t.Helper()
	return tu.NodeModules(t, filepath.Join("testdata", "js"), "webhook-js", "the test that signs with Svix's and Standard Webhooks' own libraries")
}

// runListener runs a Listener for h on a free loopback port until the
// test ends and returns its address.
func runListener(t *testing.T, lo ListenerOptions, h *Handler) string {
	t.Helper()
	if lo.Listen == "" {
		lo.Listen = "127.0.0.1:0"
	}
	if lo.Path == "" {
		lo.Path = "/webhook"
	}
	if lo.WriteTimeout == 0 {
		lo.WriteTimeout = 30 * time.Second
	}
	l := NewListener(lo, h, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("listener: %v", err)
		}
	})
	tu.Eventually(t, 5*time.Second, "listener bound", func() bool { return l.Addr() != "" })
	return l.Addr()
}

// Svix's and Standard Webhooks' own libraries sign (Svix with its default
// svix-* headers, the other with webhook-*); a listener of ours takes the
// signed events (200, forwarded once with Idempotency-Key = the event id)
// and refuses the tampered ones (401).
func TestSenderLibrariesSignaturesAccepted(t *testing.T) {
	dir := jsDir(t)
	run := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "js", "send.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "send.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(run, "node_modules")); err != nil {
		t.Fatal(err)
	}

	app := tu.NewApp(t)
	// The allowlist would pass the signature headers on if the handler
	// kept them: it must not.
	fwd, err := forward.New(forward.Config{URL: app.URL, Timeout: 5 * time.Second,
		HeaderAllowlist: []string{"Svix-Id", "Webhook-Id", "Svix-Signature", "Webhook-Signature"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	v, err := NewVerifier(ProfileStandard, []string{testSecret}, 5*time.Minute, Generic{})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Name: "hooks", Prefix: tu.UniqueName("whtest:") + ":", Profile: ProfileStandard, Verifier: v,
		Store: newStore(t, tu.RedisAddr()), Lease: 3 * time.Second, TTL: time.Hour, BusyDelay: time.Second,
		Forwarder: fwd, AppPath: "/hooks", MaxBodyBytes: 1 << 16, MaxConcurrent: 4, CommitAttempts: 3,
		OpTimeout: 2 * time.Second, Logger: testLogger()}
	addr := runListener(t, ListenerOptions{Name: "hooks", ReadTimeout: 5 * time.Second}, NewHandler(o))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "send.mjs", "http://"+addr+"/webhook", testSecret)
	cmd.Dir = run
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node send.mjs: %v\n%s", err, stderr.String())
	}
	want := map[string]int{"svix": 200, "svix-tampered": 401, "standardwebhooks": 200, "standardwebhooks-tampered": 401}
	ids := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Name, ID string
			Status   int
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("script printed %q: %v", line, err)
		}
		w, ok := want[r.Name]
		if !ok {
			t.Fatalf("unexpected case %q", r.Name)
		}
		if r.Status != w {
			t.Errorf("%s: answered %d, want %d", r.Name, r.Status, w)
		}
		delete(want, r.Name)
		ids[r.Name] = r.ID
	}
	if len(want) != 0 {
		t.Fatalf("cases never reported: %v", want)
	}
	eff := app.Effects()
	for _, name := range []string{"svix", "standardwebhooks"} {
		if eff[ids[name]] != 1 {
			t.Errorf("%s event %s reached the app %d times, want once (effects %v)", name, ids[name], eff[ids[name]], eff)
		}
	}
	if app.Count() != 2 {
		t.Errorf("app got %d requests, want 2 (nothing tampered)", app.Count())
	}
	for _, r := range app.Requests() {
		if r.Header.Get("Svix-Signature") != "" || r.Header.Get("Webhook-Signature") != "" {
			t.Errorf("signature passed on to the app: %v", r.Header)
		}
		if id := r.Header.Get("Svix-Id") + r.Header.Get("Webhook-Id"); id != r.Key {
			t.Errorf("request with Idempotency-Key %q carries the sender's id %q", r.Key, id)
		}
	}
}
