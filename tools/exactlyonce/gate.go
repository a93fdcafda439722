package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// gate sits between one proxy replica and the app. It passes every request
// through unchanged, remembers which keys the app answered 2xx and when,
// and, when armed, SIGKILLs its replica the moment the app's 2xx has been
// written back to it: the app has committed its effect, and the proxy is
// gone before it can record the key as done. That is the one window in
// which a message reaches the app twice; a random kill lands in it only
// now and then, so the demo aims for it.
type gate struct {
	app    string
	client *http.Client
	pid    func() int
	srv    *http.Server
	addr   string

	mu     sync.Mutex
	armed  bool
	killed chan time.Time // when an armed kill happened
}

func newGate(app string, pid func() int) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gate{
		app:    app,
		pid:    pid,
		addr:   ln.Addr().String(),
		killed: make(chan time.Time, 1),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	}
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

func (g *gate) close() { _ = g.srv.Close() }

// arm makes the next 2xx kill the replica; the moment comes out of
// killed.
func (g *gate) arm() {
	// A kill that raced the previous disarm must not stand for this one.
	select {
	case <-g.killed:
	default:
	}
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *gate) disarm() {
	g.mu.Lock()
	g.armed = false
	g.mu.Unlock()
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, g.app+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := g.client.Do(req)
	if err != nil {
		// The proxy treats a 502 as retryable, as it would the refused
		// connection this stands for.
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	kill := false
	if resp.StatusCode/100 == 2 {
		g.mu.Lock()
		kill, g.armed = g.armed, false
		g.mu.Unlock()
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
	if kill {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		if pid := g.pid(); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case g.killed <- time.Now():
		default:
		}
	}
}
