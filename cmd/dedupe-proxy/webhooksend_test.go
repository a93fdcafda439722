package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// webhook send signs as the provider does: a real webhook source on the
// shared Redis accepts it and forwards it once; a wrong secret is 401 and
// exit 1; a second send of the same id is a duplicate.
func TestWebhookSend(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
	}))
	t.Cleanup(app.Close)
	fwd, err := forward.New(forward.Config{URL: app.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, profile := range []string{webhook.ProfileStripe, webhook.ProfileStandard, webhook.ProfileGitHub} {
		t.Run(profile, func(t *testing.T) {
			secret := "test-secret-" + profile
			if profile == webhook.ProfileStandard {
				secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
			}
			v, err := webhook.NewVerifier(profile, []string{secret}, 5*time.Minute, webhook.Generic{})
			if err != nil {
				t.Fatal(err)
			}
			h := webhook.NewHandler(webhook.Options{Name: "hooks", Prefix: testutil.UniqueName("send") + ":webhook/hooks:", Profile: profile,
				Verifier: v, Store: testutil.RedisStore(t, "send-"), Lease: 5 * time.Second, TTL: time.Hour, Forwarder: fwd,
				MaxBodyBytes: 1 << 20, MaxConcurrent: 4})
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			t.Setenv("SEND_SECRET", secret)
			id := "evt_send_" + profile
			code, out, errOut := cli("webhook", "send", "--profile", profile, "--secret", "env:SEND_SECRET", "--url", srv.URL, "--id", id)
			if code != 0 || !strings.Contains(out, "200 OK") {
				t.Fatalf("send: exit %d, out %q, err %q", code, out, errOut)
			}
			code, out, _ = cli("webhook", "send", "--profile", profile, "--secret", "env:SEND_SECRET", "--url", srv.URL, "--id", id)
			if code != 0 || !strings.Contains(out, "duplicate") {
				t.Fatalf("second send: exit %d, out %q, want 200 duplicate", code, out)
			}
			t.Setenv("SEND_SECRET", "not-"+secret)
			if profile == webhook.ProfileStandard {
				t.Setenv("SEND_SECRET", "whsec_bm90LXRoZS1zZWNyZXQ=")
			}
			if code, out, _ := cli("webhook", "send", "--profile", profile, "--secret", "env:SEND_SECRET", "--url", srv.URL); code != 1 || !strings.Contains(out, "401") {
				t.Fatalf("wrong secret: exit %d, out %q, want 401 and exit 1", code, out)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Errorf("the app got %v, want one request per profile", got)
	}
	for k, n := range got {
		if n != 1 {
			t.Errorf("%s reached the app %d times", k, n)
		}
	}
	if code, _, errOut := cli("webhook", "send", "--profile", "stripe", "--url", "http://127.0.0.1:1"); code != 2 || !strings.Contains(errOut, "required") {
		t.Errorf("no secret: exit %d, %q", code, errOut)
	}
}

// A redirect is never followed: the signature and body would go to another
// origin, and that origin's 2xx would read as the source's. send exits 1 on
// a 3xx and names the Location.
func TestWebhookSendDoesNotFollowRedirects(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []http.Header
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhere = append(elsewhere, r.Header.Clone())
		mu.Unlock()
	}))
	t.Cleanup(other.Close)
	target := other.URL + "/collect"
	source := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(source.Close)
	code, out, errOut := cli("webhook", "send", "--profile", webhook.ProfileStripe, "--secret", "whsec_test", "--url", source.URL+"/hooks/stripe")
	if code != 1 {
		t.Errorf("exit %d, want 1 (out %q, err %q)", code, out, errOut)
	}
	if !strings.Contains(out+errOut, "307") || !strings.Contains(out+errOut, target) {
		t.Errorf("out %q, err %q: want the 307 and its Location %s named", out, errOut, target)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(elsewhere) != 0 {
		t.Errorf("the redirect was followed: the other origin got %d request(s), signature header %q",
			len(elsewhere), elsewhere[0].Get("Stripe-Signature"))
	}
}
