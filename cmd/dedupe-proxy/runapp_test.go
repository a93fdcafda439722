package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// runApp is one `run -- python3 testdata/runapp.py` setup: the app's
// address, the file it writes its events to, and a config that forwards
// queue's messages to it.
type runApp struct {
	addr, admin, log, config, queue string
}

func newRunApp(t *testing.T, queue string) *runApp {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 is needed for the app of the run -- APP tests: %v", err)
	}
	a := &runApp{
		addr:  fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		admin: fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		log:   filepath.Join(t.TempDir(), "app.log"),
		queue: queue,
	}
	if queue == "" {
		queue = "run-app-unused" // never consumed: the proxy does not start
	}
	a.config = writeConfig(t, fmt.Sprintf(`consumer: run-app
admin: {listen: %q}
app: {url: "http://%s", health_url: /healthz}
log: {level: warn}
shutdown_timeout: 5s
seenset: {redis: {addrs: [%q], prefix: %q}}
sources:
  - name: orders
    path: /orders
    rabbitmq: {url: %q, queue: %s}
`, a.admin, a.addr, testutil.RedisAddr(), testutil.UniqueName("dptest:runapp:")+":", testutil.RabbitURL(), queue))
	return a
}

// env is the app's environment, with extra RUNAPP_* settings.
func (a *runApp) env(extra ...string) []string {
	return append(os.Environ(), append([]string{"RUNAPP_ADDR=" + a.addr, "RUNAPP_LOG=" + a.log}, extra...)...)
}

// events are the lines the app wrote.
func (a *runApp) events() []string {
	b, _ := os.ReadFile(a.log)
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
}

// runIn runs the command line in-process with the app's environment.
func runIn(t *testing.T, env []string, args ...string) (int, string, string, time.Duration) {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RUNAPP_") {
			t.Setenv(k, v)
		}
	}
	var out, errb testutil.LogBuffer
	start := time.Now()
	code := run(args, &out, &errb)
	return code, out.String(), errb.String(), time.Since(start)
}

var runAppPy = filepath.Join("testdata", "runapp.py")

// The app exits before it is healthy: exit 1 naming the app and its exit
// status, and its output passed through.
func TestRunAppExitsBeforeHealthy(t *testing.T) {
	a := newRunApp(t, "")
	code, out, errOut, took := runIn(t, a.env("RUNAPP_EXIT=3"), "run", "--config", a.config, "--", "python3", runAppPy)
	want := "run: the app (python3 " + runAppPy + ") exited before app.health_url /healthz answered 2xx: exit status 3\n"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, errOut, want)
	}
	if !strings.Contains(out, "runapp: exiting at once\n") {
		t.Errorf("the app's stdout was not passed through: %q", out)
	}
	if took > 10*time.Second {
		t.Errorf("took %s to notice the app had exited", took)
	}
}

// An app whose health URL never answers 2xx is stopped after
// --app-ready-timeout (SIGTERM, waited for), and run exits 1 saying why.
// The bound leaves python3 time to start listening on a loaded machine
// (at 1.5 s the last probe was sometimes refused, not answered 503).
func TestRunAppNeverHealthy(t *testing.T) {
	a := newRunApp(t, "")
	code, _, errOut, took := runIn(t, a.env("RUNAPP_HEALTH=503"), "run", "--config", a.config, "--app-ready-timeout", "4s", "--", "python3", runAppPy)
	want := "run: the app (python3 " + runAppPy + ") did not answer app.health_url /healthz with 2xx within --app-ready-timeout 4s (last: forward: probe http://" + a.addr + "/healthz: status 503); stopping it\n"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, errOut, want)
	}
	if took < 4*time.Second || took > 12*time.Second {
		t.Errorf("took %s, want about 4s (the bound) plus the app's 0.3s stop", took)
	}
	if ev := a.events(); len(ev) < 3 || ev[len(ev)-2] != "signal_15" || ev[len(ev)-1] != "exited" {
		t.Errorf("the app was not stopped with SIGTERM and waited for: %v", ev)
	}
}

// A config without app.health_url: run -- APP cannot tell when the app is
// up, says which field to set, and starts nothing.
func TestRunAppNeedsHealthURL(t *testing.T) {
	cfg := writeConfig(t, "consumer: c\nsources: [{name: orders, rabbitmq: {queue: orders}}]\n")
	marker := filepath.Join(t.TempDir(), "started")
	code, _, errOut, _ := runIn(t, nil, "run", "--config", cfg, "--", "touch", marker)
	if code != 1 || !strings.Contains(errOut, "run: app.health_url is not set") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the app was started")
	}
}

