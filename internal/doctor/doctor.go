// Package doctor checks, before the proxy runs, that everything its
// config names is there and usable: Redis, each queue, topic and group,
// the dead-letter targets, the app, and the addresses it will listen on.
// Each check gives one line; a failure is something that would stop the
// proxy or lose its guarantee, a warning something an operator should
// know (an evicting Redis, a target it cannot inspect).
package doctor

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// Level grades a finding.
type Level int

const (
	OK Level = iota
	Warn
	Fail
)

func (l Level) String() string {
	switch l {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	}
	return "FAIL"
}

// Result is one check: what was checked and what was found.
type Result struct {
	Level   Level
	Check   string // "redis 127.0.0.1:6379", "rabbitmq queue orders (source orders)"
	Finding string
}

// Report is every check, in the order run.
type Report []Result

// Failed reports whether any check failed; warnings do not count.
func (r Report) Failed() bool {
	for _, x := range r {
		if x.Level == Fail {
			return true
		}
	}
	return false
}

// Print writes one line per check: level, the thing checked, the finding.
func (r Report) Print(w io.Writer) {
	for _, x := range r {
		fmt.Fprintf(w, "%-4s  %s: %s\n", x.Level, x.Check, x.Finding)
	}
	var fails, warns int
	for _, x := range r {
		switch x.Level {
		case Fail:
			fails++
		case Warn:
			warns++
		}
	}
	fmt.Fprintf(w, "%d checks: %d failed, %s\n", len(r), fails, plural(warns, "warning"))
}

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
	c := &checker{ctx: ctx, timeout: o.Timeout}
	c.seenSet(cfg)
	for _, s := range cfg.Sources {
		switch s.Type {
		case "rabbitmq":
			c.rabbitSource(s)
		case "kafka":
			c.kafkaSource(s)
		case "redis":
			c.redisSource(s, cfg.Consumer)
		case "webhook":
			c.webhookSource(s)
		}
	}
	c.app(cfg.App)
	if cfg.Admin.Listen != "" {
		c.listen("admin listener", cfg.Admin.Listen)
	}
	return c.out
}

type checker struct {
	ctx     context.Context
	timeout time.Duration
	out     Report
}

func (c *checker) add(l Level, check, format string, args ...any) {
	c.out = append(c.out, Result{Level: l, Check: check, Finding: fmt.Sprintf(format, args...)})
}

func (c *checker) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.timeout)
}

// listen binds addr and lets it go: the proxy will need it free.
func (c *checker) listen(what, addr string) {
	check := what + " " + addr
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.add(Fail, check, "cannot listen: %v (another process holds it — a proxy already running? run doctor before starting it)", err)
		return
	}
	ln.Close()
	c.add(OK, check, "address is free")
}

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
			c.add(Fail, "app", "cannot read app.url: %v", err)
			return
		}
		network, addr, shown = "tcp", hostPort(u), u.Scheme+"://"+u.Host
	}
	check := "app " + shown
	ctx, cancel := c.context()
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		c.add(Fail, check, "not reachable: %v (the proxy holds messages until it is)", err)
		return
	}
	conn.Close()
	c.add(OK, check, "accepts connections (set app.health_url to have it asked whether it is healthy)")
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

// redactURL keeps a URL's scheme, host and path: its password and query
// may be secrets.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery = nil, ""
	return strings.TrimSuffix(u.String(), "/")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
