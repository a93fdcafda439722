package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// replica is one dedupe-proxy process that the demo kills and restarts.
type replica struct {
	n        int
	bin, cfg string
	dir      string
	env      []string
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	admin    string
	starts   int
}

func (r *replica) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	r.admin = l.Addr().String()
	l.Close()
	r.starts++
	logf, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("proxy-%d-%03d.log", r.n, r.starts)))
	if err != nil {
		return err
	}
	cmd := exec.Command(r.bin, "run", "--config", r.cfg)
	cmd.Env = append(append(os.Environ(), r.env...), "DEDUPE_PROXY_ADMIN_LISTEN="+r.admin)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", r.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	r.cmd, r.done = cmd, done
	return nil
}

// pid is the running process's id, 0 when none runs.
func (r *replica) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// kill SIGKILLs the process: no drain, no release, no ack — a crash.
func (r *replica) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
	r.cmd = nil
}

// term stops the process gracefully and returns its exit code.
func (r *replica) term() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return 0, nil
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(40 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
		r.cmd = nil
		return -1, fmt.Errorf("proxy %d did not exit within 40s of SIGTERM (logs in %s)", r.n, r.dir)
	}
	code := r.cmd.ProcessState.ExitCode()
	r.cmd = nil
	return code, nil
}

func (r *replica) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		admin, done := r.admin, r.done
		r.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("proxy %d exited at start (logs in %s)", r.n, r.dir)
		default:
		}
		if resp, err := http.Get("http://" + admin + "/readyz?deps=1"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("proxy %d not ready after %s (logs in %s)", r.n, timeout, r.dir)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
