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
		c := minimalConfig()
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

// record_key names an entity, not a message; a shutdown_timeout no longer
// than app.timeout cuts requests off on every deploy. Both are valid and
// warned about, each under its field.
func TestWarningsRecordKeyAndShutdownTimeout(t *testing.T) {
	c := Default()
	c.Consumer = "c"
	s := DefaultSource()
	s.Name, s.Type, s.Kafka.Topics, s.Kafka.Group = "events", "kafka", []string{"t"}, "g"
	s.Kafka.Brokers = []string{"127.0.0.1:9092"}
	s.Key = []string{"header:bq-message-id", "record_key"}
	c.Sources = []Source{s}
	c.ShutdownTimeout, c.App.Timeout = 10*time.Second, 10*time.Second
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ws := c.Warnings()
	got := map[string]string{}
	for _, w := range ws {
		got[w.Path] = w.Msg
	}
	if len(ws) != 2 || !strings.Contains(got["sources[0].key[1]"], "entity") || !strings.Contains(got["shutdown_timeout"], "app.timeout") {
		t.Fatalf("warnings = %v", ws)
	}
	c.ShutdownTimeout = 11 * time.Second
	c.Sources[0].Key = []string{"json:meta.id"}
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("warnings = %v, want none", ws)
	}
}

// key_space is a name, never one with ':' (it would let one source's
// "<space>:<key>" equal another's key).
func TestKeySpaceIsAName(t *testing.T) {
	c := minimalConfig()
	for _, tc := range []struct {
		space string
		ok    bool
	}{{"", true}, {"money", true}, {"a.b-c_d", true}, {"a:b", false}, {"-x", false}, {"a b", false}} {
		c.Sources[0].KeySpace = tc.space
		err := c.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "sources[0].key_space")) {
			t.Errorf("key_space %q: err = %v, want ok=%v", tc.space, err, tc.ok)
		}
	}
	c.Sources[0].KeySpace = ""
	o := c.Sources[0]
	o.Name, o.KeySpace = "returns", "orders"
	c.Sources = append(c.Sources, o)
	if got := c.KeySpaces(); len(got) != 1 || got[0] != "orders" {
		t.Fatalf("KeySpaces = %v, want [orders]", got)
	}
}

// A TTL below the lease is valid but warned about under seenset.ttl: a
// done mark lives shorter than a claim, so a duplicate that waited out the
// claim can arrive after the done mark is gone. Equal or above: no word.
func TestWarningsTTLBelowLease(t *testing.T) {
	c := minimalConfig()
	c.SeenSet.Lease, c.SeenSet.TTL = 30*time.Second, 10*time.Second
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ws := c.Warnings()
	if len(ws) != 1 || ws[0].Path != "seenset.ttl" || !strings.Contains(ws[0].Msg, "10s") || !strings.Contains(ws[0].Msg, "30s") {
		t.Fatalf("warnings = %v, want one under seenset.ttl naming 10s and 30s", ws)
	}
	c.SeenSet.TTL = 30 * time.Second
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("ttl = lease: warnings = %v, want none", ws)
	}
}

// content_type is a parseable media type; the error names the field. It
// can be set from the environment like every other field.
func TestContentTypeIsAMediaType(t *testing.T) {
	c := minimalConfig()
	for _, tc := range []struct {
		ct string
		ok bool
	}{{"", true}, {"application/json", true}, {"application/vnd.acme+json; charset=utf-8", true},
		{"json", false}, {"application/json; charset", false}, {"text/plain\n", false}} {
		c.Sources[0].ContentType = tc.ct
		err := c.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "sources[0].content_type: must be a media type")) {
			t.Errorf("content_type %q: err = %v, want ok=%v", tc.ct, err, tc.ok)
		}
	}
}

// minimalConfig is a valid config of one rabbitmq source, "orders", with
// every other setting at its default: what a test changes one field of.
func minimalConfig() Config {
	c := Default()
	c.Consumer = "c"
	s := DefaultSource()
	s.Name, s.RabbitMQ.Queue = "orders", "orders"
	c.Sources = []Source{s}
	return c
}
