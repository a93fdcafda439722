package config

import (
	"strings"
	"testing"
	"time"
)

func TestHealthURLMayBeAPath(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"/healthz", true},
		{"http://127.0.0.1:8080/healthz", true},
		{"https://app.local/ready", true},
		{"healthz", false},
		{"http:///nohost", false},
		{"tcp://x", false},
	} {
		c := Default()
		c.Consumer = "c"
		s := DefaultSource()
		s.Name, s.RabbitMQ.Queue = "orders", "orders"
		c.Sources = []Source{s}
		c.App.HealthURL = tc.url
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("health_url %q: err = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}

// A redelivery horizon longer than the TTL is valid but warned about; an
// unknown one (0) is not.
func TestWarningsTTLShorterThanRedeliveryHorizon(t *testing.T) {
	c := Default()
	c.Consumer = "c"
	c.SeenSet.TTL = 24 * time.Hour
	a, b, u := DefaultSource(), DefaultSource(), DefaultSource()
	a.Name, a.MaxRedeliveryDelay = "short", time.Hour
	b.Name, b.MaxRedeliveryDelay = "long", 7*24*time.Hour
	u.Name = "unknown"
	c.Sources = []Source{a, b, u}
	ws := c.Warnings()
	if len(ws) != 1 {
		t.Fatalf("warnings = %v, want one", ws)
	}
	if ws[0].Path != "sources[1].max_redelivery_delay" || !strings.Contains(ws[0].Msg, "168h0m0s") || !strings.Contains(ws[0].Msg, "24h0m0s") {
		t.Fatalf("warning = %q", ws[0])
	}
}
