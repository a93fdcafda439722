package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func webhookConfig() Config {
	c := Default()
	c.Consumer = "c"
	s := DefaultSource()
	s.Name, s.Type = "hooks", "webhook"
	s.Webhook.Secrets = []string{"env:HOOK_SECRET"}
	s.Webhook.Target.RabbitMQ.RoutingKey = "hooks"
	c.SeenSet.TTL = 96 * time.Hour
	c.Sources = []Source{s}
	return c
}

// One webhook field changed at a time names exactly that field.
func TestWebhookValidateOneFieldAtATime(t *testing.T) {
	base := webhookConfig()
	if err := base.Validate(); err != nil {
		t.Fatalf("base config invalid: %v", err)
	}
	cases := []struct {
		path   string
		mutate func(*Webhook)
	}{
		{"sources[0].webhook.listen", func(w *Webhook) { w.Listen = "8088" }},
		{"sources[0].webhook.path", func(w *Webhook) { w.Path = "hooks" }},
		{"sources[0].webhook.profile", func(w *Webhook) { w.Profile = "paypal" }},
		{"sources[0].webhook.profile", func(w *Webhook) { w.Profile, w.Listen = "none", "10.0.0.1:8088" }},
		{"sources[0].webhook.profile", func(w *Webhook) { w.Profile, w.Listen, w.AllowUnsignedOn = "none", ":8088", "0.0.0.0:8088" }},
		{"sources[0].webhook.secrets", func(w *Webhook) { w.Secrets = nil }},
		{"sources[0].webhook.secrets[0]", func(w *Webhook) { w.Secrets = []string{"whsec_abc"} }},
		{"sources[0].webhook.secrets[0]", func(w *Webhook) { w.Secrets = []string{"env:"} }},
		{"sources[0].webhook.tolerance", func(w *Webhook) { w.Tolerance = 0 }},
		{"sources[0].webhook.key_from", func(w *Webhook) { w.KeyFrom = "body" }},
		{"sources[0].webhook.mode", func(w *Webhook) { w.Mode = "store" }},
		{"sources[0].webhook.max_body_bytes", func(w *Webhook) { w.MaxBodyBytes = 0 }},
		{"sources[0].webhook.max_concurrent", func(w *Webhook) { w.MaxConcurrent = 0 }},
		{"sources[0].webhook.max_unverified", func(w *Webhook) { w.MaxUnverified = 0 }},
		{"sources[0].webhook.read_timeout", func(w *Webhook) { w.ReadTimeout = 0 }},
		{"sources[0].webhook.target.broker", func(w *Webhook) { w.Target.Broker = "sqs" }},
		{"sources[0].webhook.target.rabbitmq", func(w *Webhook) { w.Target.RabbitMQ.RoutingKey = "" }},
		{"sources[0].webhook.target.rabbitmq.url", func(w *Webhook) { w.Target.RabbitMQ.URL = "http://x" }},
		{"sources[0].webhook.target.kafka.topic", func(w *Webhook) { w.Target.Broker = "kafka" }},
		{"sources[0].webhook.target.kafka.brokers[0]", func(w *Webhook) {
			w.Target.Broker, w.Target.Kafka.Topic, w.Target.Kafka.Brokers = "kafka", "t", []string{"kafka"}
		}},
		{"sources[0].webhook.generic.header", func(w *Webhook) { w.Profile = "generic-hmac" }},
		{"sources[0].webhook.generic.algorithm", func(w *Webhook) { w.Profile, w.Generic.Header, w.Generic.Algorithm = "generic-hmac", "X-Sig", "md5" }},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			c := webhookConfig()
			tc.mutate(&c.Sources[0].Webhook)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], tc.path+": ") {
				t.Fatalf("error %q, want one line starting with %q", err, tc.path+": ")
			}
		})
	}
	// none on loopback, or acknowledged on exactly its listener, is valid.
	for _, w := range []Webhook{{Listen: "127.0.0.1:8088"}, {Listen: "[::1]:8088"}, {Listen: "localhost:8088"}, {Listen: "0.0.0.0:8088", AllowUnsignedOn: "0.0.0.0:8088"}} {
		c := webhookConfig()
		c.Sources[0].Webhook.Profile, c.Sources[0].Webhook.Secrets = "none", nil
		c.Sources[0].Webhook.Listen, c.Sources[0].Webhook.AllowUnsignedOn = w.Listen, w.AllowUnsignedOn
		if err := c.Validate(); err != nil {
			t.Errorf("none on %s (ack %q): %v", w.Listen, w.AllowUnsignedOn, err)
		}
	}
}

// Secrets come from the environment Load is given or from files; the
// variables they name are settings, not unknown DEDUPE_PROXY_* names.
func TestWebhookSecretsFromEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "github")
	if err := os.WriteFile(secretFile, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "c.yaml")
	yaml := "consumer: hooks\nseenset: {ttl: 96h}\nsources:\n  - name: gh\n    type: webhook\n    webhook:\n      profile: github\n" +
		"      secrets: [\"env:DEDUPE_PROXY_GH_SECRET\", \"file:" + secretFile + "\"]\n      target: {rabbitmq: {routing_key: gh}}\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"DEDUPE_PROXY_GH_SECRET=from-env"}
	cfg, err := Load(cfgFile, env)
	if err != nil {
		t.Fatal(err)
	}
	got, errs := cfg.Sources[0].Webhook.ResolveSecrets(func(n string) (string, bool) {
		return strings.CutPrefix(env[0], n+"=")
	})
	if len(errs) != 0 || !reflect.DeepEqual(got, []string{"from-env", "from-a-file"}) {
		t.Fatalf("secrets %q, errors %v", got, errs)
	}
	if _, err := Load(cfgFile, []string{}); err == nil || !strings.Contains(err.Error(), "sources[0].webhook.secrets[0]: environment variable DEDUPE_PROXY_GH_SECRET is not set") {
		t.Fatalf("missing env secret: %v", err)
	}
	os.Remove(secretFile)
	if _, err := Load(cfgFile, env); err == nil || !strings.Contains(err.Error(), "sources[0].webhook.secrets[1]: ") {
		t.Fatalf("missing file secret: %v", err)
	}
}

