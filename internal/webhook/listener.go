package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Listener serves one webhook source on its own address; the daemon runs
// it beside the broker sources and lists it in /readyz.
type Listener struct {
	name, addr, path string
	h                *Handler
	sink             Sink
	readTimeout      time.Duration
	writeTimeout     time.Duration
	drainTimeout     time.Duration

	mu  sync.Mutex
	ln  net.Listener
	srv *http.Server
}

// ListenerOptions configure a Listener.
type ListenerOptions struct {
	Name   string
	Listen string // host:port
	Path   string
	// ReadTimeout bounds reading a request, headers and body; a sender
	// trickling bytes cannot hold a slot longer.
	ReadTimeout time.Duration
	// WriteTimeout bounds the whole request, including storing the event.
	WriteTimeout time.Duration
	// DrainTimeout bounds how long a stop waits for forwards still open
	// at the app after their senders were answered (shutdown_timeout).
	DrainTimeout time.Duration
}

// NewListener wraps h; sink, when not nil, is run and closed with it.
func NewListener(o ListenerOptions, h *Handler, sink Sink) *Listener {
	return &Listener{name: o.Name, addr: o.Listen, path: o.Path, h: h, sink: sink,
		readTimeout: o.ReadTimeout, writeTimeout: o.WriteTimeout, drainTimeout: o.DrainTimeout}
}

// Name is the source's name.
func (l *Listener) Name() string { return l.name }

// Addr is the bound address once Run listens ("" before).
func (l *Listener) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return ""
	}
	return l.ln.Addr().String()
}

var errNotListening = errors.New("webhook: not listening")

// Ready is nil while the listener is bound and, in enqueue mode, the
// broker can take a publish.
func (l *Listener) Ready() error {
	l.mu.Lock()
	bound := l.ln != nil
	l.mu.Unlock()
	if !bound {
		return errNotListening
	}
	if l.sink != nil {
		return l.sink.Ready()
	}
	return nil
}

type runner interface{ Run(ctx context.Context) }

// Run listens and serves until ctx ends, then stops taking requests and
// lets those in progress finish. A listener that cannot bind is an error
// retrying cannot fix.
func (l *Listener) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return fmt.Errorf("webhook listen %s: %w", l.addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(l.path, l.h)
	if l.path != "/" {
		mux.HandleFunc("/", l.notFound)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: l.readTimeout,
		ReadTimeout:       l.readTimeout,
		WriteTimeout:      l.writeTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	l.mu.Lock()
	l.ln, l.srv = ln, srv
	l.mu.Unlock()

	var wg sync.WaitGroup
	sctx, stopSink := context.WithCancel(ctx)
	if r, ok := l.sink.(runner); ok {
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(sctx) }()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		// In-flight requests finish first: each is bounded by the write
		// timeout, and the sink must stay up until they have published.
		_ = srv.Shutdown(context.Background())
		l.h.Drain(l.drainTimeout)
		err = nil
	case err = <-serveErr:
		err = fmt.Errorf("webhook listener: %w", err)
	}
	stopSink()
	wg.Wait()
	return err
}

// notFound answers a request outside the source's path. A sender
// configured with a wrong URL sees only the status in its delivery log;
// naming the path taken turns a silent 404 into the fix.
func (l *Listener) notFound(w http.ResponseWriter, r *http.Request) {
	takes := "POST " + l.path
	if strings.HasSuffix(l.path, "/") {
		takes += " (and the paths under it)"
	}
	path := r.URL.Path
	if len(path) > 256 {
		path = path[:256] + "..."
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, "404 no webhook at %q: this listener takes %s\n", path, takes)
}

// Close closes the listener and the sink; safe to call twice.
func (l *Listener) Close() error {
	l.mu.Lock()
	srv := l.srv
	l.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	if l.sink != nil {
		return l.sink.Close()
	}
	return nil
}
