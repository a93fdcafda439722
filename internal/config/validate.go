package config

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/problems"
)

// A consumer name becomes the key namespace "<consumer>:<key space>:"; a colon in
// it would let two consumers' namespaces overlap.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Validate reports every invalid field, one line each, prefixed with its
// path.
func (c *Config) Validate() error {
	var p problems.List
	if !nameRE.MatchString(c.Consumer) {
		p.Add("consumer", "must be set to a name of letters, digits, '.', '_' or '-' (it namespaces the keys), got %q", c.Consumer)
	}
	p.Positive("shutdown_timeout", c.ShutdownTimeout)
	if c.HeapFloor < 0 {
		p.Add("heap_floor", "must be 0 (off) or a size such as 16MiB, got %d", c.HeapFloor)
	}
	p.OneOf("log.level", c.Log.Level, enums["log.level"]...)
	p.OneOf("log.format", c.Log.Format, enums["log.format"]...)
	if c.Admin.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Admin.Listen); err != nil {
			p.Add("admin.listen", "must be host:port or empty to disable, got %q", c.Admin.Listen)
		}
	}
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		p.Add("admin.token_file", "set either admin.token or admin.token_file, not both")
	}

	if c.App.URL == "" {
		p.Add("app.url", "must be set to the app's base URL, such as http://127.0.0.1:8080")
	} else if !strings.Contains(c.App.URL, "://") {
		// "localhost:8080" parses as scheme "localhost": say what is missing.
		p.Add("app.url", "has no scheme: write http://%s (or https://)", redactAddr(c.App.URL))
	} else if _, err := forward.ParseBaseURL(c.App.URL); err != nil {
		p.Add("app.url", "%v, got %q", err, redact(c.App.URL))
	}
	p.Positive("app.timeout", c.App.Timeout)
	p.Positive("app.max_request_time", c.App.MaxRequestTime)
	if c.App.MaxRequestTime > 0 && c.App.MaxRequestTime < c.App.Timeout {
		p.Add("app.max_request_time", "must be at least app.timeout (%s), got %s: a slow request is waited for until then", c.App.Timeout, c.App.MaxRequestTime)
	}
	p.AtLeast("app.max_conns", c.App.MaxConns, 1)
	if c.App.MaxResponseBytes <= 0 {
		p.Add("app.max_response_bytes", "must be positive, got %d", c.App.MaxResponseBytes)
	}
	if _, err := forward.ParseStatusRules(c.App.RetryStatuses); err != nil {
		p.Add("app.retry_statuses", "%v", err)
	}
	if c.App.HealthURL != "" {
		if u, err := url.Parse(c.App.HealthURL); err != nil ||
			!(strings.HasPrefix(c.App.HealthURL, "/") || (u.Scheme == "http" || u.Scheme == "https") && u.Host != "") {
			p.Add("app.health_url", "must be a path on app.url (/healthz) or an http:// or https:// URL, got %q", redact(c.App.HealthURL))
		}
		p.Positive("app.health_interval", c.App.HealthInterval)
	}

	s := c.SeenSet
	p.OneOf("seenset.backend", s.Backend, enums["seenset.backend"]...)
	// A zero TTL reaches Redis as "no expiry" and pins keys forever.
	p.Positive("seenset.ttl", s.TTL)
	p.Positive("seenset.lease", s.Lease)
	if s.Lease > 0 && s.Lease < 300*time.Millisecond {
		p.Add("seenset.lease", "must be at least 300ms so renewals (every lease/3) outpace expiry, got %s", s.Lease)
	}
	p.OneOf("seenset.on_store_error", s.OnStoreError, enums["seenset.on_store_error"]...)
	if s.Backend == "redis" {
		if len(s.Redis.Addrs) == 0 {
			p.Add("seenset.redis.addrs", "must list at least one host:port")
		}
		for i, a := range s.Redis.Addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				p.Add(fmt.Sprintf("seenset.redis.addrs[%d]", i), "must be host:port, got %q", redactAddr(a))
			}
		}
		if s.Redis.MasterName == "" {
			if s.Redis.SentinelUsername != "" {
				p.Add("seenset.redis.sentinel_username", "set, but master_name is empty: only Sentinel uses it")
			}
			if s.Redis.SentinelPassword != "" {
				p.Add("seenset.redis.sentinel_password", "set, but master_name is empty: only Sentinel uses it")
			}
		}
		p.Positive("seenset.redis.dial_timeout", s.Redis.DialTimeout)
		p.Positive("seenset.redis.read_timeout", s.Redis.ReadTimeout)
		p.Positive("seenset.redis.write_timeout", s.Redis.WriteTimeout)
		p.AtLeast("seenset.redis.pool_size", s.Redis.PoolSize, 1)
		p.AtLeast("seenset.redis.db", s.Redis.DB, 0)
		p.AtLeast("seenset.redis.wait_replicas", s.Redis.WaitReplicas, 0)
		if h := s.Redis.HashKeysOver; h != 0 && h < 44 {
			p.Add("seenset.redis.hash_keys_over", "must be 0 (off) or at least 44, the length of a hashed key, got %d", h)
		}
		if s.Redis.WaitReplicas > 0 {
			// WAIT n 0 blocks for ever; and the reply must come before the
			// read timeout gives up on the connection.
			if s.Redis.WaitTimeout < time.Millisecond || s.Redis.WaitTimeout >= s.Redis.ReadTimeout {
				p.Add("seenset.redis.wait_timeout", "must be at least 1ms and below seenset.redis.read_timeout (%s) when wait_replicas is set, got %s", s.Redis.ReadTimeout, s.Redis.WaitTimeout)
			}
		}
	}

	d := c.Delivery
	p.AtLeast("delivery.max_attempts", d.MaxAttempts, 1)
	p.Positive("delivery.backoff_initial", d.BackoffInitial)
	p.Positive("delivery.backoff_max", d.BackoffMax)
	if d.BackoffMax > 0 && d.BackoffMax < d.BackoffInitial {
		p.Add("delivery.backoff_max", "must not be below delivery.backoff_initial (%s), got %s", d.BackoffInitial, d.BackoffMax)
	}
	if d.Jitter < 0 || d.Jitter > 1 {
		p.Add("delivery.jitter", "must be between 0 and 1, got %g", d.Jitter)
	}
	p.Positive("delivery.busy_delay", d.BusyDelay)
	p.AtLeast("delivery.commit_attempts", d.CommitAttempts, 1)
	if d.MaxBodyBytes <= 0 {
		p.Add("delivery.max_body_bytes", "must be positive, got %d", d.MaxBodyBytes)
	}

	if len(c.Sources) == 0 {
		p.Add("sources", "must list at least one source")
	}
	names := map[string]int{}
	for i, src := range c.Sources {
		src.validate(fmt.Sprintf("sources[%d]", i), &p)
		if j, dup := names[src.Name]; dup && src.Name != "" {
			p.Add(fmt.Sprintf("sources[%d].name", i), "%q is already used by sources[%d]", src.Name, j)
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
			p.Add(fmt.Sprintf("sources[%d].kafka.group_instance_id", i), "%q is already the instance id of sources[%d] in group %q: set a different one on each",
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

func (s *Source) validate(at string, p *problems.List) {
	if !nameRE.MatchString(s.Name) {
		p.Add(at+".name", "must be set to a name of letters, digits, '.', '_' or '-', got %q", s.Name)
	}
	p.OneOf(at+".type", s.Type, enums["sources.type"]...)
	if !strings.HasPrefix(s.Path, "/") {
		p.Add(at+".path", "must start with '/', got %q", s.Path)
	}
	if _, err := keys.Parse(s.Key); err != nil {
		for _, e := range unjoin(err) {
			p.Add(at+".key", "%v", e)
		}
	}
	p.OneOf(at+".on_missing_key", s.OnMissingKey, enums["sources.on_missing_key"]...)
	p.OneOf(at+".key_reuse", s.KeyReuse, enums["sources.key_reuse"]...)
	if _, err := keys.ParseDigestFields(s.KeyReuseFields); err != nil {
		for _, e := range unjoin(err) {
			p.Add(at+".key_reuse_fields", "%v", e)
		}
	}
	if s.KeySpace != "" && !nameRE.MatchString(s.KeySpace) {
		// No ':' either: it would let "<space>:<key>" of one source equal
		// another source's key.
		p.Add(at+".key_space", "must be empty (the source's name) or a name of letters, digits, '.', '_' or '-', got %q", s.KeySpace)
	}
	if s.MaxRedeliveryDelay < 0 {
		p.Add(at+".max_redelivery_delay", "must not be negative (0: unknown), got %s", s.MaxRedeliveryDelay)
	}
	if s.ContentType != "" {
		if err := mediaType(s.ContentType); err != nil {
			p.Add(at+".content_type", "must be a media type such as application/json, got %q (%v)", s.ContentType, err)
		} else if s.Type == "webhook" {
			p.Add(at+".content_type", "is not used by a webhook source: the sender's own Content-Type is passed on")
		}
	}
	if k := KindOf(s.Type); k != nil {
		k.Validate(s, at, p)
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

func redactAddr(a string) string { return problems.RedactAddr(a) }

func redact(raw string) string { return problems.Redact(raw) }
