// Package webhook receives webhooks with the guarantee the broker sources
// give: a sender delivers at least once, the app acts once. Each request
// is read raw, its signature verified over the exact bytes, its event key
// claimed in the seen-set, and then either published to a broker (enqueue)
// or forwarded to the app; the sender gets a 2xx only once the event is
// stored or processed, and a 2xx again for every redelivery of it.
package webhook

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
)

// Profiles are the senders whose signature scheme and event id the
// proxy knows.
const (
	ProfileStandard    = "standard-webhooks"
	ProfileStripe      = "stripe"
	ProfileGitHub      = "github"
	ProfileShopify     = "shopify"
	ProfileSlack       = "slack"
	ProfileGenericHMAC = "generic-hmac"
	ProfileNone        = "none"
)

// Profiles lists every profile name.
func Profiles() []string {
	return []string{ProfileStandard, ProfileStripe, ProfileGitHub, ProfileShopify, ProfileSlack, ProfileGenericHMAC, ProfileNone}
}

// RetryHorizon is how long after the first attempt a profile's sender may
// still deliver the same event (automatically or by a manual redelivery);
// its key must be remembered at least that long. 0: unknown.
func RetryHorizon(profile string) time.Duration {
	switch profile {
	case ProfileStandard:
		// The specification's example schedule adds up to about 76 hours.
		return 76 * time.Hour
	case ProfileStripe, ProfileGitHub:
		// Stripe retries live events for up to three days; GitHub does
		// not retry but lets an operator redeliver for three days.
		return 72 * time.Hour
	case ProfileShopify:
		return 4 * time.Hour
	case ProfileSlack:
		return time.Hour
	}
	return 0
}

// SignatureHeaders are the headers a profile signs with; they are not
// passed on with the event (they prove nothing to the app once verified).
func SignatureHeaders(profile string, g Generic) []string {
	switch profile {
	case ProfileStandard:
		return []string{"Webhook-Signature", "Svix-Signature"}
	case ProfileStripe:
		return []string{"Stripe-Signature"}
	case ProfileGitHub:
		return []string{"X-Hub-Signature-256", "X-Hub-Signature"}
	case ProfileShopify:
		return []string{"X-Shopify-Hmac-Sha256"}
	case ProfileSlack:
		return []string{"X-Slack-Signature"}
	case ProfileGenericHMAC:
		return []string{g.Header}
	}
	return nil
}

// SignedHeaders are the headers whose values a profile's signature covers
// (the signature header itself aside): a key read from any other header
// can be changed by whoever replays a captured request.
func SignedHeaders(profile string, g Generic) []string {
	switch profile {
	case ProfileStandard:
		return []string{"Webhook-Id", "Webhook-Timestamp", "Svix-Id", "Svix-Timestamp"}
	case ProfileSlack:
		return []string{"X-Slack-Request-Timestamp"}
	case ProfileGenericHMAC:
		if g.TimestampHeader != "" {
			return []string{g.TimestampHeader}
		}
	}
	return nil
}

// Generic describes a generic-hmac sender: the signature is
// Prefix + Encoding(HMAC-Algorithm(secret, signed)) in Header, where signed
// is the raw body, or "<TimestampHeader value>.<body>" when TimestampHeader
// is set (then also checked against the tolerance, in unix seconds).
type Generic struct {
	Header          string
	Prefix          string
	Encoding        string // hex | base64
	Algorithm       string // sha256 | sha512 | sha1
	TimestampHeader string
}

// Rejection is why a request was refused before anything was stored:
// Status is the answer, Reason the metric label.
type Rejection struct {
	Status int
	Reason string
	Msg    string
}

func (r *Rejection) Error() string { return r.Msg }

// Reasons of a Rejection, also the rejected metric's labels.
const (
	ReasonUnsigned     = "unsigned"      // a signature or timestamp header is missing or malformed
	ReasonBadSignature = "bad_signature" // no signature matches any secret
	ReasonStale        = "stale"         // signed, but the timestamp is outside the tolerance
)

func unsigned(format string, args ...any) *Rejection {
	return &Rejection{Status: http.StatusUnauthorized, Reason: ReasonUnsigned, Msg: fmt.Sprintf(format, args...)}
}

