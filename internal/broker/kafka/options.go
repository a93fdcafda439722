package kafka

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/problems"
)

// Options are also a kafka source's block of the config file, as it is:
// the mapstructure names are its keys, DefaultOptions its defaults and
// Validate its rules. Fields tagged "-" are set by whoever builds the
// source, or are tuning the config does not expose.

// SASLMechanisms are the values of sasl.mechanism; "" is off.
var SASLMechanisms = []string{"", "plain", "scram-sha-256", "scram-sha-512"}

// Enums are the settings of the block with a fixed set of values, by
// their path in it (a list's path for each of its items).
var Enums = map[string][]string{
	"start_offset":    {StartEarliest, StartLatest},
	"isolation_level": {IsolationReadCommitted, IsolationReadUncommitted},
	"ordering":        {OrderingPartition, OrderingKey},
	"balancers":       {BalancerCooperativeSticky, BalancerRange, BalancerSticky, BalancerRoundRobin},
	"sasl.mechanism":  SASLMechanisms,
}

// DefaultOptions are a kafka source's settings before the config file
// changes any. Brokers has no default: a Kafka source quietly reaching
// for a broker on localhost would only fail later, and far from its
// cause.
func DefaultOptions() Options {
	return Options{
		Balancers:         slices.Clone(DefaultBalancers),
		StartOffset:       StartEarliest,
		IsolationLevel:    IsolationReadCommitted,
		Ordering:          OrderingPartition,
		MaxInFlight:       64,
		ReadAhead:         1024,
		BatchSize:         32,
		CommitInterval:    time.Second,
		CommitEvery:       500,
		SessionTimeout:    10 * time.Second,
		HeartbeatInterval: time.Second,
		RebalanceTimeout:  30 * time.Second,
	}
}

// Validate reports every invalid setting of the block of source (its
// path, "sources[0]"); deadLetterBy names the source's settings
// (on_missing_key, key_reuse) that dead-letter a message.
func (o Options) Validate(p *problems.List, source string, deadLetterBy []string) {
	at := source + ".kafka"
	if len(o.Brokers) == 0 {
		p.Add(at+".brokers", "must list at least one host:port (there is no default)")
	}
	if len(o.Topics) == 0 {
		p.Add(at+".topics", "must list at least one topic")
	}
	if o.Group == "" {
		p.Add(at+".group", "must be set")
	}
	p.OneOf(at+".start_offset", o.StartOffset, Enums["start_offset"]...)
	p.OneOf(at+".isolation_level", o.IsolationLevel, Enums["isolation_level"]...)
	p.OneOf(at+".ordering", o.Ordering, Enums["ordering"]...)
	p.AtLeast(at+".max_in_flight", o.MaxInFlight, 1)
	p.AtLeast(at+".read_ahead", o.ReadAhead, 1)
	p.AtLeast(at+".batch_size", o.BatchSize, 1)
	p.Positive(at+".commit_interval", o.CommitInterval)
	p.AtLeast(at+".commit_every", o.CommitEvery, 1)
	p.Positive(at+".session_timeout", o.SessionTimeout)
	p.Positive(at+".heartbeat_interval", o.HeartbeatInterval)
	p.Positive(at+".rebalance_timeout", o.RebalanceTimeout)
	if o.HeartbeatInterval > 0 && o.SessionTimeout > 0 && o.HeartbeatInterval*3 > o.SessionTimeout {
		p.Add(at+".heartbeat_interval", "must be at most a third of session_timeout (%s), got %s", o.SessionTimeout, o.HeartbeatInterval)
	}
	if len(o.Balancers) == 0 {
		p.Add(at+".balancers", "must list at least one of %s", strings.Join(Enums["balancers"], ", "))
	}
	for i, b := range o.Balancers {
		p.OneOf(fmt.Sprintf("%s.balancers[%d]", at, i), b, Enums["balancers"]...)
	}
	ValidateSecurity(p, at, o.SASL, o.TLS)
	if o.DeadLetterTopic == "" {
		for _, by := range deadLetterBy {
			p.Add(at+".dead_letter_topic", "must be set when %s is dead_letter", by)
		}
	}
	ValidateBrokers(p, at+".brokers", o.Brokers)
	for i, t := range o.Topics {
		if t == "" {
			p.Add(fmt.Sprintf("%s.topics[%d]", at, i), "must not be empty")
		}
	}
	if o.DeadLetterTopic != "" && slices.Contains(o.Topics, o.DeadLetterTopic) {
		// Its dead letters would come back to it, fail again, and loop.
		p.Add(at+".dead_letter_topic", "must not be one of the consumed topics, got %q", o.DeadLetterTopic)
	}
}

// ValidateBrokers checks each address of a broker list at path.
func ValidateBrokers(p *problems.List, path string, brokers []string) {
	for i, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			p.Add(fmt.Sprintf("%s[%d]", path, i), "must be host:port, got %q", problems.RedactAddr(b))
		}
	}
}

// ValidateSecurity checks the sasl and tls blocks under at, of a Kafka
// source or of a webhook's Kafka target: one set of rules for one set of
// settings.
func ValidateSecurity(p *problems.List, at string, sasl SASL, tls TLS) {
	p.OneOf(at+".sasl.mechanism", sasl.Mechanism, SASLMechanisms...)
	if slices.Contains(SASLMechanisms[1:], sasl.Mechanism) && (sasl.Username == "" || sasl.Password == "") {
		p.Add(at+".sasl", "mechanism %s needs username and password", sasl.Mechanism)
	}
	if (tls.CertFile == "") != (tls.KeyFile == "") {
		p.Add(at+".tls", "cert_file and key_file must be set together")
	}
	if !tls.Enabled && (tls.CAFile != "" || tls.CertFile != "" || tls.KeyFile != "" || tls.InsecureSkipVerify) {
		p.Add(at+".tls.enabled", "must be true when other tls fields are set")
	}
}
