package config

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/problems"
	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// ResolveSecrets reads every secret reference: env:<VARIABLE> through
// lookup, file:<path> from the file (trimmed, as a mounted Secret ends
// with a newline). Each error starts with "secrets[i]: ". References that
// are neither are skipped here and reported by Validate.
func (w Webhook) ResolveSecrets(lookup func(string) (string, bool)) ([]string, []error) {
	var out []string
	var errs []error
	for i, ref := range w.Secrets {
		at := fmt.Sprintf("secrets[%d]", i)
		if name, ok := strings.CutPrefix(ref, "env:"); ok && name != "" {
			v, set := lookup(name)
			if v = strings.TrimSpace(v); !set || v == "" {
				errs = append(errs, fmt.Errorf("%s: environment variable %s is not set or empty", at, name))
				continue
			}
			out = append(out, v)
			continue
		}
		if path, ok := strings.CutPrefix(ref, "file:"); ok && path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", at, err))
				continue
			}
			v := strings.TrimSpace(string(b))
			if v == "" {
				errs = append(errs, fmt.Errorf("%s: file %s is empty", at, path))
				continue
			}
			out = append(out, v)
			continue
		}
		// A malformed reference is Validate's to report; it is never
		// echoed (it may be the secret itself, pasted in).
	}
	return out, errs
}

// isLoopback reports whether a listen address only takes local
// connections.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Source) validateWebhook(at string, p *problems.List) {
	w := s.Webhook
	at += ".webhook"
	if _, _, err := net.SplitHostPort(w.Listen); err != nil {
		p.Add(at+".listen", "must be host:port, got %q", w.Listen)
	}
	if !strings.HasPrefix(w.Path, "/") {
		p.Add(at+".path", "must start with '/', got %q", w.Path)
	}
	p.OneOf(at+".profile", w.Profile, enums["sources.webhook.profile"]...)
	if w.Profile != webhook.ProfileNone && slices.Contains(webhook.Profiles(), w.Profile) && len(w.Secrets) == 0 {
		p.Add(at+".secrets", "profile %s needs at least one secret (env:<VARIABLE> or file:<path>)", w.Profile)
	}
	for i, ref := range w.Secrets {
		env, isEnv := strings.CutPrefix(ref, "env:")
		file, isFile := strings.CutPrefix(ref, "file:")
		if !(isEnv && env != "" || isFile && file != "") {
			p.Add(fmt.Sprintf("%s.secrets[%d]", at, i), "must be env:<VARIABLE> or file:<path>; a secret is never written in the config file")
		}
	}
	if w.Profile == webhook.ProfileNone && !isLoopback(w.Listen) && w.AllowUnsignedOn != w.Listen {
		p.Add(at+".profile", "none accepts unsigned requests from anyone who can reach %s; listen on a loopback address, or acknowledge with allow_unsigned_on: %q", w.Listen, w.Listen)
	}
	if w.Profile == webhook.ProfileGenericHMAC {
		if w.Generic.Header == "" {
			p.Add(at+".generic.header", "must name the signature header for profile generic-hmac")
		}
		p.OneOf(at+".generic.encoding", w.Generic.Encoding, enums["sources.webhook.generic.encoding"]...)
		p.OneOf(at+".generic.algorithm", w.Generic.Algorithm, enums["sources.webhook.generic.algorithm"]...)
	}
	p.Positive(at+".tolerance", w.Tolerance)
	p.OneOf(at+".key_from", w.KeyFrom, enums["sources.webhook.key_from"]...)
	p.OneOf(at+".mode", w.Mode, enums["sources.webhook.mode"]...)
	if w.MaxBodyBytes <= 0 {
		p.Add(at+".max_body_bytes", "must be positive, got %d", w.MaxBodyBytes)
	}
	p.AtLeast(at+".max_concurrent", w.MaxConcurrent, 1)
	p.AtLeast(at+".max_unverified", w.MaxUnverified, 1)
	p.Positive(at+".read_timeout", w.ReadTimeout)
	if w.Mode != "enqueue" {
		return
	}
	t := w.Target
	p.OneOf(at+".target.broker", t.Broker, enums["sources.webhook.target.broker"]...)
	if kt := targets[t.Broker]; kt != nil {
		kt.Validate(t, at+".target", p)
	}
}

