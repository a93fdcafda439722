package keys

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

func TestKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyBytes+1)
	cases := []struct {
		name  string
		rules []string
		msg   broker.Message
		key   string
		why   string
	}{
		{"default meta.id", nil, broker.Message{Body: []byte(`{"meta":{"id":"abc"}}`)}, "abc", ""},
		{"number id keeps its literal", nil, broker.Message{Body: []byte(`{"meta":{"id":12345678901234567890}}`)}, "12345678901234567890", ""},
		{"absent", nil, broker.Message{Body: []byte(`{"meta":{}}`)}, "", "absent"},
		{"empty", nil, broker.Message{Body: []byte(`{"meta":{"id":""}}`)}, "", "empty"},
		{"null", nil, broker.Message{Body: []byte(`{"meta":{"id":null}}`)}, "", "absent"},
		{"object id", nil, broker.Message{Body: []byte(`{"meta":{"id":{"a":1}}}`)}, "", "not a string or number"},
		{"bool id", nil, broker.Message{Body: []byte(`{"meta":{"id":true}}`)}, "", "not a string or number"},
		{"meta not object", nil, broker.Message{Body: []byte(`{"meta":"x"}`)}, "", "absent"},
		{"not json", nil, broker.Message{Body: []byte(`hello`)}, "", "body is not JSON"},
		{"too long", nil, broker.Message{Body: []byte(`{"meta":{"id":"` + long + `"}}`)}, "", "too long"},
		{"invalid utf-8", nil, broker.Message{Body: []byte("{\"meta\":{\"id\":\"a\xff\"}}")}, "", "invalid utf-8"},
		{"control character", nil, broker.Message{Body: []byte(`{"meta":{"id":"a\nb"}}`)}, "", "control characters"},
		{"escaped unicode ok", nil, broker.Message{Body: []byte(`{"meta":{"id":"caf\u00e9"}}`)}, "café", ""},
		{"fallback to message_id", []string{"json:meta.id", "property:message_id"}, broker.Message{Body: []byte(`x`), MessageID: "m-1"}, "m-1", ""},
		{"first rule wins", []string{"json:meta.id", "property:message_id"}, broker.Message{Body: []byte(`{"meta":{"id":"b"}}`), MessageID: "m-1"}, "b", ""},
		{"header case-insensitive", []string{"header:BQ-Message-ID"}, broker.Message{Headers: map[string]string{"bq-message-id": "h1"}}, "h1", ""},
		{"header absent", []string{"header:x"}, broker.Message{}, "", "absent"},
		{"record key", []string{"record_key"}, broker.Message{RecordKey: []byte("rk")}, "rk", ""},
		{"record key empty", []string{"record_key"}, broker.Message{}, "", "empty"},
		{"template", []string{"template:invoice:{{.month}}:{{.customerId}}"}, broker.Message{Body: []byte(`{"month":"2026-11","customerId":42}`)}, "invoice:2026-11:42", ""},
		{"template nested", []string{"template:{{.meta.id}}/{{.n}}"}, broker.Message{Body: []byte(`{"meta":{"id":"a"},"n":1}`)}, "a/1", ""},
		{"template missing field", []string{"template:{{.month}}:{{.customerId}}"}, broker.Message{Body: []byte(`{"month":"x"}`)}, "", "absent"},
		{"template empty field", []string{"template:{{.month}}:{{.c}}"}, broker.Message{Body: []byte(`{"month":"x","c":""}`)}, "", "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := Parse(c.rules)
			if err != nil {
				t.Fatal(err)
			}
			key, why := e.Key(&c.msg)
			if key != c.key || why != c.why {
				t.Fatalf("Key = %q, %q; want %q, %q", key, why, c.key, c.why)
			}
		})
	}
}

func TestParseErrorsNameTheRule(t *testing.T) {
	bad := []string{"json:", "json:a..b", "header:", "property:type", "record_key:x", "template:", "template:plain", "template:{{len .x}}", "template:{{if .a}}x{{end}}", "xml:a", "template:{{.a"}
	for _, s := range bad {
		_, err := Parse([]string{"json:meta.id", s})
		if err == nil {
			t.Errorf("Parse(%q) accepted", s)
			continue
		}
		if !strings.Contains(err.Error(), "[1]") || !strings.Contains(err.Error(), s) {
			t.Errorf("Parse(%q) error %q does not name the rule", s, err)
		}
	}
}

// BabelQueue's conformance data: the canonical key of order-created.json.
func TestBabelQueueDedupKey(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "conformance", "babelqueue")
	body, err := os.ReadFile(filepath.Join(dir, "fixtures", "order-created.json"))
	if err != nil {
		t.Skipf("BabelQueue conformance data not found at %s: %v", dir, err)
	}
	e, _ := Parse(nil)
	key, why := e.Key(&broker.Message{Body: body})
	if key != "f1e2d3c4-b5a6-4789-90ab-cdef01234567" {
		t.Fatalf("key = %q (%s)", key, why)
	}
}

func BenchmarkKeyMetaID(b *testing.B) {
	e, _ := Parse(nil)
	m := &broker.Message{Body: []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a","data":{"order_id":1042,"lines":[1,2,3]},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","schema_version":1,"lang":"go"},"attempts":0}`)}
	b.ReportAllocs()
	for b.Loop() {
		e.Key(m)
	}
}

// referenceScalar is the straightforward implementation the scanner
// replaced: decode into maps, walk the path. The fuzz test holds the
// scanner to it.
func referenceScalar(body []byte, path []string) (string, string) {
	var root map[string]json.RawMessage
	if err := json.Unmarshal(body, &root); err != nil {
		return "", "body is not JSON"
	}
	obj := root
	for i, seg := range path {
		raw, ok := obj[seg]
		if !ok {
			return "", "absent"
		}
		if i == len(path)-1 {
			return scalarValue(raw)
		}
		obj = nil
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return "", "absent"
		}
	}
	return "", "absent"
}

func FuzzScalarMatchesDecoding(f *testing.F) {
	for _, s := range []string{
		`{"meta":{"id":"a"}}`, `{"meta":{"id":1.5e3}}`, `{"meta":{"id":"a\"b\u00e9"}}`, `{"m\u0065ta":{"id":"x"}}`,
		`{"meta":{"id":"a"},"meta":{"id":"b"}}`, `{"meta":null}`, `null`, `[1]`, `{"meta":[{"id":1}]}`,
		` { "meta" : { "x" : [ "}" , {"id":2} ] , "id" : "y" } } `, `{"meta":{"id":true}}`, `{"meta":"s"}`, `{}`,
		"{\"meta\":{\"id\":\"\xff\"}}", `{"a":{"b":{"c":"deep"}}}`, `{"meta":{"id":""}}`, `"str"`, `{"meta":{"id":-0.0}}`,
	} {
		f.Add([]byte(s))
	}
	paths := [][]string{{"meta", "id"}, {"a", "b", "c"}, {"meta"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range paths {
			d := parseDoc(body)
			v, why := d.scalar(p)
			rv, rwhy := referenceScalar(body, p)
			if v != rv || why != rwhy {
				t.Fatalf("body %q path %v: scanner (%q, %q), decoding (%q, %q)", body, p, v, why, rv, rwhy)
			}
		}
	})
}
