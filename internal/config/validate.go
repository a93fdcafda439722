package config

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
)

// A consumer name becomes the key namespace "<consumer>:<key>"; a colon in
// it would let two consumers' namespaces overlap.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

type problems []error

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

func (p *problems) positive(path string, d time.Duration) {
	if d <= 0 {
		p.add(path, "must be a positive duration, got %s", d)
	}
}

func (p *problems) atLeast(path string, n, min int) {
	if n < min {
		p.add(path, "must be at least %d, got %d", min, n)
	}
}

func (p *problems) oneOf(path, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = a
		if a == "" {
			quoted[i] = `""`
		}
	}
	p.add(path, "must be one of %s, got %q%s", strings.Join(quoted, ", "), v, DidYouMean(v, allowed, func(s string) string { return s }))
}

// Validate reports every invalid field, one line each, prefixed with its
// path.
func (c *Config) Validate() error {
	var p problems
	if !nameRE.MatchString(c.Consumer) {
		p.add("consumer", "must be set to a name of letters, digits, '.', '_' or '-' (it namespaces the keys), got %q", c.Consumer)
	}
	p.positive("shutdown_timeout", c.ShutdownTimeout)
	p.oneOf("log.level", c.Log.Level, enums["log.level"]...)
	p.oneOf("log.format", c.Log.Format, enums["log.format"]...)
	if c.Admin.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Admin.Listen); err != nil {
			p.add("admin.listen", "must be host:port or empty to disable, got %q", c.Admin.Listen)
		}
	}
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		p.add("admin.token_file", "set either admin.token or admin.token_file, not both")
	}

	if !strings.Contains(c.App.URL, "://") && c.App.URL != "" {
		// "localhost:8080" parses as scheme "localhost": say what is missing.
		p.add("app.url", "has no scheme: write http://%s (or https://)", redactAddr(c.App.URL))
	} else if u, err := url.Parse(c.App.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("app.url", "must be an http:// or https:// URL, got %q", redact(c.App.URL))
	}
	p.positive("app.timeout", c.App.Timeout)
	p.positive("app.max_request_time", c.App.MaxRequestTime)
	if c.App.MaxRequestTime > 0 && c.App.MaxRequestTime < c.App.Timeout {
		p.add("app.max_request_time", "must be at least app.timeout (%s), got %s: a slow request is waited for until then", c.App.Timeout, c.App.MaxRequestTime)
	}
	p.atLeast("app.max_conns", c.App.MaxConns, 1)
	if c.App.MaxResponseBytes <= 0 {
		p.add("app.max_response_bytes", "must be positive, got %d", c.App.MaxResponseBytes)
	}
	if _, err := forward.ParseStatusRules(c.App.RetryStatuses); err != nil {
		p.add("app.retry_statuses", "%v", err)
	}
	if c.App.HealthURL != "" {
		if u, err := url.Parse(c.App.HealthURL); err != nil ||
			!(strings.HasPrefix(c.App.HealthURL, "/") || (u.Scheme == "http" || u.Scheme == "https") && u.Host != "") {
			p.add("app.health_url", "must be a path on app.url (/healthz) or an http:// or https:// URL, got %q", redact(c.App.HealthURL))
		}
		p.positive("app.health_interval", c.App.HealthInterval)
	}

	s := c.SeenSet
	p.oneOf("seenset.backend", s.Backend, enums["seenset.backend"]...)
	// A zero TTL reaches Redis as "no expiry" and pins keys forever.
	p.positive("seenset.ttl", s.TTL)
	p.positive("seenset.lease", s.Lease)
	if s.Lease > 0 && s.Lease < 300*time.Millisecond {
		p.add("seenset.lease", "must be at least 300ms so renewals (every lease/3) outpace expiry, got %s", s.Lease)
	}
	p.oneOf("seenset.on_store_error", s.OnStoreError, enums["seenset.on_store_error"]...)
	if s.Backend == "redis" {
		if len(s.Redis.Addrs) == 0 {
			p.add("seenset.redis.addrs", "must list at least one host:port")
		}
		for i, a := range s.Redis.Addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				p.add(fmt.Sprintf("seenset.redis.addrs[%d]", i), "must be host:port, got %q", redactAddr(a))
			}
		}
		if s.Redis.MasterName == "" {
			if s.Redis.SentinelUsername != "" {
				p.add("seenset.redis.sentinel_username", "set, but master_name is empty: only Sentinel uses it")
			}
			if s.Redis.SentinelPassword != "" {
				p.add("seenset.redis.sentinel_password", "set, but master_name is empty: only Sentinel uses it")
			}
		}
		p.positive("seenset.redis.dial_timeout", s.Redis.DialTimeout)
		p.positive("seenset.redis.read_timeout", s.Redis.ReadTimeout)
		p.positive("seenset.redis.write_timeout", s.Redis.WriteTimeout)
		p.atLeast("seenset.redis.pool_size", s.Redis.PoolSize, 1)
		p.atLeast("seenset.redis.db", s.Redis.DB, 0)
		p.atLeast("seenset.redis.wait_replicas", s.Redis.WaitReplicas, 0)
		if h := s.Redis.HashKeysOver; h != 0 && h < 44 {
			p.add("seenset.redis.hash_keys_over", "must be 0 (off) or at least 44, the length of a hashed key, got %d", h)
		}
		if s.Redis.WaitReplicas > 0 {
			// WAIT n 0 blocks for ever; and the reply must come before the
			// read timeout gives up on the connection.
			if s.Redis.WaitTimeout < time.Millisecond || s.Redis.WaitTimeout >= s.Redis.ReadTimeout {
				p.add("seenset.redis.wait_timeout", "must be at least 1ms and below seenset.redis.read_timeout (%s) when wait_replicas is set, got %s", s.Redis.ReadTimeout, s.Redis.WaitTimeout)
			}
		}
	}

	d := c.Delivery
	p.atLeast("delivery.max_attempts", d.MaxAttempts, 1)
	p.positive("delivery.backoff_initial", d.BackoffInitial)
	p.positive("delivery.backoff_max", d.BackoffMax)
	if d.BackoffMax > 0 && d.BackoffMax < d.BackoffInitial {
		p.add("delivery.backoff_max", "must not be below delivery.backoff_initial (%s), got %s", d.BackoffInitial, d.BackoffMax)
	}
	if d.Jitter < 0 || d.Jitter > 1 {
		p.add("delivery.jitter", "must be between 0 and 1, got %g", d.Jitter)
	}
	p.positive("delivery.busy_delay", d.BusyDelay)
	p.atLeast("delivery.commit_attempts", d.CommitAttempts, 1)
	if d.MaxBodyBytes <= 0 {
		p.add("delivery.max_body_bytes", "must be positive, got %d", d.MaxBodyBytes)
	}

	if len(c.Sources) == 0 {
		p.add("sources", "must list at least one source")
	}
	names := map[string]int{}
	for i, src := range c.Sources {
		src.validate(fmt.Sprintf("sources[%d]", i), &p)
		if j, dup := names[src.Name]; dup && src.Name != "" {
			p.add(fmt.Sprintf("sources[%d].name", i), "%q is already used by sources[%d]", src.Name, j)
		}
		names[src.Name] = i
	}
	c.validateSharedKeySpaces(&p)
	// One instance id per member of a group: a second member with the
	// same id fences the first (two sources of one pod in one group would
	// both default to the pod's name).
	instances := map[[2]string]int{}
	for i, src := range c.Sources {
		k := src.Kafka
		if src.Type != "kafka" || k.GroupInstanceID == "" {
			continue
		}
		key := [2]string{k.Group, k.GroupInstanceID}
		if j, dup := instances[key]; dup {
			p.add(fmt.Sprintf("sources[%d].kafka.group_instance_id", i), "%q is already the instance id of sources[%d] in group %q: set a different one on each",
				k.GroupInstanceID, j, k.Group)
		}
		instances[key] = i
	}
	if len(p) == 0 {
		return nil
	}
	return lineErrors(p)
}

