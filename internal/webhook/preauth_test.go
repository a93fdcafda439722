package webhook

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// trickle opens n connections that each send a request's headers and then
// one body byte every 100ms, never finishing: an unauthenticated client
// holding the request open for as long as the server lets it.
func trickle(t *testing.T, addr string, n int) {
	t.Helper()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		go func() {
			for range 600 {
				time.Sleep(100 * time.Millisecond)
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
	}
}

// preauthRig is a forward-mode handler behind a real Listener.
func preauthRig(t *testing.T, readTimeout time.Duration, mutate func(*Options)) (string, *metrics.Metrics, *tu.App) {
	t.Helper()
	app := tu.NewApp(t)
	fwd, err := forward.New(forward.Config{URL: app.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	v, err := NewVerifier(ProfileStandard, []string{testSecret}, 5*time.Minute, Generic{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	o := Options{Name: "hooks", Prefix: tu.UniqueName("whtest:") + ":", Profile: ProfileStandard, Verifier: v,
		Store: newStore(t, tu.RedisAddr()), Lease: 3 * time.Second, TTL: time.Hour, BusyDelay: time.Second,
		Forwarder: fwd, AppPath: "/hooks", MaxBodyBytes: 1 << 16, MaxConcurrent: 2, MaxUnverified: 16, CommitAttempts: 3,
		OpTimeout: 2 * time.Second, Logger: testLogger(), Metrics: m.ForWebhook("hooks")}
	if mutate != nil {
		mutate(&o)
	}
	addr := runListener(t, ListenerOptions{Name: "hooks", ReadTimeout: readTimeout}, NewHandler(o))
	return addr, m, app
}

// More trickling unauthenticated clients than max_concurrent: they wait
// in the pre-auth stage, which has its own limit, so a signed webhook
// still finds a store slot and is stored (2xx), while they hold theirs.
func TestTricklingClientsDoNotStarveSignedWebhooks(t *testing.T) {
	addr, m, app := preauthRig(t, 10*time.Second, nil)
	trickle(t, addr, 4)
	tu.Eventually(t, 5*time.Second, "the trickling requests reached the handler", func() bool {
		return testutil.ToFloat64(m.Webhook.Received.WithLabelValues("hooks")) == 4
	})
	code, _ := send(t, signed(t, "http://"+addr+"/webhook", "msg_amid_trickles", []byte(`{"n":1}`), time.Now()))
	if code != http.StatusOK {
		t.Fatalf("signed webhook amid 4 trickling clients (max_concurrent 2) answered %d, want 200", code)
	}
	if app.Effects()["msg_amid_trickles"] != 1 {
		t.Fatalf("app effects %v, want msg_amid_trickles once", app.Effects())
	}
}

// The pre-auth stage is bounded on its own: with max_unverified requests
// being read (and store slots to spare), the next is answered 503 with
// Retry-After at once; each trickler is cut at read_timeout, and then a
// signed webhook is stored.
func TestUnverifiedRequestsBounded(t *testing.T) {
	addr, m, _ := preauthRig(t, time.Second, func(o *Options) { o.MaxUnverified, o.MaxConcurrent = 3, 64 })
	url := "http://" + addr + "/webhook"
	trickle(t, addr, 3)
	tu.Eventually(t, 5*time.Second, "the trickling requests reached the handler", func() bool {
		return testutil.ToFloat64(m.Webhook.Received.WithLabelValues("hooks")) == 3
	})
	code, h := send(t, signed(t, url, "msg_full", []byte(`{"n":2}`), time.Now()))
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("with max_unverified requests being read: %d Retry-After %q, want 503 with Retry-After", code, h.Get("Retry-After"))
	}
	tu.Eventually(t, 5*time.Second, "a signed webhook stored once read_timeout cut the tricklers", func() bool {
		code, _ := send(t, signed(t, url, "msg_after", []byte(`{"n":3}`), time.Now()))
		return code == http.StatusOK
	})
}
