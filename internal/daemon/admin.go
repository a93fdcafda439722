package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
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
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := d.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	return mux
}