var errBadSignature = &Rejection{Status: http.StatusUnauthorized, Reason: ReasonBadSignature, Msg: "no signature matches"}

// Verifier checks one profile's signatures against any of its secrets,
// so a secret can be rotated: add the new one, switch the sender, then
// remove the old one.
type Verifier struct {
	profile   string
	secrets   [][]byte
	tolerance time.Duration
	generic   Generic
	now       func() time.Time
}

// NewVerifier checks the options: a known profile, at least one secret
// unless the profile is none, and Standard Webhooks secrets that decode.
func NewVerifier(profile string, secrets []string, tolerance time.Duration, g Generic) (*Verifier, error) {
	v := &Verifier{profile: profile, tolerance: tolerance, generic: g, now: time.Now}
	switch profile {
	case ProfileStandard, ProfileStripe, ProfileGitHub, ProfileShopify, ProfileSlack:
	case ProfileGenericHMAC:
		if g.Header == "" {
			return nil, errors.New("generic-hmac needs a header")
		}
		if _, err := newHash(g.Algorithm); err != nil {
			return nil, err
		}
		if g.Encoding != "hex" && g.Encoding != "base64" {
			return nil, fmt.Errorf("generic-hmac encoding %q: want hex or base64", g.Encoding)
		}
	case ProfileNone:
		return v, nil
	default:
		return nil, fmt.Errorf("unknown profile %q", profile)
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("profile %s needs at least one secret", profile)
	}
	if tolerance <= 0 {
		return nil, errors.New("tolerance must be positive")
	}
	for i, s := range secrets {
		b := []byte(s)
		if profile == ProfileStandard {
			// The key is the base64 after the whsec_ prefix, not the text.
			var err error
			if b, err = base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_")); err != nil {
				return nil, fmt.Errorf("secret %d: a Standard Webhooks secret is whsec_ followed by base64: %v", i, err)
			}
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("secret %d is empty", i)
		}
		v.secrets = append(v.secrets, b)
	}
	return v, nil
}

func newHash(alg string) (func() hash.Hash, error) {
	switch alg {
	case "sha256":
		return sha256.New, nil
	case "sha512":
		return sha512.New, nil
	case "sha1":
		return sha1.New, nil
	}
	return nil, fmt.Errorf("generic-hmac algorithm %q: want sha256, sha512 or sha1", alg)
}

// Verify returns nil when the request is signed by one of the secrets
// within the tolerance, and a *Rejection otherwise. The signature is
// checked before the timestamp, so only an authentic request learns that
// it is stale; every comparison is constant-time (hmac.Equal).
func (v *Verifier) Verify(h http.Header, body []byte) error {
	switch v.profile {
	case ProfileNone:
		return nil
	case ProfileStandard:
		return v.standard(h, body)
	case ProfileStripe:
		return v.stripe(h, body)
	case ProfileGitHub:
		sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
		if !ok {
			return unsigned("X-Hub-Signature-256 missing or not sha256=<hex>")
		}
		return v.match(sha256.New, [][]byte{body}, []string{sig}, hex.DecodeString)
	case ProfileShopify:
		sig := h.Get("X-Shopify-Hmac-Sha256")
		if sig == "" {
			return unsigned("X-Shopify-Hmac-Sha256 missing")
		}
		return v.match(sha256.New, [][]byte{body}, []string{sig}, base64.StdEncoding.DecodeString)
	case ProfileSlack:
		sig, ok := strings.CutPrefix(h.Get("X-Slack-Signature"), "v0=")
		ts := h.Get("X-Slack-Request-Timestamp")
		if !ok || ts == "" {
			return unsigned("X-Slack-Signature (v0=<hex>) or X-Slack-Request-Timestamp missing")
		}
		if err := v.match(sha256.New, [][]byte{[]byte("v0:" + ts + ":"), body}, []string{sig}, hex.DecodeString); err != nil {
			return err
		}
		return v.fresh(ts)
	case ProfileGenericHMAC:
		return v.genericHMAC(h, body)
	}
	return fmt.Errorf("unknown profile %q", v.profile)
}

