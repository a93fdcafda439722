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

// --config F --source NAME takes the source's profile, first secret and
// URL (a wildcard listen address reached on loopback); --source may be
// left out with one webhook source; a flag overrides one value.
func TestWebhookSendFromConfig(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(app.Close)
	fwd, err := forward.New(forward.Config{URL: app.URL})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "whsec_fromconfig"
	v, err := webhook.NewVerifier(webhook.ProfileStripe, []string{secret}, 5*time.Minute, webhook.Generic{})
	if err != nil {
		t.Fatal(err)
	}
	h := webhook.NewHandler(webhook.Options{Name: "stripe", Prefix: testutil.UniqueName("sendcfg") + ":webhook/stripe:", Profile: webhook.ProfileStripe,
		Verifier: v, Store: testutil.RedisStore(t, "sendcfg-"), Lease: 5 * time.Second, TTL: time.Hour, Forwarder: fwd,
		MaxBodyBytes: 1 << 20, MaxConcurrent: 4})
	mux := http.NewServeMux()
	mux.Handle("/hooks/stripe", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, port, _ := strings.Cut(srv.Listener.Addr().String(), ":")

	t.Setenv("SEND_CFG_SECRET", secret)
	t.Setenv("SEND_CFG_OLD_SECRET", "whsec_old")
	cfg := writeConfig(t, `consumer: c
app: {url: "http://127.0.0.1:1"}
sources:
  - name: orders
    rabbitmq: {url: "amqp://127.0.0.1:5672/", queue: orders}
  - name: stripe
    type: webhook
    webhook:
      listen: "0.0.0.0:`+port+`"
      path: /hooks/stripe
      profile: stripe
      secrets: ["env:SEND_CFG_SECRET", "env:SEND_CFG_OLD_SECRET"]
      mode: forward
`)
	if code, out, errOut := cli("webhook", "send", "--config", cfg, "--source", "stripe", "--id", "evt_cfg_1"); code != 0 || !strings.Contains(out, "200 OK") {
		t.Fatalf("--source stripe: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, out, errOut := cli("webhook", "send", "--config", cfg, "--id", "evt_cfg_2"); code != 0 || !strings.Contains(out, "200 OK") {
		t.Fatalf("the only webhook source: exit %d, out %q, err %q", code, out, errOut)
	}
	// --url overrides the source's: the path it names is not the listener's.
	if code, out, _ := cli("webhook", "send", "--config", cfg, "--url", srv.URL+"/hooks/other"); code != 1 || !strings.Contains(out, "404") {
		t.Errorf("--url override: exit %d, out %q, want 404 and exit 1", code, out)
	}
	// --secret overrides the source's: a wrong one is refused.
	if code, out, _ := cli("webhook", "send", "--config", cfg, "--secret", "whsec_wrong"); code != 1 || !strings.Contains(out, "401") {
		t.Errorf("--secret override: exit %d, out %q, want 401 and exit 1", code, out)
	}
	if code, _, errOut := cli("webhook", "send", "--config", cfg, "--source", "orders"); code != 2 || !strings.Contains(errOut, `source "orders" is of type rabbitmq, not webhook; its webhook sources: [stripe]`) {
		t.Errorf("a rabbitmq source: exit %d, %q", code, errOut)
	}
	if code, _, errOut := cli("webhook", "send", "--config", cfg, "--source", "nope"); code != 2 || !strings.Contains(errOut, `no source "nope"`) {
		t.Errorf("an unknown source: exit %d, %q", code, errOut)
	}
	t.Setenv("SEND_CFG_SECRET", "")
	if code, _, errOut := cli("webhook", "send", "--config", cfg, "--source", "stripe"); code != 1 || !strings.Contains(errOut, "SEND_CFG_SECRET") {
		t.Errorf("secret not set: exit %d, %q", code, errOut)
	}
}
