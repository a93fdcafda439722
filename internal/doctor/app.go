package doctor

import (
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/probe"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// appHealth runs the proxy's own app health check once, through a
// forward client with app.url, app.socket and app.timeout.
func (c *checker) appHealth(a config.App) {
	check := "app health " + a.HealthURL
	if a.HealthURL[0] != '/' {
		check = "app health " + probe.RedactURL(a.HealthURL)
	}
	fc := a.Forward()
	fc.Timeout, fc.MaxConns = min(a.Timeout, c.Timeout), 1
	fwd, err := forward.New(fc)
	if err != nil {
		c.Add(Fail, check, "%v", err)
		return
	}
	defer fwd.Close()
	ctx, cancel := c.Context()
	defer cancel()
	if err := supervise.AppCheck(fwd, a.HealthURL)(ctx); err != nil {
		c.Add(Fail, check, "%v (the proxy holds messages until it answers 2xx)", err)
		return
	}
	c.Add(OK, check, "answers 2xx")
}
