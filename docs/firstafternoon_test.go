package docs

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The page first-afternoon.md is run by TestFirstAfternoon: every sh block
// in order, a section (## heading) per subtest. HTML comments steer it:
//
//	<!-- test: file PATH -->                 the next block is written to PATH
//	<!-- test: background until "TEXT" -->   the next block runs in the background
//	                                         until its output has TEXT
//	<!-- test: interrupt -->                 SIGINT to the background block, which
//	                                         must then exit 0
//
// Lines "#=> TEXT" in a block are output the block must print; such a
// block is run again for a while until it does (what it checks happens
// asynchronously). Names, the afternoon/ directory and the ports are
// replaced with the test's own, so it runs beside other tests.
const afternoonPage = "first-afternoon.md"

type step struct {
	kind  string // "file", "sh", "background", "interrupt"
	path  string // file: where it goes
	until string // background: the output that says it is up
	body  string
	line  int
}

type section struct {
	title string
	steps []step
}

func parsePage(t *testing.T, text string) []section {
	t.Helper()
	var (
		secs    []section
		pending string // the marker waiting for its block
		inBlock bool
		lang    string
		body    strings.Builder
		start   int
	)
	add := func(s step) {
		if len(secs) == 0 {
			t.Fatalf("%s:%d: a step before the first ## section", afternoonPage, s.line)
		}
		secs[len(secs)-1].steps = append(secs[len(secs)-1].steps, s)
	}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if inBlock {
			if strings.HasPrefix(line, "```") {
				inBlock = false
				s := step{body: body.String(), line: start}
				switch {
				case strings.HasPrefix(pending, "file "):
					s.kind, s.path = "file", strings.TrimPrefix(pending, "file ")
				case strings.HasPrefix(pending, "background until "):
					if lang != "sh" {
						t.Fatalf("%s:%d: background needs an sh block", afternoonPage, start)
					}
					s.kind, s.until = "background", strings.Trim(strings.TrimPrefix(pending, "background until "), `"`)
				case pending != "":
					t.Fatalf("%s:%d: unknown marker %q", afternoonPage, start, pending)
				case lang == "sh":
					s.kind = "sh"
				}
				if s.kind != "" {
					add(s)
				}
				pending = ""
				continue
			}
			body.WriteString(line + "\n")
			continue
		}
		switch {
		case strings.HasPrefix(line, "## "):
			secs = append(secs, section{title: strings.TrimPrefix(line, "## ")})
		case strings.HasPrefix(line, "<!-- test: ") && strings.HasSuffix(line, " -->"):
			m := strings.TrimSuffix(strings.TrimPrefix(line, "<!-- test: "), " -->")
			if m == "interrupt" {
				add(step{kind: "interrupt", line: n})
			} else {
				pending = m
			}
		case strings.HasPrefix(line, "```"):
			inBlock, lang, start = true, strings.TrimPrefix(line, "```"), n
			body.Reset()
		}
	}
	if inBlock {
		t.Fatalf("%s:%d: block never closed", afternoonPage, start)
	}
	return secs
}

