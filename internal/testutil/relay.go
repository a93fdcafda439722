package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Relay is a TCP proxy a test puts between a client and a broker so it can
// cut the connections without touching the shared broker.
type Relay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	down   bool
	cuts   int
}

// NewRelay listens on a free loopback port and forwards to target.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go r.accept()
	t.Cleanup(func() { _ = ln.Close(); r.Cut() })
	return r
}

// Addr is the relay's host:port.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.down {
			r.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			r.mu.Unlock()
			_ = c.Close()
			continue
		}
		r.conns[c] = struct{}{}
		r.conns[up] = struct{}{}
		r.mu.Unlock()
		go r.pipe(c, up)
		go r.pipe(up, c)
	}
}

func (r *Relay) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	r.mu.Lock()
	delete(r.conns, dst)
	delete(r.conns, src)
	r.mu.Unlock()
}

// Cut closes every open connection; new ones are accepted unless SetDown.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.conns) > 0 {
		r.cuts++
	}
	for c := range r.conns {
		_ = c.Close()
	}
	clear(r.conns)
}

// SetDown refuses (closes at once) new connections while down is true.
func (r *Relay) SetDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

// Open is the number of open connections (both directions counted).
func (r *Relay) Open() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}
