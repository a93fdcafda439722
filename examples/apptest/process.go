package apptest

import (
	"fmt"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StartProcess runs cmd with LISTEN_ADDR (a free loopback port) and
// DATABASE_URL set, waits until it answers /healthz, and stops it with
// SIGTERM (SIGKILL after 10s, an error) when t ends, with a connection
// open that has carried no request. Its output is shown if the
// test fails.
func StartProcess(t *testing.T, databaseURL string, cmd *exec.Cmd) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out := &syncBuffer{}
	cmd.Env = append(cmd.Environ(), "LISTEN_ADDR="+addr, "DATABASE_URL="+databaseURL)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// A client may hold a connection it has sent nothing on yet (Go's
		// HTTP client dials ahead of need); an app that waits for every
		// connection to close never stops. CI once caught the Node example
		// so, by chance: open one on every stop.
		if c, err := net.Dial("tcp", addr); err == nil {
			defer c.Close()
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not stop within 10s of SIGTERM", cmd.Path)
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", cmd.Path, out.String())
		}
	})
	base := "http://" + addr
	WaitHealthy(t, base, exited, out.String)
	return base
}

type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(string(s.b))
}
