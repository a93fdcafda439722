package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// GitHub and Shopify sign only the body, and their id headers are not
// signed: a captured request replayed with a fresh id header is the same
// event (200, the app called once), keyed on the signed body's digest,
// which is also the app's Idempotency-Key. Another body is another event.
func TestBodyOnlyProfilesReplayWithFreshIDIsDuplicate(t *testing.T) {
	const secret = "body-only-secret"
	sum := func(b []byte) []byte { m := hmac.New(sha256.New, []byte(secret)); m.Write(b); return m.Sum(nil) }
	for _, tc := range []struct {
		profile string
		sign    func(h http.Header, body []byte)
		id      func(h http.Header, n int)
	}{
		{ProfileGitHub,
			func(h http.Header, body []byte) {
				h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(sum(body)))
			},
			func(h http.Header, n int) {
				h.Set("X-GitHub-Delivery", "guid-"+string(rune('a'+n)))
				h.Set("X-GitHub-Hook-ID", "4"+string(rune('0'+n)))
			}},
		{ProfileShopify,
			func(h http.Header, body []byte) {
				h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(sum(body)))
			},
			func(h http.Header, n int) { h.Set("X-Shopify-Event-Id", "shop-ev-"+string(rune('a'+n))) }},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			app := tu.NewApp(t)
			fwd, err := forward.New(forward.Config{URL: app.URL, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(fwd.Close)
			v, err := NewVerifier(tc.profile, []string{secret}, 5*time.Minute, Generic{})
			if err != nil {
				t.Fatal(err)
			}
			r := newRig(t, newStore(t, tu.RedisAddr()), nil, func(o *Options) {
				o.Profile, o.Verifier, o.Sink, o.Forwarder, o.AppPath = tc.profile, v, nil, fwd, "/hooks"
			})
			post := func(body []byte, n int) int {
				req, _ := http.NewRequest(http.MethodPost, r.url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				tc.sign(req.Header, body)
				tc.id(req.Header, n)
				code, _ := send(t, req)
				return code
			}
			body := []byte(`{"action":"paid","order":{"id":1042,"total":"42.00"}}`)
			for n := range 3 {
				if code := post(body, n); code != http.StatusOK {
					t.Fatalf("delivery %d (id header %d) answered %d, want 200", n, n, code)
				}
			}
			other := []byte(`{"action":"paid","order":{"id":1043,"total":"42.00"}}`)
			if code := post(other, 0); code != http.StatusOK {
				t.Fatalf("another event answered %d", code)
			}
			d := sha256.Sum256(body)
			want := BodyDigestPrefix + hex.EncodeToString(d[:])
			if eff := app.Effects(); app.Count() != 2 || eff[want] != 1 {
				t.Fatalf("app got %d requests, effects %v; want 2, one of them keyed %s", app.Count(), eff, want)
			}
		})
	}
}
