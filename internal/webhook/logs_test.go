package webhook

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Redis down for several requests, then back: one line each way naming
// the source, and each request's own line about it is debug.
func TestStoreDownAndUpLoggedOnce(t *testing.T) {
	rs := tu.StartRedis(t)
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	var logs tu.LogBuffer
	r := newRig(t, newStore(t, rs.Addr()), rabbitSink(t, tu.RabbitURL(), q), func(o *Options) { o.Logger = logs.JSONLogger() })
	body := []byte(`{"n":4}`)
	if code, _ := send(t, signed(t, r.url, "msg_up", body, time.Now())); code != http.StatusOK {
		t.Fatalf("before the kill: %d", code)
	}
	rs.Kill()
	for i := range 5 {
		if code, _ := send(t, signed(t, r.url, fmt.Sprint("msg_down_", i), body, time.Now())); code != http.StatusServiceUnavailable {
			t.Fatalf("request %d with Redis down: %d, want 503", i, code)
		}
	}
	if n := len(logs.With(t, "DEBUG", "webhook not stored: seen-set unavailable")); n != 5 {
		t.Fatalf("%d debug lines for the 5 refused requests:\n%s", n, logs.String())
	}
	if n := len(logs.With(t, "WARN", "webhook not stored")); n != 0 {
		t.Errorf("%d per-request warnings while Redis was down:\n%s", n, logs.String())
	}
	rs.Restart()
	tu.Eventually(t, 10*time.Second, "the back line", func() bool {
		send(t, signed(t, r.url, fmt.Sprint("msg_after_", time.Now().UnixNano()), body, time.Now()))
		return len(logs.With(t, "", "seen-set reachable again")) > 0
	})
	down := logs.With(t, "", "seen-set unreachable")
	up := logs.With(t, "", "seen-set reachable again")
	if len(down) != 1 || len(up) != 1 || down[0]["level"] != "WARN" || up[0]["level"] != "INFO" {
		t.Fatalf("%d down and %d up lines, want 1 and 1:\n%s", len(down), len(up), logs.String())
	}
	if down[0]["source"] != "hooks" || down[0]["err"] == "" || up[0]["source"] != "hooks" || up[0]["failures"].(float64) < 5 {
		t.Errorf("down %v, up %v", down[0], up[0])
	}
}
