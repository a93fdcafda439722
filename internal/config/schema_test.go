package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// compileSchema compiles Schema with a real JSON Schema validator: the
// test proves the schema says what an editor will enforce.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	example, err := os.ReadFile(filepath.Join("..", "..", "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Schema(example)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("config.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// yamlToJSON reads YAML as an editor's schema check does: as JSON.
func yamlToJSON(t *testing.T, text string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestSchemaAcceptsExample(t *testing.T) {
	s := compileSchema(t)
	example, err := os.ReadFile(filepath.Join("..", "..", "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(yamlToJSON(t, string(example))); err != nil {
		t.Errorf("config.example.yaml: %v", err)
	}
	// The blocks the example shows commented out, each as its source.
	lines := uncommentBlocks(strings.Split(string(example), "\n"))
	for _, kind := range []string{"kafka", "redis", "webhook"} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(strings.Join(lines, "\n")), &v); err != nil {
			t.Fatal(err)
		}
		src := v["sources"].([]any)[0].(map[string]any)
		for _, other := range SourceTypes() {
			if other != kind {
				delete(src, other)
			}
		}
		src["type"] = kind
		b, _ := yaml.Marshal(v)
		if err := s.Validate(yamlToJSON(t, string(b))); err != nil {
			t.Errorf("the example's %s block: %v", kind, err)
		}
	}
}

// Every valid config the loader's tests use passes the schema too: the
// schema is never stricter than the loader on a file.
func TestSchemaAcceptsValidTestdata(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("testdata/*.yaml")
	n := 0
	for _, f := range files {
		if _, err := Load(f, []string{}); err != nil {
			continue
		}
		n++
		b, _ := os.ReadFile(f)
		if err := s.Validate(yamlToJSON(t, string(b))); err != nil {
			t.Errorf("%s loads, but the schema refuses it: %v", f, err)
		}
	}
	if n == 0 {
		t.Fatal("no valid testdata file")
	}
}

// What the schema refuses, the loader refuses too.
func TestSchemaRefusesWhatLoadRefuses(t *testing.T) {
	s := compileSchema(t)
	const src = "sources: [{name: a, rabbitmq: {queue: q}}]\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"duration without a unit", "consumer: c\napp: {timeout: 5}\n" + src, "/app/timeout"},
		{"duration not Go's", "consumer: c\nseenset: {ttl: 1d}\n" + src, "/seenset/ttl"},
		{"unknown source type", "consumer: c\nsources: [{name: a, type: rabbit}]\n", "/sources/0/type"},
		{"unknown key", "consumer: c\napp: {ulr: http://x}\n" + src, "ulr"},
		{"unknown top-level key", "consumer: c\nsource: []\n" + src, "source"},
		{"enum", "consumer: c\nlog: {level: verbose}\n" + src, "/log/level"},
		{"list enum", "consumer: c\nsources: [{name: a, type: kafka, kafka: {brokers: [b:1], topics: [t], group: g, balancers: [sticky, coop]}}]\n", "/sources/0/kafka/balancers/1"},
		{"another type's block", "consumer: c\nsources: [{name: a, type: kafka, rabbitmq: {queue: q}}]\n", "rabbitmq"},
		{"another type's block, type left out", "consumer: c\nsources: [{name: a, kafka: {group: g}}]\n", "kafka"},
		{"bool for a struct", "consumer: c\nsources: [{name: a, type: kafka, kafka: {brokers: [b:1], topics: [t], group: g, tls: true}}]\n", "/sources/0/kafka/tls"},
		{"string for an int", "consumer: c\napp: {max_conns: lots}\n" + src, "/app/max_conns"},
		{"bad size", "consumer: c\ndelivery: {max_body_bytes: 1XB}\n" + src, "/delivery/max_body_bytes"},
		{"no sources", "consumer: c\n", "sources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate(yamlToJSON(t, tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("schema: got %v, want an error naming %s", err, tc.want)
			}
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(p, []string{}); err == nil {
				t.Errorf("the schema refuses what Load accepts")
			}
		})
	}
}

func TestSchemaDescriptionsFromExample(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "..", "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Schema(example)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"consumer":                    "Name of this consumer (required).",
		"sources.name":                "Unique name, used in metrics and logs.",
		"sources.kafka.ordering":      "partition (default): each partition's messages reach the app one at a time",
		"sources.redis.claim_idle":    "mode stream: an entry pending this long",
		"sources.webhook.generic":     "profile generic-hmac: header = prefix",
		"sources.key":                 "Key rules, tried in order until one yields a usable key:\n  json:<dot.path>",
		"seenset.redis.wait_timeout":  "How long a write waits for them",
		"sources.kafka.sasl.password": "Keep it out of the file: DEDUPE_PROXY_SOURCES_0_KAFKA_SASL_PASSWORD",
	} {
		node := map[string]any{"properties": map[string]any{}}
		_ = json.Unmarshal(raw, &node)
		var cur any = node
		for _, seg := range strings.Split(path, ".") {
			m := cur.(map[string]any)
			if items, ok := m["items"]; ok {
				m = items.(map[string]any)
			}
			cur = m["properties"].(map[string]any)[seg]
		}
		if cur == nil {
			t.Errorf("%s: not in the schema", path)
			continue
		}
		if got, _ := cur.(map[string]any)["description"].(string); !strings.HasPrefix(got, want) {
			t.Errorf("%s: description %q, want it to start %q", path, got, want)
		}
	}
}

// A comment that describes no setting (a renamed field) fails the
// generation, so the schema cannot silently lose its descriptions.
func TestSchemaRefusesStrayDescription(t *testing.T) {
	_, err := Schema([]byte("# Not a setting.\nconsumr: c\n"))
	if err == nil || !strings.Contains(err.Error(), "consumr") {
		t.Errorf("got %v, want an error naming consumr", err)
	}
}
