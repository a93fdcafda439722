package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redisq"
)

// validateRedis checks a redis source block; at is its path.
func (s *Source) validateRedis(at string, p *problems) {
	r := s.Redis
	switch {
	case r.URL != "":
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			p.add(at+".url", "must be a redis:// or rediss:// URL, got %q", redact(r.URL))
		}
	case len(r.Addrs) == 0:
		p.add(at+".addrs", "must list at least one host:port (or set url)")
	}
	for i, a := range r.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			p.add(fmt.Sprintf("%s.addrs[%d]", at, i), "must be host:port, got %q", redactAddr(a))
		}
	}
	if r.DB < 0 {
		p.add(at+".db", "must not be negative, got %d", r.DB)
	}
	p.oneOf(at+".mode", r.Mode, enums["sources.redis.mode"]...)
	p.atLeast(at+".workers", r.Workers, 1)
	p.positive(at+".reconnect_initial", r.ReconnectInitial)
	p.positive(at+".reconnect_max", r.ReconnectMax)
	source := strings.TrimSuffix(at, ".redis")
	switch r.Mode {
	case "list":
		if r.Queue == "" {
			p.add(at+".queue", "must be set (the list producers RPUSH to)")
		}
		if r.Stream != "" {
			p.add(at+".stream", "is for mode stream; mode list reads queue")
		}
		// Renewed every third of it, and Redis waits in whole seconds: a
		// shorter TTL would expire between two renewals.
		if r.HeartbeatTTL < 3*time.Second {
			p.add(at+".heartbeat_ttl", "must be at least 3s, got %s", r.HeartbeatTTL)
		}
		if r.DeadLetter != "" && r.Queue != "" && redisq.HashTag(r.DeadLetter) != redisq.HashTag(r.Queue) {
			// One script moves the element; on Cluster both lists must be
			// in one slot.
			p.add(at+".dead_letter", "must carry the queue's hash tag so it shares its Cluster slot, e.g. %q, got %q",
				"{"+redisq.HashTag(r.Queue)+"}:dead", r.DeadLetter)
		}
	case "stream":
		if r.Stream == "" {
			p.add(at+".stream", "must be set (the stream producers XADD to)")
		}
		if r.Queue != "" {
			p.add(at+".queue", "is for mode list; mode stream reads stream")
		}
		if r.TakeBabelQueueProcessing {
			p.add(at+".take_babelqueue_processing", "is for mode list")
		}
		// Renewed every third of it, at most a second late.
		if r.ClaimIdle < 3*time.Second {
			p.add(at+".claim_idle", "must be at least 3s, got %s", r.ClaimIdle)
		}
		p.atLeast(at+".max_deliveries", r.MaxDeliveries, 1)
		if r.BodyField == "" {
			p.add(at+".body_field", "must name the entry field that holds the body")
		}
		if r.DeadLetter != "" && r.DeadLetter == r.Stream {
			p.add(at+".dead_letter", "must not be the consumed stream, got %q", r.DeadLetter)
		}
	}
	if r.DeadLetter != "" && r.DeadLetter == r.Queue {
		// Its dead letters would come back to it, fail again, and loop.
		p.add(at+".dead_letter", "must not be the consumed queue, got %q", r.DeadLetter)
	}
	if s.OnMissingKey == "dead_letter" && r.DeadLetter == "" {
		p.add(source+".on_missing_key", "dead_letter needs %s.dead_letter", at)
	}
	if s.KeyReuse == "dead_letter" && r.DeadLetter == "" {
		p.add(source+".key_reuse", "dead_letter needs %s.dead_letter", at)
	}
}
