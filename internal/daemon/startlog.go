package daemon

import (
	"log/slog"

	"github.com/dedupe-proxy/dedupe-proxy/internal/buildinfo"
)

// build is this binary's version (Version, or the go command's module
// version), Go version and revision: the start line's version and
// dedupe_proxy_build_info's labels.
func build() buildinfo.Info { return buildinfo.Get(Version) }

// listeners are the start line's names of every address the proxy
// listens on: "admin" (its bound address, or "off"), then for each
// webhook source a group with its listen address and path.
func (d *Daemon) listeners() []any {
	admin := "off"
	if d.adminLn != nil {
		admin = d.adminLn.Addr().String()
	}
	out := []any{slog.String("admin", admin)}
	var hooks []any
	for _, s := range d.cfg.Sources {
		if s.Type == "webhook" {
			hooks = append(hooks, slog.Group(s.Name, "listen", s.Webhook.Listen, "path", s.Webhook.Path))
		}
	}
	if len(hooks) > 0 {
		out = append(out, slog.Group("webhooks", hooks...))
	}
	return out
}