// standardHeaders are a Standard Webhooks request's id, timestamp and
// signature list. Svix sends them as svix-id, svix-timestamp and
// svix-signature unless an account switches to the webhook-* names; like
// Svix's own verifier, each svix-* header is taken first and its webhook-*
// name otherwise. Verify and the event key read the id through this one
// function, so the key is always the id that was signed.
func standardHeaders(h http.Header) (id, ts, sigs string) {
	get := func(name string) string {
		if v := h.Get("Svix-" + name); v != "" {
			return v
		}
		return h.Get("Webhook-" + name)
	}
	return get("Id"), get("Timestamp"), get("Signature")
}

// standard: the signature header is a space-separated list of
// "<version>,<base64>"; v1 is HMAC-SHA256 over "<id>.<timestamp>.<body>".
// Other versions (v1a, ed25519) are skipped, not failed: a sender may
// send both.
func (v *Verifier) standard(h http.Header, body []byte) error {
	id, ts, list := standardHeaders(h)
	if id == "" || ts == "" || list == "" {
		return unsigned("webhook-id, webhook-timestamp or webhook-signature (or svix-id, svix-timestamp, svix-signature) missing")
	}
	var sigs []string
	for _, s := range strings.Fields(list) {
		if sig, ok := strings.CutPrefix(s, "v1,"); ok {
			sigs = append(sigs, sig)
		}
	}
	if len(sigs) == 0 {
		return unsigned("the signature header holds no v1 signature")
	}
	if err := v.match(sha256.New, [][]byte{[]byte(id + "." + ts + "."), body}, sigs, base64.StdEncoding.DecodeString); err != nil {
		return err
	}
	return v.fresh(ts)
}

// stripe: Stripe-Signature is "t=<unix>,v1=<hex>[,v1=<hex>…]" (other
// schemes such as v0 ignored), HMAC-SHA256 over "<t>.<body>" keyed with
// the whole whsec_ text.
func (v *Verifier) stripe(h http.Header, body []byte) error {
	var ts string
	var sigs []string
	for _, item := range strings.Split(h.Get("Stripe-Signature"), ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		switch {
		case !ok:
		case k == "t":
			ts = val
		case k == "v1":
			sigs = append(sigs, val)
		}
	}
	if ts == "" || len(sigs) == 0 {
		return unsigned("Stripe-Signature missing or without t= and v1=")
	}
	if err := v.match(sha256.New, [][]byte{[]byte(ts + "."), body}, sigs, hex.DecodeString); err != nil {
		return err
	}
	return v.fresh(ts)
}

func (v *Verifier) genericHMAC(h http.Header, body []byte) error {
	g := v.generic
	sig, ok := strings.CutPrefix(h.Get(g.Header), g.Prefix)
	if !ok || sig == "" {
		return unsigned("%s missing or without the prefix %q", g.Header, g.Prefix)
	}
	parts := [][]byte{body}
	var ts string
	if g.TimestampHeader != "" {
		if ts = h.Get(g.TimestampHeader); ts == "" {
			return unsigned("%s missing", g.TimestampHeader)
		}
		parts = [][]byte{[]byte(ts + "."), body}
	}
	decode := hex.DecodeString
	if g.Encoding == "base64" {
		decode = base64.StdEncoding.DecodeString
	}
	newH, _ := newHash(g.Algorithm)
	if err := v.match(newH, parts, []string{sig}, decode); err != nil {
		return err
	}
	if ts != "" {
		return v.fresh(ts)
	}
	return nil
}

// match computes the MAC of the concatenated parts under every secret and
// compares it with every candidate signature. Each comparison is
// constant-time; the loop's length depends only on how many secrets and
// signatures there are, which is no secret.
func (v *Verifier) match(newH func() hash.Hash, parts [][]byte, sigs []string, decode func(string) ([]byte, error)) error {
	var got [][]byte
	for _, s := range sigs {
		if b, err := decode(s); err == nil {
			got = append(got, b)
		}
	}
	if len(got) == 0 {
		return unsigned("signature is not validly encoded")
	}
	found := false
	for _, secret := range v.secrets {
		m := hmac.New(newH, secret)
		for _, p := range parts {
			m.Write(p)
		}
		want := m.Sum(nil)
		for _, g := range got {
			if hmac.Equal(want, g) {
				found = true
			}
		}
	}
	if !found {
		return errBadSignature
	}
	return nil
}