// syncBuf collects a background command's output.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type background struct {
	cmd  *exec.Cmd
	out  *syncBuf
	done chan error
	line int
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestFirstAfternoon runs docs/first-afternoon.md (about a minute and a
// half, most of it make demo; needs RabbitMQ, Redis, python3, curl,
// amqp-tools, and helm for its section 3).
func TestFirstAfternoon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make demo and the proxy against RabbitMQ and Redis")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(afternoonPage)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"amqp-declare-queue", "amqp-publish", "amqp-delete-queue", "curl", "python3", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run %s (amqp-tools: apt-get install amqp-tools; .ci/run installs it): %v", tool, afternoonPage, err)
		}
	}
	dir := t.TempDir()
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	queue := "afternoon-orders-" + id
	subst := strings.NewReplacer(
		"afternoon-orders", queue,
		"afternoon-worker", "afternoon-worker-"+id,
		"afternoon/", dir+"/",
		"127.0.0.1:8080", freeAddr(t),
		"127.0.0.1:9090", freeAddr(t),
	)
	t.Cleanup(func() {
		for _, q := range []string{queue, queue + ".dead"} {
			_ = exec.Command("amqp-delete-queue", "-q", q).Run()
		}
	})
	// helm where make chart-check puts it, or $HELM.
	path := os.Getenv("PATH")
	if h := os.Getenv("HELM"); h != "" {
		path = filepath.Dir(h) + string(os.PathListSeparator) + path
	}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		path += string(os.PathListSeparator) + filepath.Join(strings.TrimSpace(string(gopath)), "bin")
	}
	env := append(os.Environ(), "PATH="+path)

	var bg *background
	stop := func(t *testing.T, s step) {
		t.Helper()
		if bg == nil {
			t.Fatalf("%s:%d: interrupt with nothing in the background", afternoonPage, s.line)
		}
		b := bg
		bg = nil
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGINT)
		select {
		case err := <-b.done:
			if err != nil {
				t.Fatalf("%s:%d: the background command exited with %v after SIGINT:\n%s", afternoonPage, b.line, err, b.out.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s:%d: the background command did not stop within 30s of SIGINT:\n%s", afternoonPage, b.line, b.out.String())
		}
	}
	t.Cleanup(func() {
		if bg != nil {
			if t.Failed() {
				t.Logf("%s:%d: output of the background command:\n%s", afternoonPage, bg.line, bg.out.String())
			}
			_ = syscall.Kill(-bg.cmd.Process.Pid, syscall.SIGKILL)
			if err := <-bg.done; err == nil {
				t.Logf("%s:%d: the background command had exited by itself", afternoonPage, bg.line)
			}
		}
	})

	for _, sec := range parsePage(t, string(raw)) {
		ok := t.Run(sec.title, func(t *testing.T) {
			for _, s := range sec.steps {
				body := subst.Replace(s.body)
				switch s.kind {
				case "file":
					p := subst.Replace(s.path)
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				case "sh":
					if strings.HasPrefix(body, "helm ") {
						if _, err := exec.LookPath("helm"); err != nil && !onPath(path, "helm") {
							t.Skipf("%s:%d: helm is not installed (make chart-check builds it into $(go env GOPATH)/bin; or set HELM)", afternoonPage, s.line)
						}
					}
					runBlock(t, root, env, s, body)
				case "background":
					if bg != nil {
						t.Fatalf("%s:%d: a second background command while the one of line %d runs", afternoonPage, s.line, bg.line)
					}
					cmd := exec.Command("bash", "-c", body)
					cmd.Dir, cmd.Env = root, env
					cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
					out := &syncBuf{}
					cmd.Stdout, cmd.Stderr = out, out
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					bg = &background{cmd: cmd, out: out, done: make(chan error, 1), line: s.line}
					go func(b *background) { b.done <- b.cmd.Wait() }(bg)
					deadline := time.Now().Add(60 * time.Second)
					for !strings.Contains(out.String(), s.until) {
						select {
						case err := <-bg.done:
							bg = nil
							t.Fatalf("%s:%d: exited (%v) before printing %q:\n%s", afternoonPage, s.line, err, s.until, out.String())
						case <-time.After(100 * time.Millisecond):
						}
						if time.Now().After(deadline) {
							t.Fatalf("%s:%d: no %q within 60s:\n%s", afternoonPage, s.line, s.until, out.String())
						}
					}
				case "interrupt":
					stop(t, s)
				}
			}
		})
		if !ok {
			break // the later sections build on this one
		}
	}
}

func onPath(path, name string) bool {
	for _, d := range filepath.SplitList(path) {
		if fi, err := os.Stat(filepath.Join(d, name)); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}

// runBlock runs one sh block with bash -e -o pipefail; with "#=>" lines,
// again for up to 20s until its output has each of them.
func runBlock(t *testing.T, root string, env []string, s step, body string) {
	t.Helper()
	var want []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if l, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "#=> "); ok {
			want = append(want, l)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", body)
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.CombinedOutput()
		cancel()
		missing := ""
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				missing = w
				break
			}
		}
		if err == nil && missing == "" {
			return
		}
		if len(want) == 0 || time.Now().After(deadline) {
			t.Fatalf("%s:%d: %v, missing %q; the block:\n%s\noutput:\n%s", afternoonPage, s.line, err, missing, body, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
