package supervise

import (
	"context"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
)

// AppCheck is the app's health check, the one the daemon gates on, `run
// -- APP` waits for and doctor reports: a GET of healthURL through fwd
// (the client of app.url, so app.socket, its TLS and its credentials
// apply, and app.timeout bounds it) that answers 2xx.
func AppCheck(fwd *forward.Client, healthURL string) func(context.Context) error {
	return func(ctx context.Context) error { return fwd.Probe(ctx, healthURL) }
}

// AppProbe runs check every interval. A health URL that cannot answer
// within an interval is as good as down; the floor of a second keeps
// short intervals usable.
func AppProbe(check func(context.Context) error, interval time.Duration) Probe {
	return Probe{Check: check, Interval: interval, Timeout: max(interval, time.Second)}
}
