package redissource

import (
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/problems"
)

// Options are also a redis source's block of the config file, as it is:
// the mapstructure names are its keys, DefaultOptions its defaults and
// Validate its rules. Fields tagged "-" are set by whoever builds the
// source.

// Enums are the settings of the block with a fixed set of values, by
// their path in it.
var Enums = map[string][]string{
	"mode": {ModeList, ModeStream},
}

// DefaultOptions are a redis source's settings before the config file
// changes any.
func DefaultOptions() Options {
	return Options{
		Addrs:            []string{"127.0.0.1:6379"},
		Mode:             ModeList,
		Workers:          16,
		HeartbeatTTL:     15 * time.Second,
		ClaimIdle:        time.Minute,
		MaxDeliveries:    5,
		BodyField:        "body",
		ReconnectInitial: 500 * time.Millisecond,
		ReconnectMax:     30 * time.Second,
	}
}

// Validate reports every invalid setting of the block of source (its
// path, "sources[0]"); deadLetterBy names the source's settings
// (on_missing_key, key_reuse) that dead-letter a message.
func (o Options) Validate(p *problems.List, source string, deadLetterBy []string) {
	at := source + ".redis"
	switch {
	case o.URL != "":
		if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			p.Add(at+".url", "must be a redis:// or rediss:// URL, got %q", problems.Redact(o.URL))
		}
	case len(o.Addrs) == 0:
		p.Add(at+".addrs", "must list at least one host:port (or set url)")
	}
	for i, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			p.Add(fmt.Sprintf("%s.addrs[%d]", at, i), "must be host:port, got %q", problems.RedactAddr(a))
		}
	}
	if o.DB < 0 {
		p.Add(at+".db", "must not be negative, got %d", o.DB)
	}
	p.OneOf(at+".mode", o.Mode, Enums["mode"]...)
	p.AtLeast(at+".workers", o.Workers, 1)
	p.Positive(at+".reconnect_initial", o.ReconnectInitial)
	p.Positive(at+".reconnect_max", o.ReconnectMax)
	switch o.Mode {
	case ModeList:
		if o.Queue == "" {
			p.Add(at+".queue", "must be set (the list producers RPUSH to)")
		}
		if o.Stream != "" {
			p.Add(at+".stream", "is for mode stream; mode list reads queue")
		}
		// Renewed every third of it, and Redis waits in whole seconds: a
		// shorter TTL would expire between two renewals.
		if o.HeartbeatTTL < 3*time.Second {
			p.Add(at+".heartbeat_ttl", "must be at least 3s, got %s", o.HeartbeatTTL)
		}
		if o.DeadLetter != "" && o.Queue != "" && HashTag(o.DeadLetter) != HashTag(o.Queue) {
			// One script moves the element; on Cluster both lists must be
			// in one slot.
			p.Add(at+".dead_letter", "must carry the queue's hash tag so it shares its Cluster slot, e.g. %q, got %q",
				"{"+HashTag(o.Queue)+"}:dead", o.DeadLetter)
		}
	case ModeStream:
		if o.Stream == "" {
			p.Add(at+".stream", "must be set (the stream producers XADD to)")
		}
		if o.Queue != "" {
			p.Add(at+".queue", "is for mode list; mode stream reads stream")
		}
		if o.TakeBabelQueueProcessing {
			p.Add(at+".take_babelqueue_processing", "is for mode list")
		}
		// Renewed every third of it, at most a second late.
		if o.ClaimIdle < 3*time.Second {
			p.Add(at+".claim_idle", "must be at least 3s, got %s", o.ClaimIdle)
		}
		p.AtLeast(at+".max_deliveries", o.MaxDeliveries, 1)
		if o.BodyField == "" {
			p.Add(at+".body_field", "must name the entry field that holds the body")
		}
		if o.DeadLetter != "" && o.DeadLetter == o.Stream {
			p.Add(at+".dead_letter", "must not be the consumed stream, got %q", o.DeadLetter)
		}
	}
	if o.DeadLetter != "" && o.DeadLetter == o.Queue {
		// Its dead letters would come back to it, fail again, and loop.
		p.Add(at+".dead_letter", "must not be the consumed queue, got %q", o.DeadLetter)
	}
	if o.DeadLetter == "" {
		for _, by := range deadLetterBy {
			p.Add(source+"."+by, "dead_letter needs %s.dead_letter", at)
		}
	}
}
