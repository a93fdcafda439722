package webhook

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The Standard Webhooks specification's own test vector.
const (
	swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTS     = 1614265330
	swBody   = `{"test": 2432232314}`
	swSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func mac(newH func() hash.Hash, key []byte, msg string) []byte {
	m := hmac.New(newH, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func verifier(t *testing.T, profile string, secrets []string, g Generic, now time.Time) *Verifier {
	t.Helper()
	v, err := NewVerifier(profile, secrets, 5*time.Minute, g)
	if err != nil {
		t.Fatal(err)
	}
	v.now = func() time.Time { return now }
	return v
}

func reason(err error) string {
	if err == nil {
		return ""
	}
	var r *Rejection
	if !errors.As(err, &r) {
		return "not a rejection: " + err.Error()
	}
	return r.Reason
}

func TestStandardWebhooksSpecVector(t *testing.T) {
	v := verifier(t, ProfileStandard, []string{swSecret}, Generic{}, time.Unix(swTS, 0))
	h := hdr("webhook-id", swID, "webhook-timestamp", strconv.Itoa(swTS), "webhook-signature", swSig)
	if err := v.Verify(h, []byte(swBody)); err != nil {
		t.Fatalf("spec vector refused: %v", err)
	}
	// Several signatures, one of another version and one wrong: any valid
	// v1 passes.
	h.Set("webhook-signature", "v1a,AAAA v1,Zm9v "+swSig)
	if err := v.Verify(h, []byte(swBody)); err != nil {
		t.Fatalf("list with the valid signature refused: %v", err)
	}
	// A changed byte, id or timestamp breaks it.
	for name, mut := range map[string]func(http.Header) []byte{
		"body": func(http.Header) []byte { return []byte(`{"test": 2432232315}`) },
		"id":   func(h http.Header) []byte { h.Set("webhook-id", swID+"x"); return []byte(swBody) },
		"ts":   func(h http.Header) []byte { h.Set("webhook-timestamp", strconv.Itoa(swTS+1)); return []byte(swBody) },
	} {
		h := hdr("webhook-id", swID, "webhook-timestamp", strconv.Itoa(swTS), "webhook-signature", swSig)
		if got := reason(v.Verify(h, mut(h))); got != ReasonBadSignature {
			t.Errorf("%s changed: reason %q, want %s", name, got, ReasonBadSignature)
		}
	}
	if k, _, _ := ProfileKey(ProfileStandard, h, nil); k != swID {
		t.Errorf("key %q, want %q", k, swID)
	}
	// Svix's default names carry the same scheme; the key is svix-id.
	sv := hdr("svix-id", swID, "svix-timestamp", strconv.Itoa(swTS), "svix-signature", swSig)
	if err := v.Verify(sv, []byte(swBody)); err != nil {
		t.Fatalf("spec vector under svix-* headers refused: %v", err)
	}
	if k, _, _ := ProfileKey(ProfileStandard, sv, nil); k != swID {
		t.Errorf("svix key %q, want %q", k, swID)
	}
	// Both families present: svix-* is read first, as Svix's verifier
	// does, for the signature and the key alike; an unsigned webhook-id
	// beside it never becomes the key.
	sv.Set("webhook-id", "msg_other")
	if err := v.Verify(sv, []byte(swBody)); err != nil {
		t.Fatalf("svix-* beside a stray webhook-id refused: %v", err)
	}
	if k, _, _ := ProfileKey(ProfileStandard, sv, nil); k != swID {
		t.Errorf("key %q with both families, want the signed %q", k, swID)
	}
}

// Each provider's recipe, built here with crypto/hmac as the provider
// documents it; every profile accepts it, refuses a wrong secret, and
// refuses a request without its headers.
func TestProfilesProviderRecipes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	body := `{"id":"evt_1","event_id":"Ev1","type":"x"}`
	const secret = "s3cr3t-of-the-sender"
	hexSig := func(newH func() hash.Hash, msg string) string {
		return hex.EncodeToString(mac(newH, []byte(secret), msg))
	}
	b64Sig := func(newH func() hash.Hash, msg string) string {
		return base64.StdEncoding.EncodeToString(mac(newH, []byte(secret), msg))
	}
	swKey := base64.StdEncoding.EncodeToString([]byte(secret))
	// GitHub and Shopify sign only the body: their key is its digest.
	bodySum := "sha256:" + sha256Hex(body)
	cases := []struct {
		profile string
		g       Generic
		secret  string
		h       http.Header
		key     string
	}{
		{ProfileStandard, Generic{}, "whsec_" + swKey,
			hdr("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature",
				"v1,"+base64.StdEncoding.EncodeToString(mac(sha256.New, []byte(secret), "msg_1."+ts+"."+body))), "msg_1"},
		{ProfileStripe, Generic{}, secret,
			hdr("Stripe-Signature", "t="+ts+",v1="+hexSig(sha256.New, ts+"."+body)+",v0=deadbeef"), "evt_1"},
		{ProfileGitHub, Generic{}, secret,
			hdr("X-Hub-Signature-256", "sha256="+hexSig(sha256.New, body), "X-GitHub-Hook-ID", "42", "X-GitHub-Delivery", "guid-1"), bodySum},
		{ProfileShopify, Generic{}, secret,
			hdr("X-Shopify-Hmac-Sha256", b64Sig(sha256.New, body), "X-Shopify-Event-Id", "shop-ev-1"), bodySum},
		{ProfileSlack, Generic{}, secret,
			hdr("X-Slack-Signature", "v0="+hexSig(sha256.New, "v0:"+ts+":"+body), "X-Slack-Request-Timestamp", ts), "Ev1"},
		{ProfileGenericHMAC, Generic{Header: "X-Sig", Prefix: "sha512=", Encoding: "hex", Algorithm: "sha512"}, secret,
			hdr("X-Sig", "sha512="+hexSig(sha512.New, body)), ""},
		{ProfileGenericHMAC, Generic{Header: "X-Sig", Encoding: "base64", Algorithm: "sha1", TimestampHeader: "X-Ts"}, secret,
			hdr("X-Sig", b64Sig(sha1.New, ts+"."+body), "X-Ts", ts), ""},
	}
	for _, c := range cases {
		t.Run(c.profile+"/"+c.g.Algorithm, func(t *testing.T) {
			v := verifier(t, c.profile, []string{c.secret}, c.g, now)
			if err := v.Verify(c.h, []byte(body)); err != nil {
				t.Fatalf("valid request refused: %v", err)
			}
			wrong := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret"))
			if c.profile != ProfileStandard {
				wrong = "another secret"
			}
			if got := reason(verifier(t, c.profile, []string{wrong}, c.g, now).Verify(c.h, []byte(body))); got != ReasonBadSignature {
				t.Errorf("wrong secret: reason %q, want %s", got, ReasonBadSignature)
			}
			if got := reason(v.Verify(http.Header{}, []byte(body))); got != ReasonUnsigned {
				t.Errorf("no headers: reason %q, want %s", got, ReasonUnsigned)
			}
			key, _, has := ProfileKey(c.profile, c.h, []byte(body))
			if key != c.key || has != (c.key != "") {
				t.Errorf("key %q (has %v), want %q", key, has, c.key)
			}
		})
	}
}

// Rotation: a request signed with any configured secret passes, so the
// sender can switch while both are listed.
func TestSecretRotation(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	body := `{"id":"evt_2"}`
	sign := func(s string) http.Header {
		return hdr("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac(sha256.New, []byte(s), ts+"."+body)))
	}
	v := verifier(t, ProfileStripe, []string{"old", "new"}, Generic{}, now)
	for _, s := range []string{"old", "new"} {
		if err := v.Verify(sign(s), []byte(body)); err != nil {
			t.Errorf("signed with %s: %v", s, err)
		}
	}
	if got := reason(v.Verify(sign("retired"), []byte(body))); got != ReasonBadSignature {
		t.Errorf("signed with a removed secret: reason %q", got)
	}
	// Stripe's own rotation: two v1 signatures in one header.
	h := hdr("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac(sha256.New, []byte("x"), ts+"."+body))+
		",v1="+hex.EncodeToString(mac(sha256.New, []byte("new"), ts+"."+body)))
	if err := verifier(t, ProfileStripe, []string{"new"}, Generic{}, now).Verify(h, []byte(body)); err != nil {
		t.Errorf("second v1 signature not tried: %v", err)
	}
}

// The tolerance is inclusive, both ways; one second beyond is stale (400),
// and a stale request with a bad signature is a bad signature (401).
func TestToleranceEdges(t *testing.T) {
	signed := time.Unix(swTS, 0)
	h := hdr("webhook-id", swID, "webhook-timestamp", strconv.Itoa(swTS), "webhook-signature", swSig)
	for _, tc := range []struct {
		offset time.Duration
		want   string
	}{
		{0, ""}, {5 * time.Minute, ""}, {-5 * time.Minute, ""},
		{5*time.Minute + time.Second, ReasonStale}, {-5*time.Minute - time.Second, ReasonStale}, {72 * time.Hour, ReasonStale},
	} {
		v := verifier(t, ProfileStandard, []string{swSecret}, Generic{}, signed.Add(tc.offset))
		err := v.Verify(h, []byte(swBody))
		if got := reason(err); got != tc.want {
			t.Errorf("now = signed %+v: reason %q, want %q", tc.offset, got, tc.want)
		}
		var r *Rejection
		if tc.want == ReasonStale && (!errors.As(err, &r) || r.Status != http.StatusBadRequest) {
			t.Errorf("stale answered %v, want 400", err)
		}
	}
	v := verifier(t, ProfileStandard, []string{swSecret}, Generic{}, signed.Add(time.Hour))
	if got := reason(v.Verify(h, []byte(swBody+" "))); got != ReasonBadSignature {
		t.Errorf("stale and forged: reason %q, want %s", got, ReasonBadSignature)
	}
}

func TestNewVerifierRefuses(t *testing.T) {
	for name, f := range map[string]func() error{
		"unknown profile": func() error { _, err := NewVerifier("paypal", []string{"x"}, time.Minute, Generic{}); return err },
		"no secret":       func() error { _, err := NewVerifier(ProfileGitHub, nil, time.Minute, Generic{}); return err },
		"undecodable whsec": func() error {
			_, err := NewVerifier(ProfileStandard, []string{"whsec_!!"}, time.Minute, Generic{})
			return err
		},
		"generic, no header": func() error {
			_, err := NewVerifier(ProfileGenericHMAC, []string{"x"}, time.Minute, Generic{})
			return err
		},
		"generic, md5": func() error {
			_, err := NewVerifier(ProfileGenericHMAC, []string{"x"}, time.Minute, Generic{Header: "X", Encoding: "hex", Algorithm: "md5"})
			return err
		},
		"generic, bad encode": func() error {
			_, err := NewVerifier(ProfileGenericHMAC, []string{"x"}, time.Minute, Generic{Header: "X", Encoding: "b32", Algorithm: "sha256"})
			return err
		},
	} {
		if f() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewVerifier(ProfileNone, nil, 0, Generic{}); err != nil {
		t.Errorf("none: %v", err)
	}
}

func TestSlackChallenge(t *testing.T) {
	if c, ok := SlackChallenge([]byte(`{"token":"t","challenge":"3eZbrw1a","type":"url_verification"}`)); !ok || c != "3eZbrw1a" {
		t.Errorf("challenge %q %v", c, ok)
	}
	if _, ok := SlackChallenge([]byte(`{"type":"event_callback","event_id":"Ev1"}`)); ok {
		t.Error("an event taken for a challenge")
	}
}

// Stripe's and Slack's body ids follow the broker sources' key rules: a
// lone surrogate escape is no key (encoding/json would turn "\ud800" and
// "\udbff" into one U+FFFD key), a control character is no key (it cannot
// travel as Idempotency-Key), and a valid escaped id is decoded.
func TestBodyIDsFollowTheKeyRules(t *testing.T) {
	for profile, field := range map[string]string{ProfileStripe: "id", ProfileSlack: "event_id"} {
		for _, tc := range []struct {
			raw, key, why string
		}{
			{`"evt_\ud800"`, "", "unpaired surrogate escape"},
			{`"evt_\udbff"`, "", "unpaired surrogate escape"},
			{`"evt_\u0007"`, "", "control characters"},
			{`"evt_\n"`, "", "control characters"},
			{`"evt_\ud83d\ude00"`, "evt_😀", ""},
			{`"evt_1"`, "evt_1", ""},
		} {
			body := []byte(`{"` + field + `":` + tc.raw + `,"type":"x"}`)
			key, why, ok := ProfileKey(profile, nil, body)
			if tc.why != "" {
				tc.why = "body field " + field + ": " + tc.why
			}
			if !ok || key != tc.key || why != tc.why {
				t.Errorf("%s %s: key %q why %q (ok %v), want %q %q", profile, tc.raw, key, why, ok, tc.key, tc.why)
			}
		}
	}
}

func sha256Hex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}