// mediaType accepts a Content-Type header value: type/subtype and
// parameters. mime.ParseMediaType alone takes a bare token ("json", as
// Content-Disposition would) and trims a trailing newline.
func mediaType(v string) error {
	if strings.ContainsFunc(v, unicode.IsControl) {
		return errors.New("control character")
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return err
	}
	if typ, sub, ok := strings.Cut(mt, "/"); !ok || typ == "" || sub == "" {
		return errors.New("no type/subtype")
	}
	return nil
}

func (s *Source) validate(at string, p *problems) {
	if !nameRE.MatchString(s.Name) {
		p.add(at+".name", "must be set to a name of letters, digits, '.', '_' or '-', got %q", s.Name)
	}
	p.oneOf(at+".type", s.Type, enums["sources.type"]...)
	if !strings.HasPrefix(s.Path, "/") {
		p.add(at+".path", "must start with '/', got %q", s.Path)
	}
	if _, err := keys.Parse(s.Key); err != nil {
		for _, e := range unjoin(err) {
			p.add(at+".key", "%v", e)
		}
	}
	p.oneOf(at+".on_missing_key", s.OnMissingKey, enums["sources.on_missing_key"]...)
	p.oneOf(at+".key_reuse", s.KeyReuse, enums["sources.key_reuse"]...)
	if _, err := keys.ParseDigestFields(s.KeyReuseFields); err != nil {
		for _, e := range unjoin(err) {
			p.add(at+".key_reuse_fields", "%v", e)
		}
	}
	if s.KeySpace != "" && !nameRE.MatchString(s.KeySpace) {
		// No ':' either: it would let "<space>:<key>" of one source equal
		// another source's key.
		p.add(at+".key_space", "must be empty (the source's name) or a name of letters, digits, '.', '_' or '-', got %q", s.KeySpace)
	}
	if s.MaxRedeliveryDelay < 0 {
		p.add(at+".max_redelivery_delay", "must not be negative (0: unknown), got %s", s.MaxRedeliveryDelay)
	}
	if s.ContentType != "" {
		if err := mediaType(s.ContentType); err != nil {
			p.add(at+".content_type", "must be a media type such as application/json, got %q (%v)", s.ContentType, err)
		} else if s.Type == "webhook" {
			p.add(at+".content_type", "is not used by a webhook source: the sender's own Content-Type is passed on")
		}
	}
	switch s.Type {
	case "webhook":
		s.validateWebhook(at, p)
	case "rabbitmq":
		r := s.RabbitMQ
		at := at + ".rabbitmq"
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
			p.add(at+".url", "%s", amqpURLProblem(r.URL))
		}
		if r.Queue == "" {
			p.add(at+".queue", "must be set")
		}
		p.atLeast(at+".prefetch", r.Prefetch, 1)
		p.atLeast(at+".workers", r.Workers, 1)
		p.positive(at+".reconnect_initial", r.ReconnectInitial)
		p.positive(at+".reconnect_max", r.ReconnectMax)
		p.oneOf(at+".dead_letter.mode", r.DeadLetter.Mode, enums["sources.rabbitmq.dead_letter.mode"]...)
		if r.DeadLetter.Mode == "publish" && r.DeadLetter.Exchange == "" && r.DeadLetter.RoutingKey == "" {
			p.add(at+".dead_letter", "mode publish needs an exchange or a routing_key (the default exchange routes by queue name)")
		}
		if q := r.DeadLetter.Queue; q != "" {
			switch {
			case r.DeadLetter.Mode == "none":
				p.add(at+".dead_letter.queue", "only with mode dlx or publish (mode none dead-letters nothing)")
			case q == r.Queue:
				p.add(at+".dead_letter.queue", "must not be the consumed queue, got %q", q)
			case r.DeadLetter.Mode == "publish" && r.DeadLetter.Exchange == "" && q != r.DeadLetter.RoutingKey:
				p.add(at+".dead_letter.queue", "the default exchange routes dead letters to routing_key %q, got %q", r.DeadLetter.RoutingKey, q)
			}
		}
		if s.OnMissingKey == "dead_letter" && r.DeadLetter.Mode == "none" {
			p.add(strings.TrimSuffix(at, ".rabbitmq")+".on_missing_key", "dead_letter needs %s.dead_letter.mode dlx or publish", at)
		}
		if s.KeyReuse == "dead_letter" && r.DeadLetter.Mode == "none" {
			p.add(strings.TrimSuffix(at, ".rabbitmq")+".key_reuse", "dead_letter needs %s.dead_letter.mode dlx or publish", at)
		}
	case "redis":
		s.validateRedis(at+".redis", p)
	case "kafka":
		k := s.Kafka
		at := at + ".kafka"
		if len(k.Brokers) == 0 {
			// No default: a Kafka source quietly reaching for a broker on
			// localhost would only fail later, and far from its cause.
			p.add(at+".brokers", "must list at least one host:port (there is no default)")
		}
		if len(k.Topics) == 0 {
			p.add(at+".topics", "must list at least one topic")
		}
		if k.Group == "" {
			p.add(at+".group", "must be set")
		}
		p.oneOf(at+".start_offset", k.StartOffset, enums["sources.kafka.start_offset"]...)
		p.oneOf(at+".isolation_level", k.IsolationLevel, enums["sources.kafka.isolation_level"]...)
		p.oneOf(at+".ordering", k.Ordering, enums["sources.kafka.ordering"]...)
		p.atLeast(at+".max_in_flight", k.MaxInFlight, 1)
		p.atLeast(at+".read_ahead", k.ReadAhead, 1)
		p.atLeast(at+".batch_size", k.BatchSize, 1)
		p.positive(at+".commit_interval", k.CommitInterval)
		p.atLeast(at+".commit_every", k.CommitEvery, 1)
		p.positive(at+".session_timeout", k.SessionTimeout)
		p.positive(at+".heartbeat_interval", k.HeartbeatInterval)
		p.positive(at+".rebalance_timeout", k.RebalanceTimeout)
		if k.HeartbeatInterval > 0 && k.SessionTimeout > 0 && k.HeartbeatInterval*3 > k.SessionTimeout {
			p.add(at+".heartbeat_interval", "must be at most a third of session_timeout (%s), got %s", k.SessionTimeout, k.HeartbeatInterval)
		}
		if len(k.Balancers) == 0 {
			p.add(at+".balancers", "must list at least one of %s", strings.Join(enums["sources.kafka.balancers"], ", "))
		}
		for i, b := range k.Balancers {
			p.oneOf(fmt.Sprintf("%s.balancers[%d]", at, i), b, enums["sources.kafka.balancers"]...)
		}
		p.kafkaSecurity(at, k.SASL, k.TLS)
		if s.OnMissingKey == "dead_letter" && k.DeadLetterTopic == "" {
			p.add(at+".dead_letter_topic", "must be set when on_missing_key is dead_letter")
		}
		if s.KeyReuse == "dead_letter" && k.DeadLetterTopic == "" {
			p.add(at+".dead_letter_topic", "must be set when key_reuse is dead_letter")
		}
		for i, b := range k.Brokers {
			if _, _, err := net.SplitHostPort(b); err != nil {
				p.add(fmt.Sprintf("%s.brokers[%d]", at, i), "must be host:port, got %q", redactAddr(b))
			}
		}
		for i, t := range k.Topics {
			if t == "" {
				p.add(fmt.Sprintf("%s.topics[%d]", at, i), "must not be empty")
			}
		}
		if k.DeadLetterTopic != "" && slices.Contains(k.Topics, k.DeadLetterTopic) {
			// Its dead letters would come back to it, fail again, and loop.
			p.add(at+".dead_letter_topic", "must not be one of the consumed topics, got %q", k.DeadLetterTopic)
		}
	}
}

