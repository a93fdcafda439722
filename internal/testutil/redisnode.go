package testutil

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// RedisNode is one redis-server (or sentinel) process of a multi-node set-up
// (RedisCluster, RedisSentinel). Unlike RedisServer it is not tied to one
// test: a set-up is started once and shared by every test of a package,
// which closes it when the package's tests are done.
type RedisNode struct {
	Port int
	dir  string
	args []string // without the port and dir, which start adds

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *syncBuffer
}

// Addr is 127.0.0.1:<port>, stable across Restart.
func (n *RedisNode) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) }

// Dir is the node's own working directory (its nodes.conf, sentinel.conf).
func (n *RedisNode) Dir() string { return n.dir }

func newRedisNode(dir string, args ...string) (*RedisNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &RedisNode{Port: port, dir: dir, args: args}, nil
}

// start runs the process and waits until it answers PING.
func (n *RedisNode) start() error { return n.startWith() }

// startWith starts the process with extra arguments for this start only.
func (n *RedisNode) startWith(extra ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server is not on PATH (install it, e.g. apt-get install redis-server): %w", err)
	}
	args := append([]string{}, n.args...)
	args = append(args, extra...)
	args = append(args, "--port", strconv.Itoa(n.Port), "--bind", "127.0.0.1", "--dir", n.dir,
		"--daemonize", "no", "--logfile", "")
	cmd := exec.Command(bin, args...)
	cmd.Dir = n.dir
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited early:\n%s", n.Port, out.String())
		default:
		}
		if ping(n.Addr()) == nil {
			n.cmd, n.done, n.out = cmd, done, out
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d not ready after %v:\n%s", n.Port, readyTimeout, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill sends SIGKILL (a crash, an OOM kill) and returns once the process
// is gone. Killing a stopped node does nothing.
func (n *RedisNode) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies only once resumed
	_ = n.cmd.Process.Kill()
	<-n.done
	n.cmd, n.done = nil, nil
}

// Restart starts a killed node again on the same port and directory: a
// Cluster node finds its nodes.conf and rejoins (as a replica when its
// slots moved meanwhile); its data is gone, as these nodes keep none.
func (n *RedisNode) Restart() error { return n.start() }

// RestartAsReplicaOf starts a stopped node as a replica of master
// (host:port), as a node managed by Sentinel must come back after a
// failover: restarted empty as a master it would take writes until the
// sentinels demote it, and lose them then.
func (n *RedisNode) RestartAsReplicaOf(master string) error {
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		return err
	}
	return n.startWith("--replicaof", host, port)
}

// Running reports whether the process is up.
func (n *RedisNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Pause freezes the process (SIGSTOP) and Resume lets it go on: a replica
// paused for a while falls behind its master as a slow or partitioned
// one would.
func (n *RedisNode) Pause() error  { return n.signal(syscall.SIGSTOP) }
func (n *RedisNode) Resume() error { return n.signal(syscall.SIGCONT) }

func (n *RedisNode) signal(s syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return errors.New("redis node not running")
	}
	return n.cmd.Process.Signal(s)
}

// Output is the start of the process' log, for failure messages.
func (n *RedisNode) Output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.out == nil {
		return ""
	}
	return n.out.String()
}

// freePort is FreePort without a test to fail.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startNodes starts every node, a few at a time is no faster on two cores.
func startNodes(nodes []*RedisNode) error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.start(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
