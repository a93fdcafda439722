package daemon

import (
	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// newClaims builds the one claim protocol of the process: every broker
// source and every webhook source claims, holds, commits and releases
// through it, with the same settings, tokens and local claims.
//
// Its settings are the stricter of what the two users had before they
// shared one: each round trip bounded by claim.DefaultOpTimeout (5 s; a
// webhook's were 10 s, well within a lease and an HTTP sender's patience
// either way), and a commit retried delivery.commit_attempts times spaced
// by the delivery backoff, which is what docs/redis.md tells operators to
// size against a failover (commit_attempts × backoff_max). A webhook's
// commit retries used a fixed 50 ms – 1 s backoff instead, and so gave up
// within a few seconds of an outage however the delivery settings were
// sized.
func newClaims(cfg *config.Config, store seenset.Store, m *metrics.Metrics) *claim.Protocol {
	dl := cfg.Delivery
	return claim.New(claim.Options{
		Store:          store,
		Observers:      []seenset.Observer{m.Store()},
		Lease:          cfg.SeenSet.Lease,
		TTL:            cfg.SeenSet.TTL,
		CommitAttempts: dl.CommitAttempts,
		Backoff:        backoff.Policy{Initial: dl.BackoffInitial, Max: dl.BackoffMax, Jitter: dl.Jitter},
		OpTimeout:      claim.DefaultOpTimeout,
		MaxRequestTime: cfg.App.MaxRequestTime,
	})
}