// fresh checks a signed unix timestamp against the tolerance, both ways:
// a clock ahead of ours is as suspect as a replay.
func (v *Verifier) fresh(ts string) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return unsigned("timestamp %q is not unix seconds", ts)
	}
	d := v.now().Sub(time.Unix(sec, 0))
	if d > v.tolerance || -d > v.tolerance {
		return &Rejection{Status: http.StatusBadRequest, Reason: ReasonStale,
			Msg: fmt.Sprintf("timestamp is %s from now, outside the tolerance of %s", d.Round(time.Second), v.tolerance)}
	}
	return nil
}

// KeySpaceSegment is the key-space segment of a webhook source's stored
// keys: "<consumer>:webhook/<key space>:<key>". A broker source's segment
// is its key space itself, a name that can hold neither '/' nor ':', so
// no broker source's key is ever a webhook's: a webhook marking an event
// done can never make the consumer of what it enqueued ack that event as
// a duplicate, in this deployment or another with the same names.
func KeySpaceSegment(space string) string { return "webhook/" + space }

// BodyDigestPrefix starts the key of an event keyed on its signed body.
const BodyDigestPrefix = "sha256:"

// BodyDigestKey is "sha256:<hex SHA-256 of the body>".
func BodyDigestKey(body []byte) string {
	d := sha256.Sum256(body)
	return BodyDigestPrefix + hex.EncodeToString(d[:])
}

// ProfileKey returns the event's identity, the same on every retry, for
// the profiles that know one; ok is false for generic-hmac and none (they
// use the key rules) and why says what was missing. It is always
// something the signature covers:
//
//   - standard-webhooks: the id header, signed with the timestamp;
//   - stripe, slack: the body's id, inside the signed body;
//   - github, shopify: they sign only the body, and their id headers
//     (X-GitHub-Delivery, X-Shopify-Event-Id) are not signed, so a
//     captured request replayed with a fresh id would be a new key. The
//     key is the digest of the signed body instead: within the TTL, the
//     same body is the same event whatever its id header says (two hooks
//     delivering one identical body to one source are one event).
func ProfileKey(profile string, h http.Header, body []byte) (key, why string, ok bool) {
	switch profile {
	case ProfileStandard:
		id, _, _ := standardHeaders(h)
		return nonEmpty(id, "webhook-id (or svix-id) header absent")
	case ProfileStripe:
		return bodyKey(stripeID, "id", body)
	case ProfileGitHub, ProfileShopify:
		return BodyDigestKey(body), "", true
	case ProfileSlack:
		return bodyKey(slackID, "event_id", body)
	}
	return "", "", false
}

// ProfileKeyRule says in words what ProfileKey keys an event by, for
// config print; "" for the profiles that use the key rules.
func ProfileKeyRule(profile string) string {
	switch profile {
	case ProfileStandard:
		return "the svix-id, else webhook-id header"
	case ProfileStripe:
		return "the body's id"
	case ProfileSlack:
		return "the body's event_id"
	case ProfileGitHub, ProfileShopify:
		return BodyDigestPrefix + "<hex SHA-256 of the body>"
	}
	return ""
}

func nonEmpty(v, why string) (string, string, bool) {
	if v == "" {
		return "", why, true
	}
	return v, "", true
}

// Body ids are read by the broker sources' key rules, so a webhook's key
// obeys the same rules as a message's: the raw JSON literal, a lone
// surrogate escape refused rather than decoded to U+FFFD (which would fold
// different ids into one key), control characters refused (the key
// travels as the Idempotency-Key header).
var (
	stripeID = mustRules("json:id")
	slackID  = mustRules("json:event_id")
)

func mustRules(specs ...string) *keys.Extractor {
	ex, err := keys.Parse(specs)
	if err != nil {
		panic(err)
	}
	return ex
}

func bodyKey(ex *keys.Extractor, field string, body []byte) (string, string, bool) {
	k, why := ex.Key(&broker.Message{Body: body})
	if k == "" {
		return "", "body field " + field + ": " + why, true
	}
	return k, "", true
}

// SlackChallenge returns the challenge of a Slack url_verification
// request, which is answered by echoing it and is not an event.
func SlackChallenge(body []byte) (string, bool) {
	var m struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(body, &m) != nil || m.Type != "url_verification" {
		return "", false
	}
	return m.Challenge, true
}