// kafkaSecurity checks the sasl and tls blocks of a Kafka source or a
// webhook's Kafka target: one set of rules for one set of settings.
func (p *problems) kafkaSecurity(at string, sasl KafkaSASL, tls KafkaTLS) {
	p.oneOf(at+".sasl.mechanism", sasl.Mechanism, saslMechanisms...)
	if slices.Contains([]string{"plain", "scram-sha-256", "scram-sha-512"}, sasl.Mechanism) && (sasl.Username == "" || sasl.Password == "") {
		p.add(at+".sasl", "mechanism %s needs username and password", sasl.Mechanism)
	}
	if (tls.CertFile == "") != (tls.KeyFile == "") {
		p.add(at+".tls", "cert_file and key_file must be set together")
	}
	if !tls.Enabled && (tls.CAFile != "" || tls.CertFile != "" || tls.KeyFile != "" || tls.InsecureSkipVerify) {
		p.add(at+".tls.enabled", "must be true when other tls fields are set")
	}
}

// Warning is a setting that is valid but probably wrong.
type Warning struct {
	Path string // the field, e.g. sources[0].max_redelivery_delay
	Msg  string
}

func (w Warning) String() string { return w.Path + ": " + w.Msg }

// Warnings lists valid settings that are probably mistakes; the daemon logs
// them at start and validate prints them.
func (c *Config) Warnings() []Warning {
	var ws []Warning
	if c.ShutdownTimeout <= c.App.Timeout {
		ws = append(ws, Warning{
			Path: "shutdown_timeout",
			Msg: fmt.Sprintf("is %s, not longer than app.timeout (%s): on SIGTERM a request still at the app is cut off and its message requeued; "+
				"its key stays claimed until app.max_request_time (%s) from the request's start so no replica sends it again meanwhile, but it waits that long — set shutdown_timeout above app.timeout",
				c.ShutdownTimeout, c.App.Timeout, c.App.MaxRequestTime),
		})
	}
	if c.SeenSet.TTL > 0 && c.SeenSet.TTL < c.SeenSet.Lease {
		ws = append(ws, Warning{
			Path: "seenset.ttl",
			Msg: fmt.Sprintf("is %s, below seenset.lease (%s): a finished message is remembered for less time than an unfinished one is held, "+
				"so a duplicate that waited out the claim (answered busy, or redelivered after a crash) can arrive after the done mark expired "+
				"and be forwarded again; ttl is the dedupe window and belongs well above the lease",
				c.SeenSet.TTL, c.SeenSet.Lease),
		})
	}
	for i, s := range c.Sources {
		for j, rule := range s.Key {
			if strings.TrimSpace(rule) == "record_key" {
				ws = append(ws, Warning{
					Path: fmt.Sprintf("sources[%d].key[%d]", i, j),
					Msg: "record_key identifies an entity (all events of one order share it), not a message: every message after the first " +
						"with the same record key within seenset.ttl would be skipped as a duplicate; use a message id (json:meta.id, header:<name>)",
				})
			}
		}
		if s.MaxRedeliveryDelay > c.SeenSet.TTL {
			ws = append(ws, Warning{
				Path: fmt.Sprintf("sources[%d].max_redelivery_delay", i),
				Msg: fmt.Sprintf("source %s may redeliver a message up to %s later, but seenset.ttl is %s: a duplicate arriving after the TTL is forwarded again",
					s.Name, s.MaxRedeliveryDelay, c.SeenSet.TTL),
			})
		}
	}
	return append(ws, c.webhookWarnings()...)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// redactAddr hides what precedes the '@' of an address given as a URL with
// credentials (redis://:pass@host:6379, user:pass@kafka:9092): it is
// invalid, so it is quoted in the error, and the part before the '@' may
// be a password.
func redactAddr(a string) string {
	at := strings.LastIndex(a, "@")
	if at < 0 {
		return a
	}
	scheme, _, found := strings.Cut(a[:at], "://")
	if !found {
		scheme = ""
	} else {
		scheme += "://"
	}
	return scheme + "xxxxx" + a[at:]
}

// redact hides credentials (amqp://user:pass@…) in error messages; an
// unparsable one is shown with what precedes its '@' hidden, so that the
// user sees what they wrote.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redactAddr(raw)
	}
	return u.Redacted()
}

// amqpURLProblem says what is wrong with an AMQP URL and how to write it.
func amqpURLProblem(raw string) string {
	msg := fmt.Sprintf("must be an amqp:// or amqps:// URL, got %q", redact(raw))
	if !strings.Contains(raw, "://") && raw != "" {
		// host:port, as most clients take it: name the scheme and the
		// credentials it lacks.
		msg += fmt.Sprintf("; write it as amqp://USER:PASSWORD@%s/ (amqp://guest:guest@%s/ on a local RabbitMQ)", redactAddr(raw), redactAddr(raw))
	}
	return msg
}
