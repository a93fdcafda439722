package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	tu "github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// logCapture is a JSON slog handler's output, read back as records.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (c *logCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// with returns the records whose msg starts with prefix at level ("" any).
func (c *logCapture) with(t *testing.T, level, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(c.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.HasPrefix(r["msg"].(string), prefix) && (level == "" || r["level"] == level) {
			out = append(out, r)
		}
	}
	return out
}

// Redis down for several requests, then back: one line each way naming
// the source, and each request's own line about it is debug.
func TestStoreDownAndUpLoggedOnce(t *testing.T) {
	rs := tu.StartRedis(t)
	rb := tu.NewRabbit(t)
	q := rb.Queue("whtest.", nil)
	var logs logCapture
	r := newRig(t, newStore(t, rs.Addr()), rabbitSink(t, tu.RabbitURL(), q), func(o *Options) { o.Logger = logs.logger() })
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
	if n := len(logs.with(t, "DEBUG", "webhook not stored: seen-set unavailable")); n != 5 {
		t.Fatalf("%d debug lines for the 5 refused requests:\n%s", n, logs.String())
	}
	if n := len(logs.with(t, "WARN", "webhook not stored")); n != 0 {
		t.Errorf("%d per-request warnings while Redis was down:\n%s", n, logs.String())
	}
	rs.Restart()
	tu.Eventually(t, 10*time.Second, "the back line", func() bool {
		send(t, signed(t, r.url, fmt.Sprint("msg_after_", time.Now().UnixNano()), body, time.Now()))
		return len(logs.with(t, "", "seen-set reachable again")) > 0
	})
	down := logs.with(t, "", "seen-set unreachable")
	up := logs.with(t, "", "seen-set reachable again")
	if len(down) != 1 || len(up) != 1 || down[0]["level"] != "WARN" || up[0]["level"] != "INFO" {
		t.Fatalf("%d down and %d up lines, want 1 and 1:\n%s", len(down), len(up), logs.String())
	}
	if down[0]["source"] != "hooks" || down[0]["err"] == "" || up[0]["source"] != "hooks" || up[0]["failures"].(float64) < 5 {
		t.Errorf("down %v, up %v", down[0], up[0])
	}
}
