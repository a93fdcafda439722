// Package probe is what dedupe-proxy doctor's checks report to: each
// check gives one line, a failure being something that would stop the
// proxy or lose its guarantee, a warning something an operator should
// know. Each source kind's package holds the checks of its kind, so a
// kind is described in one place.
package probe

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"
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

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Checker collects the results of one run of checks.
type Checker struct {
	Ctx context.Context
	// Timeout bounds each network check.
	Timeout time.Duration
	Out     Report
}

// Add records a finding.
func (c *Checker) Add(l Level, check, format string, args ...any) {
	c.Out = append(c.Out, Result{Level: l, Check: check, Finding: fmt.Sprintf(format, args...)})
}

// Context bounds one network check.
func (c *Checker) Context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Ctx, c.Timeout)
}

// Listen binds addr and lets it go: the proxy will need it free.
func (c *Checker) Listen(what, addr string) {
	check := what + " " + addr
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.Add(Fail, check, "cannot listen: %v (another process holds it — a proxy already running? run doctor before starting it)", err)
		return
	}
	ln.Close()
	c.Add(OK, check, "address is free")
}

// RedactURL keeps a URL's scheme, host and path: its password and query
// may be secrets.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery = nil, ""
	return strings.TrimSuffix(u.String(), "/")
}
