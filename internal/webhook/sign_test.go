package webhook

import (
	"testing"
	"time"
)

// What Sign writes, Verify accepts, for every profile; a body changed
// after signing is refused.
func TestSignVerifies(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		profile, secret string
		g               Generic
	}{
		{ProfileStandard, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Generic{}},
		{ProfileStripe, "whsec_stripe_test", Generic{}},
		{ProfileGitHub, "gh-secret", Generic{}},
		{ProfileShopify, "shop-secret", Generic{}},
		{ProfileSlack, "slack-secret", Generic{}},
		{ProfileGenericHMAC, "generic", Generic{Header: "X-Sig", Prefix: "sha512=", Encoding: "hex", Algorithm: "sha512", TimestampHeader: "X-Ts"}},
		{ProfileGenericHMAC, "generic", Generic{Header: "X-Sig", Encoding: "base64", Algorithm: "sha256"}},
	} {
		t.Run(c.profile, func(t *testing.T) {
			v, err := NewVerifier(c.profile, []string{c.secret}, 5*time.Minute, c.g)
			if err != nil {
				t.Fatal(err)
			}
			body := SampleEvent(c.profile, "evt_sign_1")
			h, err := Sign(c.profile, c.secret, c.g, body, "evt_sign_1", now)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Verify(h, body); err != nil {
				t.Fatalf("signed request refused: %v", err)
			}
			if err := v.Verify(h, append(body, ' ')); err == nil {
				t.Fatal("a changed body was accepted")
			}
			if k, _, ok := ProfileKey(c.profile, h, body); ok && k == "" {
				t.Errorf("signed sample has no event key")
			}
		})
	}
	if _, err := Sign("paypal", "x", Generic{}, nil, "", now); err == nil {
		t.Error("an unknown profile was signed")
	}
}
