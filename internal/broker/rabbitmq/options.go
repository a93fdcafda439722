package rabbitmq

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/problems"
)

// Options are also a rabbitmq source's block of the config file, as it
// is: the mapstructure names are its keys, DefaultOptions its defaults
// and Validate its rules. Fields tagged "-" are set by whoever builds the
// source.

// Enums are the settings of the block with a fixed set of values, by
// their path in it.
var Enums = map[string][]string{
	"dead_letter.mode": {DeadLetterNone, DeadLetterDLX, DeadLetterPublish},
}

// DefaultOptions are a rabbitmq source's settings before the config file
// changes any.
func DefaultOptions() Options {
	return Options{
		URL:              "amqp://guest:guest@127.0.0.1:5672/",
		Prefetch:         64,
		Workers:          16,
		ReconnectInitial: 500 * time.Millisecond,
		ReconnectMax:     30 * time.Second,
		DeadLetter:       DeadLetter{Mode: DeadLetterNone},
	}
}

// Validate reports every invalid setting of the block of source (its
// path, "sources[0]"); deadLetterBy names the source's settings
// (on_missing_key, key_reuse) that dead-letter a message.
func (o Options) Validate(p *problems.List, source string, deadLetterBy []string) {
	at := source + ".rabbitmq"
	if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		p.Add(at+".url", "%s", URLProblem(o.URL))
	}
	if o.Queue == "" {
		p.Add(at+".queue", "must be set")
	}
	p.AtLeast(at+".prefetch", o.Prefetch, 1)
	p.AtLeast(at+".workers", o.Workers, 1)
	p.Positive(at+".reconnect_initial", o.ReconnectInitial)
	p.Positive(at+".reconnect_max", o.ReconnectMax)
	dl := o.DeadLetter
	p.OneOf(at+".dead_letter.mode", dl.Mode, Enums["dead_letter.mode"]...)
	if dl.Mode == DeadLetterPublish && dl.Exchange == "" && dl.RoutingKey == "" {
		p.Add(at+".dead_letter", "mode publish needs an exchange or a routing_key (the default exchange routes by queue name)")
	}
	if q := dl.Queue; q != "" {
		switch {
		case dl.Mode == DeadLetterNone:
			p.Add(at+".dead_letter.queue", "only with mode dlx or publish (mode none dead-letters nothing)")
		case q == o.Queue:
			p.Add(at+".dead_letter.queue", "must not be the consumed queue, got %q", q)
		case dl.Mode == DeadLetterPublish && dl.Exchange == "" && q != dl.RoutingKey:
			p.Add(at+".dead_letter.queue", "the default exchange routes dead letters to routing_key %q, got %q", dl.RoutingKey, q)
		}
	}
	if dl.Mode == DeadLetterNone {
		for _, by := range deadLetterBy {
			p.Add(source+"."+by, "dead_letter needs %s.dead_letter.mode dlx or publish", at)
		}
	}
}

// URLProblem says what is wrong with an AMQP URL and how to write it.
func URLProblem(raw string) string {
	msg := fmt.Sprintf("must be an amqp:// or amqps:// URL, got %q", problems.Redact(raw))
	if !strings.Contains(raw, "://") && raw != "" {
		// host:port, as most clients take it: name the scheme and the
		// credentials it lacks.
		msg += fmt.Sprintf("; write it as amqp://USER:PASSWORD@%s/ (amqp://guest:guest@%s/ on a local RabbitMQ)", problems.RedactAddr(raw), problems.RedactAddr(raw))
	}
	return msg
}
