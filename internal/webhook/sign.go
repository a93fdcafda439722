package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sign returns the headers a sender of profile puts on body, signed with
// secret at time at: what the verifier checks, computed the way the
// provider computes it, so that a team can try a source's config without
// the provider (`dedupe-proxy webhook send`). id is the event id for the
// profiles that carry one in a header (standard-webhooks: webhook-id;
// Shopify: X-Shopify-Event-Id; GitHub: X-GitHub-Delivery); Stripe and
// Slack carry theirs in the body. generic-hmac signs as g describes.
func Sign(profile, secret string, g Generic, body []byte, id string, at time.Time) (http.Header, error) {
	h := http.Header{}
	ts := strconv.FormatInt(at.Unix(), 10)
	key := []byte(secret)
	mac := func(parts ...string) []byte {
		m := hmac.New(sha256.New, key)
		for _, p := range parts {
			m.Write([]byte(p))
		}
		m.Write(body)
		return m.Sum(nil)
	}
	switch profile {
	case ProfileStandard:
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil || len(k) == 0 {
			return nil, errors.New("a Standard Webhooks secret is whsec_ followed by base64")
		}
		key = k
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac(id+"."+ts+".")))
	case ProfileStripe:
		h.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac(ts+".")))
	case ProfileGitHub:
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac()))
		h.Set("X-GitHub-Delivery", id)
		h.Set("X-GitHub-Event", "ping")
	case ProfileShopify:
		h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac()))
		h.Set("X-Shopify-Event-Id", id)
	case ProfileSlack:
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac("v0:"+ts+":")))
	case ProfileGenericHMAC:
		newHash, err := newHash(g.Algorithm)
		if err != nil {
			return nil, err
		}
		m := hmac.New(newHash, key)
		if g.TimestampHeader != "" {
			h.Set(g.TimestampHeader, ts)
			m.Write([]byte(ts + "."))
		}
		m.Write(body)
		sum := m.Sum(nil)
		enc := hex.EncodeToString(sum)
		if g.Encoding == "base64" {
			enc = base64.StdEncoding.EncodeToString(sum)
		}
		h.Set(g.Header, g.Prefix+enc)
	case ProfileNone:
	default:
		return nil, fmt.Errorf("unknown profile %q (one of %s)", profile, strings.Join(Profiles(), ", "))
	}
	return h, nil
}

// SampleEvent is a small test event in profile's shape, carrying id where
// the profile reads the event id from the body (Stripe's id, Slack's
// event_id) and as meta.id for the default key rule.
func SampleEvent(profile, id string) []byte {
	switch profile {
	case ProfileStripe:
		return []byte(`{"id":"` + id + `","object":"event","type":"payment_intent.succeeded","data":{"object":{"amount":4200,"currency":"eur"}}}`)
	case ProfileSlack:
		return []byte(`{"type":"event_callback","event_id":"` + id + `","event":{"type":"app_mention","text":"test"}}`)
	}
	return []byte(`{"meta":{"id":"` + id + `"},"type":"test.event","data":{"amount":4200}}`)
}
