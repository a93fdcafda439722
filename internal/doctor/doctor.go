// Package doctor checks, before the proxy runs, that everything its
// config names is there and usable: Redis, each queue, topic and group,
// the dead-letter targets, the app, and the addresses it will listen on.
// Each check gives one line; a failure is something that would stop the
// proxy or lose its guarantee, a warning something an operator should
// know (an evicting Redis, a target it cannot inspect).
package doctor

import (
	"context"
	"net"
	"net/url"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/probe"
)

// The findings are probe's, which each kind's checks report to.
type (
	Level  = probe.Level
	Result = probe.Result
	Report = probe.Report
)

const (
	OK   = probe.OK
	Warn = probe.Warn
	Fail = probe.Fail
)

// Options tune Run.
type Options struct {
	// Timeout bounds each network check. Default 5s.
	Timeout time.Duration
}

// Run checks everything cfg names. It never changes anything: queues,
// exchanges and topics are looked up passively (a RabbitMQ queue's
// arguments are read through declares the server always refuses), listen
// addresses are bound and released at once.
func Run(ctx context.Context, cfg *config.Config, o Options) Report {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	c := &checker{&probe.Checker{Ctx: ctx, Timeout: o.Timeout}}
	c.seenSet(cfg)
	for _, s := range cfg.Sources {
		if k := config.KindOf(s.Type); k != nil {
			k.Check(c.Checker, s, cfg.Consumer)
		}
	}
	c.app(cfg.App)
	if cfg.Admin.Listen != "" {
		c.Listen("admin listener", cfg.Admin.Listen)
	}
	return c.Out
}

// checker runs the checks that are no source kind's.
type checker struct{ *probe.Checker }

// app asks the app's health URL, or without one, whether its address
// accepts connections.
func (c *checker) app(a config.App) {
	if a.HealthURL != "" {
		c.appHealth(a)
		return
	}
	network, addr, shown := "unix", a.Socket, "socket "+a.Socket
	if a.Socket == "" {
		u, err := url.Parse(a.URL)
		if err != nil {
			c.Add(Fail, "app", "cannot read app.url: %v", err)
			return
		}
		network, addr, shown = "tcp", hostPort(u), u.Scheme+"://"+u.Host
	}
	check := "app " + shown
	ctx, cancel := c.Context()
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		c.Add(Fail, check, "not reachable: %v (the proxy holds messages until it is)", err)
		return
	}
	conn.Close()
	c.Add(OK, check, "accepts connections (set app.health_url to have it asked whether it is healthy)")
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}