// validateSharedKeySpaces refuses a key space named by a webhook source and
// a broker source. They cannot share it (a webhook's keys are stored under
// webhook/<key space>), and had they shared it, the webhook's done mark
// would be the consumer's claim: every event the webhook enqueued acked as
// a duplicate, never at the app. The error goes on the key_space that was
// set (both are the source's name by default, and names are unique).
func (c *Config) validateSharedKeySpaces(p *problems.List) {
	type first struct {
		i    int
		kind string
	}
	seen := map[string]first{}
	for i, s := range c.Sources {
		kind := "broker"
		if s.Type == "webhook" {
			kind = "webhook"
		}
		space := s.KeySpaceName()
		f, ok := seen[space]
		if !ok {
			seen[space] = first{i, kind}
			continue
		}
		if f.kind == kind {
			continue
		}
		at := i
		if s.KeySpace == "" {
			at = f.i
		}
		hook, brk := i, f.i
		if kind == "broker" {
			hook, brk = f.i, i
		}
		p.Add(fmt.Sprintf("sources[%d].key_space", at),
			"key space %q is both webhook source sources[%d]'s and broker source sources[%d]'s; they never share keys "+
				"(a webhook's are stored under webhook/%s), and if they did, the webhook's done mark would make the broker source "+
				"ack the events it enqueued as duplicates, never forwarding them; give them different key spaces "+
				"(the broker source dedupes what it consumes in its own)", space, hook, brk, space)
	}
}

// webhookWarnings: a seen-set TTL shorter than the sender's retry horizon
// lets a late retry through as a new event; a key read from a header the
// signature does not cover lets a replay through as one.
func (c *Config) webhookWarnings() []Warning {
	var ws []Warning
	for i, s := range c.Sources {
		if s.Type != "webhook" {
			continue
		}
		ws = append(ws, unsignedKeyWarnings(i, s)...)
		if h := webhook.RetryHorizon(s.Webhook.Profile); h > c.SeenSet.TTL {
			ws = append(ws, Warning{
				Path: fmt.Sprintf("sources[%d].webhook.profile", i),
				Msg: fmt.Sprintf("%s senders may deliver the same event up to %s after the first attempt, but seenset.ttl is %s: "+
					"a retry arriving after the TTL is stored and processed again; set seenset.ttl to at least %s",
					s.Webhook.Profile, fmtHours(h), c.SeenSet.TTL, fmtHours(h)),
			})
		}
	}
	return ws
}

// unsignedKeyWarnings: the key rules decide a webhook's key for
// generic-hmac and with key_from: rules; a header: rule there reads a
// header the sender may not sign. Profile none verifies nothing, so it
// has no signature to fall outside of.
func unsignedKeyWarnings(i int, s Source) []Warning {
	w := s.Webhook
	if w.Profile == webhook.ProfileNone || (w.Profile != webhook.ProfileGenericHMAC && w.KeyFrom != "rules") {
		return nil
	}
	g := webhook.Generic{TimestampHeader: w.Generic.TimestampHeader}
	var ws []Warning
	for j, rule := range s.Key {
		name, ok := strings.CutPrefix(strings.TrimSpace(rule), "header:")
		if !ok || slices.ContainsFunc(webhook.SignedHeaders(w.Profile, g), func(h string) bool { return strings.EqualFold(h, name) }) {
			continue
		}
		ws = append(ws, Warning{
			Path: fmt.Sprintf("sources[%d].key[%d]", i, j),
			Msg: fmt.Sprintf("the %s signature does not cover header %s: a captured request replayed with a new value there is verified "+
				"and stored as a new event, so this key gives no replay protection; key on a field of the signed body (json:<path>) instead",
				w.Profile, name),
		})
	}
	return ws
}

func fmtHours(d time.Duration) string { return fmt.Sprintf("%dh", int(d.Hours())) }
