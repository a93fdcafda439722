package webhook

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// A POST to a path the listener does not take answers 404 naming the
// path it does take, so a sender pointed at the wrong URL says why; the
// right path still reaches the handler. A listener on "/" takes all.
func TestListenerWrongPathNamesItsPath(t *testing.T) {
	v, err := NewVerifier(ProfileStandard, []string{testSecret}, 5*time.Minute, Generic{})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(Options{Name: "hooks", Prefix: tu.UniqueName("whtest:") + ":hooks:", Profile: ProfileStandard, Verifier: v,
		Store: newStore(t, tu.RedisAddr()), Lease: 3 * time.Second, TTL: time.Hour, Sink: nil, Forwarder: nil,
		MaxBodyBytes: 1 << 10, MaxConcurrent: 4, Logger: testLogger()})
	addr := runListener(t, ListenerOptions{Path: "/hooks/stripe"}, h)
	post := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/", "/hooks", "/hooks/strip", "/webhook", "/hooks/stripe/x"} {
		code, body := post(p)
		if code != http.StatusNotFound || !strings.Contains(body, "POST /hooks/stripe") || !strings.Contains(body, p) {
			t.Errorf("POST %s: %d %q, want 404 naming %s and POST /hooks/stripe", p, code, body, p)
		}
	}
	// The right path reaches the handler: unsigned, it is refused there.
	if code, body := post("/hooks/stripe"); code != http.StatusUnauthorized {
		t.Errorf("POST /hooks/stripe: %d %q, want the handler's 401", code, body)
	}
}
