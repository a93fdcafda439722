package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminLimits bound what one client can hold of the admin server: a
// connection that trickles its headers or body, reads its answer slowly or
// idles in keep-alive is closed.
type adminLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
}

// defaultAdminLimits: the answers are small and quick (/readyz gives up
// after 2 s), so seconds are plenty. pprof's profile and trace handlers
// push their own write deadline out by the duration asked for, so a 30 s
// CPU profile still works.
func defaultAdminLimits() adminLimits {
	return adminLimits{
		readHeader:     5 * time.Second,
		read:           10 * time.Second,
		write:          15 * time.Second,
		idle:           time.Minute,
		maxHeaderBytes: 64 << 10,
	}
}

func (l adminLimits) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.readHeader,
		ReadTimeout:       l.read,
		WriteTimeout:      l.write,
		IdleTimeout:       l.idle,
		MaxHeaderBytes:    l.maxHeaderBytes,
	}
}

func (d *Daemon) startAdmin() error {
	if d.cfg.Admin.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", d.cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen %s: %w", d.cfg.Admin.Listen, err)
	}
	d.adminLn = ln
	d.admin = defaultAdminLimits().server(d.adminHandler())
	go func() {
		if err := d.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("admin listener stopped: /healthz, /readyz and /metrics are gone", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return nil
}

// adminHandler routes on the path exactly as the client escaped it, and
// never answers a redirect. An http.ServeMux cleans paths first and
// redirects /v1/keys/a//b to /v1/keys/a/b, method kept, before any handler
// (the token check included) has run: a client following it would forget
// another key than the one it named. Here the public endpoints match only
// their exact paths; with a token, everything else goes to the key API,
// which checks the token before it looks at the path.
func (d *Daemon) adminHandler() http.Handler {
	public := map[string]http.Handler{
		"/":        getOnly(d.adminIndex),
		"/healthz": getOnly(d.healthz),
		"/readyz":  getOnly(d.readyz),
		"/metrics": getOnly(promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}).ServeHTTP),
	}
	// Served by us: importing net/http/pprof also fills
	// http.DefaultServeMux, which nothing serves.
	profiles := map[string]http.HandlerFunc{
		"cmdline": pprof.Cmdline,
		"profile": pprof.Profile,
		"symbol":  pprof.Symbol,
		"trace":   pprof.Trace,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.EscapedPath()
		if h, ok := public[path]; ok {
			h.ServeHTTP(w, r)
			return
		}
		if name, ok := strings.CutPrefix(path, "/debug/pprof/"); ok && d.cfg.Admin.Pprof {
			if h, ok := profiles[name]; ok {
				h(w, r)
				return
			}
			pprof.Index(w, r) // the index, or the named runtime profile
			return
		}
		if d.keysAPI != nil {
			d.keysAPI.ServeHTTP(w, r)
			return
		}
		// Without a token the key API does not exist.
		http.NotFound(w, r)
	})
}

// adminIndex lists the admin endpoints, so that a curl of the port
// shows what it serves; the key API and pprof are listed with the setting
// that turns them on when they are off. It names paths only: no key, no
// state.
func (d *Daemon) adminIndex(w http.ResponseWriter, _ *http.Request) {
	keys, pprofState := "", ""
	if d.keysAPI == nil {
		keys = " (off: set admin.token)"
	}
	if !d.cfg.Admin.Pprof {
		pprofState = " (off: set admin.pprof)"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, `dedupe-proxy admin endpoints:
GET    /healthz          liveness: 200 while the process serves
GET    /readyz           one line per check; 200 while the process serves
GET    /readyz?deps=1    the same, 503 while a check fails
GET    /metrics          Prometheus metrics
GET    /v1/keys          list a key space's keys (?space= &state= &prefix= &limit=), bearer token%[1]s
GET    /v1/keys/{key}    a message key's state and TTL (?space=), bearer token%[1]s
DELETE /v1/keys/{key}    forget a message key, bearer token%[1]s
GET    /debug/pprof/     Go profiles%[2]s
`, keys, pprofState)
}

func getOnly(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h(w, r)
	})
}

// healthz is liveness: ok while the process runs, 503 with the reason
// once a source stopped by itself and the process is on its way out.
func (d *Daemon) healthz(w http.ResponseWriter, _ *http.Request) {
	if f := d.failed.Load(); f != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte((*f).Error() + "\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers one line per check, "name: ok", "name: <why>" or "name:
// warning: <what>". Its status reports the proxy process, not its
// dependencies: 200 while the process serves, 503 once a source stopped
// by itself and the process is on its way out. The sidecar's readiness
// probe is also its app's readiness, so a Redis or broker blip must not
// take every replica out of the app's Service (and stall a rollout with
// maxUnavailable: 0); the proxy already holds messages unacked while a
// dependency is down. With ?deps=1 it is 503 unless every check passes (a
// warning passes), for pods that serve nothing else and for monitors.
func (d *Daemon) readyz(w http.ResponseWriter, r *http.Request) {
	deps := false
	if v := r.URL.Query().Get("deps"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			// A typo must not turn a strict probe into a lax one.
			http.Error(w, fmt.Sprintf("deps=%q: want 1 (every dependency must be up) or 0", v), http.StatusBadRequest)
			return
		}
		deps = b
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var b strings.Builder
	status := http.StatusOK
	if f := d.failed.Load(); f != nil {
		status = http.StatusServiceUnavailable
		fmt.Fprintf(&b, "process: stopping: %s\n", (*f).Error())
	}
	for _, c := range d.checks(ctx) {
		if c.err != nil {
			if deps {
				status = http.StatusServiceUnavailable
			}
			// "seenset: seenset: store unavailable" says it twice.
			fmt.Fprintf(&b, "%s: %s\n", c.name, strings.TrimPrefix(c.err.Error(), c.name+": "))
			continue
		}
		if c.warn != "" {
			fmt.Fprintf(&b, "%s: warning: %s\n", c.name, c.warn)
			continue
		}
		if c.detail != "" {
			fmt.Fprintf(&b, "%s: ok (%s)\n", c.name, c.detail)
			continue
		}
		fmt.Fprintf(&b, "%s: ok\n", c.name)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}
