package doctor

import (
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// appHealth runs the proxy's own app health check once, through a
// forward client with app.url, app.socket and app.timeout.
func (c *checker) appHealth(a config.App) {
	check := "app health " + a.HealthURL
	if a.HealthURL[0] != '/' {
		check = "app health " + redactURL(a.HealthURL)
	}
	fwd, err := forward.New(forward.Config{URL: a.URL, Socket: a.Socket, Timeout: min(a.Timeout, c.timeout), MaxConns: 1})
	if err != nil {
		c.add(Fail, check, "%v", err)
		return
	}
	defer fwd.Close()
	ctx, cancel := c.context()
	defer cancel()
	if err := supervise.AppCheck(fwd, a.HealthURL)(ctx); err != nil {
		c.add(Fail, check, "%v (the proxy holds messages until it answers 2xx)", err)
		return
	}
	c.add(OK, check, "answers 2xx")
}
