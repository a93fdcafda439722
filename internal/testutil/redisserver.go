// Package testutil holds helpers shared by tests of several packages.
package testutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RedisServer is a private redis-server process for tests that must break
// Redis (kill, restart) without disturbing the shared server other tests use.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	// persist keeps data across Kill/Restart (AOF, fsync always), as a
	// production Redis with persistence or a replica would.
	persist bool
	// extra are further redis-server arguments, after the defaults so
	// they override them.
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

const (
	readyTimeout = 10 * time.Second
	closeTimeout = 5 * time.Second
)

// StartRedis starts redis-server from PATH on a free 127.0.0.1 port, without
// persistence, and waits until it answers PING. The server is killed when
// the test ends.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	return startRedis(t, false)
}

// StartRedisPersistent is StartRedis with an append-only file fsync'd on
// every write, so the data survives Kill and Restart.
func StartRedisPersistent(t testing.TB) *RedisServer {
	t.Helper()
	return startRedis(t, true)
}

// StartRedisWith is StartRedis with further redis-server arguments, which
// override the defaults (e.g. "--maxmemory-policy", "volatile-lru" or
// "--appendonly", "yes"), for tests of how the proxy reads a server's
// configuration.
func StartRedisWith(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	return startRedis(t, false, args...)
}

func startRedis(t testing.TB, persist bool, extra ...string) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testutil: redis-server is not on PATH (install it, e.g. apt-get install redis-server): %v", err)
	}
	dir := t.TempDir()
	// FreePort's port can be taken by someone else before redis binds it;
	// try a few.
	var errs []string
	for range 3 {
		s := &RedisServer{t: t, bin: bin, dir: dir, port: FreePort(t), persist: persist, extra: extra}
		if err := s.start(); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		t.Cleanup(s.Kill)
		return s
	}
	t.Fatalf("testutil: could not start redis-server:\n%s", strings.Join(errs, "\n"))
	return nil
}

// Addr is host:port, stable across Restart.
func (s *RedisServer) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Kill sends SIGKILL, as a crash or OOM kill would, and returns once the
// process is gone and the port refuses connections. Killing a stopped
// server does nothing.
func (s *RedisServer) Kill() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
	deadline := time.Now().Add(closeTimeout)
	for {
		c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond)
		if err != nil {
			return
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			// Errorf, not Fatalf: Kill also runs as a cleanup.
			s.t.Errorf("testutil: %s still accepts connections %v after redis-server was killed", s.Addr(), closeTimeout)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Written returns the write commands the server made durable, in the
// order of its append-only file, each as its arguments (a script's
// writes appear as the commands it ran). Only a server started with
// StartRedisPersistent has one. It tells a test whether a command whose
// reply was lost to a kill was applied before the kill.
func (s *RedisServer) Written() ([][]string, error) {
	if !s.persist {
		return nil, fmt.Errorf("testutil: %s keeps no append-only file (start it with StartRedisPersistent)", s.Addr())
	}
	// Redis 7 keeps a base file (RDB, empty here: --save "" and no
	// rewrite) and incremental files of commands in appendonlydir.
	files, err := filepath.Glob(filepath.Join(s.dir, "appendonlydir", "*.incr.aof"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files) // the sequence number is one digit in a test's life
	var cmds [][]string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := bufio.NewReader(bytes.NewReader(raw))
		for {
			cmd, err := readCommand(r)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("testutil: %s: %w", f, err)
			}
			cmds = append(cmds, cmd)
		}
	}
	return cmds, nil
}

// readCommand reads one RESP array of bulk strings, as an append-only
// file holds them; io.EOF at a clean end. A torn tail (the kill came
// mid-write) is io.EOF too: Redis itself truncates it on load.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, io.EOF
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("want an array, read %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, fmt.Errorf("array length %q: %w", line, err)
	}
	cmd := make([]string, 0, n)
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, io.EOF
		}
		if !strings.HasPrefix(line, "$") {
			return nil, fmt.Errorf("want a bulk string, read %q", line)
		}
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return nil, fmt.Errorf("bulk length %q: %w", line, err)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, io.EOF
		}
		cmd = append(cmd, string(buf[:size]))
	}
	return cmd, nil
}

// Restart starts the server again on the same port (killing it first if it
// is running) and waits until it answers PING. Its data is gone unless it
// was started with StartRedisPersistent.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("testutil: restarting redis-server on %s: %v", s.Addr(), err)
	}
}

func (s *RedisServer) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	aof := "no"
	if s.persist {
		aof = "yes"
	}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", aof,
		"--appendfsync", "always",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
	}
	cmd := exec.Command(s.bin, append(args, s.extra...)...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited early:\n%s", s.port, out.String())
		default:
		}
		if ping(s.Addr()) == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d not ready after %v:\n%s", s.port, readyTimeout, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping speaks RESP directly so that testutil needs no Redis client and a
// client bug cannot mask a server problem.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "-NOAUTH") {
		// A server with requirepass (a sentinel of RedisSentinel's
		// SentinelPassword) answers only after AUTH, but it is up.
		return nil
	}
	if line != "+PONG\r\n" {
		// "-LOADING ..." while the server starts.
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testutil: no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// syncBuffer collects the server's output for error messages; the process
// writes it from os/exec's copying goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Keep only the start: a server that fails to start says why at once.
	if room := 64<<10 - b.buf.Len(); room > 0 {
		if len(p) > room {
			b.buf.Write(p[:room])
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