// A TTL shorter than the profile's retry horizon is warned about under
// the profile; long enough, or a profile without one, is not.
func TestWebhookWarningsTTLShorterThanRetryHorizon(t *testing.T) {
	c := webhookConfig()
	c.SeenSet.TTL = 24 * time.Hour
	for profile, want := range map[string]string{"standard-webhooks": "76h", "stripe": "72h", "github": "72h", "shopify": "", "slack": "", "generic-hmac": ""} {
		c.Sources[0].Webhook.Profile = profile
		ws := c.Warnings()
		if want == "" {
			if len(ws) != 0 {
				t.Errorf("%s: warnings %v, want none", profile, ws)
			}
			continue
		}
		if len(ws) != 1 || ws[0].Path != "sources[0].webhook.profile" || !strings.Contains(ws[0].Msg, want) {
			t.Errorf("%s: warnings %v, want one naming %s", profile, ws, want)
		}
	}
	c.Sources[0].Webhook.Profile = "shopify"
	c.SeenSet.TTL = 3 * time.Hour
	if ws := c.Warnings(); len(ws) != 1 || !strings.Contains(ws[0].Msg, "4h") {
		t.Errorf("shopify with a 3h TTL: %v", ws)
	}
}

// A webhook source and a broker source never share keys (a webhook's live
// under webhook/<key space>), so a key_space that names both would ask for
// what cannot be: validate says so under the key_space that was set.
// Two webhook sources, or two broker sources, may share one.
func TestWebhookKeySpaceNeverABrokerSources(t *testing.T) {
	broker := DefaultSource()
	broker.Name, broker.RabbitMQ.Queue = "orders", "orders"
	for _, tc := range []struct {
		name          string
		hookSpace     string
		brokerSpace   string
		path          string
		secondWebhook bool
	}{
		{"webhook names the broker source", "orders", "", "sources[0].key_space", false},
		{"broker source names the webhook", "", "hooks", "sources[1].key_space", false},
		{"both name one space", "money", "money", "sources[1].key_space", false},
		{"two webhooks share", "money", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := webhookConfig()
			c.Sources[0].KeySpace = tc.hookSpace
			b := broker
			b.KeySpace = tc.brokerSpace
			c.Sources = append(c.Sources, b)
			if tc.secondWebhook {
				w := c.Sources[0]
				w.Name, w.Webhook.Listen = "hooks2", "127.0.0.1:8089"
				c.Sources = append(c.Sources, w)
			}
			err := c.Validate()
			if tc.path == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if got := c.KeySpaces(); len(got) != 2 || got[0] != "webhook/money" || got[1] != "orders" {
					t.Fatalf("KeySpaces = %v, want [webhook/money orders]", got)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], tc.path+": ") || !strings.Contains(lines[0], "duplicate") {
				t.Fatalf("error %q, want one line at %s explaining the duplicates", err, tc.path)
			}
		})
	}
}

// A webhook key taken from a header the signature does not cover gives no
// replay protection (a replay with a new value there is a new event):
// warned about under that rule. Body rules and signed headers are not.
func TestWebhookWarningsUnsignedHeaderKey(t *testing.T) {
	for _, tc := range []struct {
		profile, keyFrom, tsHeader string
		key                        []string
		warn                       string // the path, "" for none
	}{
		{"generic-hmac", "profile", "", []string{"header:x-partner-event-id"}, "sources[0].key[0]"},
		{"generic-hmac", "profile", "X-Ts", []string{"json:id", "header:X-Partner-Id"}, "sources[0].key[1]"},
		{"generic-hmac", "profile", "X-Ts", []string{"header:x-ts"}, ""},
		{"generic-hmac", "profile", "", []string{"json:id"}, ""},
		{"github", "rules", "", []string{"header:X-GitHub-Delivery"}, "sources[0].key[0]"},
		{"github", "profile", "", []string{"header:X-GitHub-Delivery"}, ""}, // the body digest is the key
		{"standard-webhooks", "rules", "", []string{"header:svix-id", "header:webhook-id"}, ""},
		{"none", "profile", "", []string{"header:x-id"}, ""}, // nothing is verified anyway
	} {
		c := webhookConfig()
		w := &c.Sources[0].Webhook
		w.Profile, w.KeyFrom, w.Generic.Header, w.Generic.TimestampHeader = tc.profile, tc.keyFrom, "X-Sig", tc.tsHeader
		if tc.profile == "none" {
			w.Secrets = nil
		}
		c.Sources[0].Key = tc.key
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		var got []Warning
		for _, w := range c.Warnings() {
			if strings.Contains(w.Msg, "signature does not cover") {
				got = append(got, w)
			}
		}
		switch {
		case tc.warn == "" && len(got) != 0:
			t.Errorf("%s %v: warnings %v, want none", tc.profile, tc.key, got)
		case tc.warn != "" && (len(got) != 1 || got[0].Path != tc.warn || !strings.Contains(got[0].Msg, "replay")):
			t.Errorf("%s %v: warnings %v, want one under %s about replays", tc.profile, tc.key, got, tc.warn)
		}
	}
}