// The app exits by itself while the proxy runs: the proxy stops and run
// exits 1 naming the app's exit status.
func TestRunAppExitsWhileProxyRuns(t *testing.T) {
	rabbit := testutil.NewRabbit(t)
	a := newRunApp(t, rabbit.Queue("run-app-dies-", nil))
	code, _, errOut, _ := runIn(t, a.env("RUNAPP_DIE=2"), "run", "--config", a.config, "--", "python3", runAppPy)
	want := "run: the app (python3 " + runAppPy + ") exited while the proxy was running: exit status 4; stopping the proxy\n"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, errOut, want)
	}
	if !strings.Contains(errOut, "run: the app is up") {
		t.Errorf("the proxy did not start before the app died:\n%s", errOut)
	}
}

// End to end, as a process: run -- APP forwards a RabbitMQ queue's
// first-time messages to the child app and acks the duplicate; SIGTERM or
// SIGINT stops the proxy, reaches the app, and run exits 0 only after the
// app exited.
func TestRunAppForwardsAndForwardsSignals(t *testing.T) {
	rabbit := testutil.NewRabbit(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			a := newRunApp(t, rabbit.Queue("run-app-", nil))
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "run", "--config", a.config, "--", "python3", runAppPy)
			cmd.Env = append(a.env(), asCLI+"=1")
			var stdout, stderr testutil.LogBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				if t.Failed() {
					t.Logf("stderr:\n%s\napp events: %v", stderr.String(), a.events())
				}
			})
			testutil.Eventually(t, 20*time.Second, "the proxy's /readyz?deps=1 to answer 200", func() bool {
				resp, err := http.Get("http://" + a.admin + "/readyz?deps=1")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
			for _, id := range []string{"order-1", "order-1", "order-2"} {
				rabbit.Publish(a.queue, amqp.Publishing{ContentType: "application/json", Body: []byte(`{"meta":{"id":"` + id + `"}}`)})
			}
			dup := `dedupe_proxy_messages_total{result="duplicate",source="orders"} 1`
			testutil.Eventually(t, 20*time.Second, "two forwards and one duplicate", func() bool {
				resp, err := http.Get("http://" + a.admin + "/metrics")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return strings.Contains(string(b), dup) && len(a.events()) >= 3
			})
			// Any order: the source's workers forward concurrently, and
			// nothing promises order-1 before order-2.
			if ev := a.events(); len(ev) != 3 || !slices.Equal(sorted(ev[1:]), []string{"POST_/orders_order-1", "POST_/orders_order-2"}) {
				t.Fatalf("app events %v, want started, then order-1 and order-2 once each", ev)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run after %v: %v", sig, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("run did not stop within 20s of %v", sig)
			}
			// Read when run has exited: the app's last line is there already.
			if ev := a.events(); len(ev) != 5 || ev[3] != fmt.Sprintf("signal_%d", int(sig)) || ev[4] != "exited" {
				t.Errorf("app events after run exited: %v, want the %v and the app's exit last", ev, sig)
			}
			if !strings.Contains(stdout.String(), "runapp: listening on "+a.addr+"\n") {
				t.Errorf("the app's stdout was not passed through: %q", stdout.String())
			}
			if n := rabbit.Ready(a.queue); n != 0 {
				t.Errorf("%d messages left in the queue", n)
			}
		})
	}
}

// The app's lines are prefixed "app | ", whole lines or parts of one,
// each write at once.
func TestPrefixLines(t *testing.T) {
	var b strings.Builder
	w := prefixLines(&b, "app | ")
	for _, s := range []string{"one\ntwo\n", "thr", "ee\n", "\n", "last, unfinished"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if want := "app | one\napp | two\napp | three\napp | \napp | last, unfinished"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// run -- APP logs text by default (a person reads it in the app's
// terminal), JSON when log.format says so; the app's lines are prefixed.
func TestRunAppTextLogsAndPrefixedLines(t *testing.T) {
	rabbit := testutil.NewRabbit(t)
	for _, format := range []string{"", "json"} {
		t.Run("format="+format, func(t *testing.T) {
			a := newRunApp(t, rabbit.Queue("run-app-log-", nil))
			cfg, _ := os.ReadFile(a.config)
			logLine := "log: {level: info}"
			if format != "" {
				logLine = "log: {level: info, format: " + format + "}"
			}
			if err := os.WriteFile(a.config, []byte(strings.Replace(string(cfg), "log: {level: warn}", logLine, 1)), 0o600); err != nil {
				t.Fatal(err)
			}
			// As a process: the proxy's logger writes to the process's stderr.
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "run", "--config", a.config, "--", "python3", runAppPy)
			cmd.Env = append(a.env("RUNAPP_DIE=1"), asCLI+"=1")
			var stdout, stderr testutil.LogBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			out, errOut := stdout.String(), stderr.String()
			if err == nil || !strings.Contains(out, "app | runapp: listening on "+a.addr+"\n") {
				t.Fatalf("run: %v (want exit 1); the app's stdout unprefixed: %q\nstderr:\n%s", err, out, errOut)
			}
			text, json := strings.Contains(errOut, "level=INFO msg=stopped"), strings.Contains(errOut, `"msg":"stopped"`)
			if format == "" && (!text || json) || format == "json" && (text || !json) {
				t.Errorf("log.format %q: stderr:\n%s", format, errOut)
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
