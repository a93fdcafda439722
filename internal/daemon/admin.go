package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func tlsConfig() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }

func (d *Daemon) startAdmin() error {
	if d.cfg.Admin.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", d.cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen %s: %w", d.cfg.Admin.Listen, err)
	}
	d.adminLn = ln
	d.admin = &http.Server{Handler: d.adminMux(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.admin.Serve(ln) }()
	return nil
}

func (d *Daemon) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if f := d.failed.Load(); f != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte((*f).Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	// One line per check, "name: ok", "name: <why>" or "name: warning:
	// <what>"; 503 unless all pass (a warning passes).
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		var b strings.Builder
		status := http.StatusOK
		for _, c := range d.checks(ctx) {
			if c.err != nil {
				status = http.StatusServiceUnavailable
				// "seenset: seenset: store unavailable" says it twice.
				fmt.Fprintf(&b, "%s: %s\n", c.name, strings.TrimPrefix(c.err.Error(), c.name+": "))
				continue
			}
			if c.warn != "" {
				fmt.Fprintf(&b, "%s: warning: %s\n", c.name, c.warn)
				continue
			}
			fmt.Fprintf(&b, "%s: ok\n", c.name)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(b.String()))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	if d.keysAPI != nil {
		// Without a token the routes do not exist: 404.
		mux.Handle("/v1/keys/", d.keysAPI)
	}
	if d.cfg.Admin.Pprof {
		// Registered on our mux: importing net/http/pprof also fills
		// http.DefaultServeMux, which nothing serves.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
