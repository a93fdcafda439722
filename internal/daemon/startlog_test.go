package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/buildinfo"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The start line names every listener: the admin address as bound, and
// each webhook source's listen address and path. /metrics has the
// build_info gauge.
func TestStartLogNamesEveryListenerAndBuildInfo(t *testing.T) {
	ports := []int{testutil.FreePort(t), testutil.FreePort(t)}
	h := newHarness(t, func(c *config.Config) {
		c.Admin.Listen = "127.0.0.1:0"
		for i, name := range []string{"hooks", "shop"} {
			wh := webhookSource(t)
			wh.Name = name
			wh.Webhook.Listen = fmt.Sprintf("127.0.0.1:%d", ports[i])
			wh.Webhook.Path = "/" + name
			wh.Webhook.Target.RabbitMQ.RoutingKey = c.Sources[0].RabbitMQ.Queue
			c.Sources = append(c.Sources, wh)
		}
	})
	var buf testutil.LogBuffer
	h.logger = newLogger(config.Log{Level: "info", Format: "json"}, &buf)
	p := h.start()

	var start map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "dedupe-proxy starting" {
			start = l
		}
	}
	if start == nil {
		t.Fatalf("no start line in:\n%s", buf.String())
	}
	if admin := p.d.AdminAddr(); admin == "" || start["admin"] != admin {
		t.Errorf("start line admin = %v, want the bound %q", start["admin"], admin)
	}
	want := map[string]any{
		"hooks": map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", ports[0]), "path": "/hooks"},
		"shop":  map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", ports[1]), "path": "/shop"},
	}
	if got, _ := json.Marshal(start["webhooks"]); string(got) != mustJSON(t, want) {
		t.Errorf("start line webhooks = %s, want %s", got, mustJSON(t, want))
	}

	resp, err := http.Get("http://" + p.d.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	b := buildinfo.Get(Version)
	line := fmt.Sprintf("dedupe_proxy_build_info{goversion=%q,revision=%q,version=%q} 1\n", runtime.Version(), b.Revision, b.Version)
	if !strings.Contains(string(body), line) {
		t.Errorf("/metrics lacks %q", line)
	}
}

// Without webhooks or admin listener the start line says so.
func TestStartLogWithoutListeners(t *testing.T) {
	h := newHarness(t, nil)
	var buf testutil.LogBuffer
	h.logger = newLogger(config.Log{Level: "info", Format: "text"}, &buf)
	h.start()
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `msg="dedupe-proxy starting"`) {
			line = l
		}
	}
	if !strings.Contains(line, " admin=off") || strings.Contains(line, "webhooks") {
		t.Errorf("start line %q: want admin=off and no webhooks", line)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
