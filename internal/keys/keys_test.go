package keys

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

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
		{"DEL is a control character", nil, broker.Message{Body: []byte("{\"meta\":{\"id\":\"a\x7fb\"}}")}, "", "control characters"},
		{"C1 control character", nil, broker.Message{Body: []byte(`{"meta":{"id":"a\u0085b"}}`)}, "", "control characters"},
		{"long ASCII key at the limit", nil, broker.Message{Body: []byte(`{"meta":{"id":"` + strings.Repeat("k", MaxKeyBytes) + `"}}`)}, strings.Repeat("k", MaxKeyBytes), ""},
		{"escaped quote and backslash in a name and a value", nil, broker.Message{Body: []byte(`{"n\"\\":"v\\\"x","meta":{"id":"q\"k"}}`)}, `q"k`, ""},
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
		// encoding/json decodes every lone surrogate escape to U+FFFD:
		// these three ids would be one key if decoding were trusted.
		{"lone high surrogate", nil, broker.Message{Body: []byte(`{"meta":{"id":"order-\ud800"}}`)}, "", "unpaired surrogate escape"},
		{"lone high surrogate dbff", nil, broker.Message{Body: []byte(`{"meta":{"id":"order-\udbff"}}`)}, "", "unpaired surrogate escape"},
		{"escaped U+FFFD is an id", nil, broker.Message{Body: []byte(`{"meta":{"id":"order-\ufffd"}}`)}, "order-\ufffd", ""},
		{"literal U+FFFD is the same id", nil, broker.Message{Body: []byte("{\"meta\":{\"id\":\"order-\ufffd\"}}")}, "order-\ufffd", ""},
		{"lone low surrogate", nil, broker.Message{Body: []byte(`{"meta":{"id":"order-\udc00"}}`)}, "", "unpaired surrogate escape"},
		{"upper-case lone surrogate", nil, broker.Message{Body: []byte(`{"meta":{"id":"order-\uD800"}}`)}, "", "unpaired surrogate escape"},
		{"high then literal", nil, broker.Message{Body: []byte(`{"meta":{"id":"\ud800x"}}`)}, "", "unpaired surrogate escape"},
		{"high then other escape", nil, broker.Message{Body: []byte(`{"meta":{"id":"\ud800\u0041"}}`)}, "", "unpaired surrogate escape"},
		{"high then short escape", nil, broker.Message{Body: []byte(`{"meta":{"id":"\ud800\n"}}`)}, "", "unpaired surrogate escape"},
		{"high then high then pair", nil, broker.Message{Body: []byte(`{"meta":{"id":"\udbff\ud83d\ude00"}}`)}, "", "unpaired surrogate escape"},
		{"pair reversed", nil, broker.Message{Body: []byte(`{"meta":{"id":"\ude00\ud83d"}}`)}, "", "unpaired surrogate escape"},
		{"pair then lone low", nil, broker.Message{Body: []byte(`{"meta":{"id":"\ud83d\ude00\ude00"}}`)}, "", "unpaired surrogate escape"},
		{"paired surrogates are the character", nil, broker.Message{Body: []byte(`{"meta":{"id":"order-\ud83d\ude00"}}`)}, "order-\U0001F600", ""},
		{"literal astral character", nil, broker.Message{Body: []byte("{\"meta\":{\"id\":\"order-\U0001F600\"}}")}, "order-\U0001F600", ""},
		{"upper-case pair", nil, broker.Message{Body: []byte(`{"meta":{"id":"\uD83D\uDE00"}}`)}, "\U0001F600", ""},
		{"escaped backslash then u", nil, broker.Message{Body: []byte(`{"meta":{"id":"order-\\ud800"}}`)}, `order-\ud800`, ""},
		{"template field with lone surrogate", []string{"template:inv:{{.month}}:{{.c}}"}, broker.Message{Body: []byte(`{"month":"x","c":"\ud800"}`)}, "", "unpaired surrogate escape"},
		{"template field with pair", []string{"template:inv:{{.month}}:{{.c}}"}, broker.Message{Body: []byte(`{"month":"x","c":"\ud83d\ude00"}`)}, "inv:x:\U0001F600", ""},
		{"lone surrogate falls through", []string{"json:meta.id", "property:message_id"}, broker.Message{Body: []byte(`{"meta":{"id":"\ud800"}}`), MessageID: "m-1"}, "m-1", ""},
		// A field name is an identity too: "k\ud800" is not "k\ufffd".
		{"field name with lone surrogate", []string{"json:k\ufffd"}, broker.Message{Body: []byte(`{"k\ud800":"v"}`)}, "", "absent"},
		{"field name with escaped U+FFFD", []string{"json:k\ufffd"}, broker.Message{Body: []byte(`{"k\ufffd":"v"}`)}, "v", ""},
		{"field name with pair", []string{"json:k\U0001F600"}, broker.Message{Body: []byte(`{"k\ud83d\ude00":"v"}`)}, "v", ""},
		{"header same value in two spellings", []string{"header:bq-message-id"}, broker.Message{Headers: map[string]string{"bq-message-id": "h1", "BQ-Message-Id": "h1"}}, "h1", ""},
		{"header different values in two spellings", []string{"header:bq-message-id"}, broker.Message{Headers: map[string]string{"bq-message-id": "h1", "BQ-Message-Id": "h2"}}, "", "ambiguous header"},
		{"ambiguous header falls through", []string{"header:bq-message-id", "property:message_id"}, broker.Message{Headers: map[string]string{"bq-message-id": "h1", "BQ-Message-Id": "h2"}, MessageID: "m-1"}, "m-1", ""},
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

// The review's three ids: before, all were the key "order-\ufffd".
func TestIDsThatDecodeAlikeStayDistinct(t *testing.T) {
	e, _ := Parse(nil)
	type outcome struct{ key, why string }
	got := map[outcome][]string{}
	for _, id := range []string{`order-\ud800`, `order-\udbff`, `order-\ufffd`, `order-\udc00`, `order-\ud800\udc00`} {
		key, why := e.Key(&broker.Message{Body: []byte(`{"meta":{"id":"` + id + `"}}`)})
		if key != "" {
			got[outcome{key, why}] = append(got[outcome{key, why}], id)
		}
	}
	for o, ids := range got {
		if len(ids) > 1 {
			t.Errorf("ids %q share the key %q", ids, o.key)
		}
	}
	if len(got) != 2 {
		t.Errorf("usable keys %v; want one for \\ufffd and one for the pair", got)
	}
}

// Map iteration order is random, so an order-dependent pick shows up as
// two different answers over many runs and many ways of building the map.
func TestHeaderChoiceIsDeterministic(t *testing.T) {
	cases := []struct {
		name    string
		headers [][2]string
		key     string
		why     string
	}{
		{"conflicting spellings", [][2]string{{"bq-message-id", "a"}, {"BQ-Message-Id", "b"}}, "", "ambiguous header"},
		{"three spellings, one differs", [][2]string{{"bq-message-id", "a"}, {"BQ-MESSAGE-ID", "a"}, {"Bq-Message-Id", "c"}}, "", "ambiguous header"},
		{"same value in every spelling", [][2]string{{"bq-message-id", "a"}, {"BQ-Message-Id", "a"}, {"BQ-MESSAGE-ID", "a"}}, "a", ""},
		{"one spelling among others", [][2]string{{"x-a", "1"}, {"BQ-Message-Id", "a"}, {"x-b", "2"}}, "a", ""},
		{"empty and non-empty spellings", [][2]string{{"bq-message-id", ""}, {"BQ-Message-Id", "a"}}, "", "ambiguous header"},
	}
	e, err := Parse([]string{"header:bq-message-id"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seen := map[[2]string]int{}
			for i := range 500 {
				// Insert in a rotating order, with filler so the
				// map's layout differs too.
				h := make(map[string]string)
				for j := range i % 7 {
					h[fmt.Sprintf("filler-%d", j)] = "f"
				}
				for j := range c.headers {
					kv := c.headers[(i+j)%len(c.headers)]
					h[kv[0]] = kv[1]
				}
				key, why := e.Key(&broker.Message{Headers: h})
				seen[[2]string{key, why}]++
			}
			if len(seen) != 1 {
				t.Fatalf("order-dependent: (key, why) counts over 500 runs %v", seen)
			}
			if seen[[2]string{c.key, c.why}] != 500 {
				t.Fatalf("Key = %v; want %q, %q", seen, c.key, c.why)
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
func referenceScalar(t *testing.T, body []byte, path []string) (string, string) {
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
			return referenceValue(t, raw)
		}
		obj = nil
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return "", "absent"
		}
	}
	return "", "absent"
}

// referenceValue decodes a value with encoding/json, which turns invalid
// UTF-8 and lone surrogate escapes into U+FFFD, and refuses such strings
// by its own reading: the id spelled as UTF-16 code units (the unit of a
// \uXXXX escape) must be well-formed UTF-16.
func referenceValue(t *testing.T, raw json.RawMessage) (string, string) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("reference: decoding %q: %v", raw, err)
	}
	switch v := v.(type) {
	case nil:
		return "", "absent"
	case json.Number:
		return string(v), ""
	case string:
		if !utf8.Valid(raw) {
			return "", "invalid utf-8"
		}
		units := utf16Units(t, raw)
		if !slices.Equal(utf16.Encode(utf16.Decode(units)), units) {
			return "", "unpaired surrogate escape"
		}
		if string(utf16.Decode(units)) != v {
			t.Fatalf("reference: %q spells %q but encoding/json decodes %q", raw, string(utf16.Decode(units)), v)
		}
		return v, ""
	}
	return "", "not a string or number"
}

// utf16Units spells a valid JSON string literal as UTF-16 code units.
func utf16Units(t *testing.T, raw []byte) []uint16 {
	s := string(bytes.TrimSpace(raw))
	s = s[1 : len(s)-1]
	var units []uint16
	for s != "" {
		if s[0] != '\\' {
			r, n := utf8.DecodeRuneInString(s)
			units = utf16.AppendRune(units, r)
			s = s[n:]
			continue
		}
		if s[1] == 'u' {
			u, err := strconv.ParseUint(s[2:6], 16, 16)
			if err != nil {
				t.Fatalf("reference: escape in %q: %v", raw, err)
			}
			units = append(units, uint16(u))
			s = s[6:]
			continue
		}
		c, ok := map[byte]uint16{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[s[1]]
		if !ok {
			t.Fatalf("reference: escape in %q", raw)
		}
		units = append(units, c)
		s = s[2:]
	}
	return units
}

func FuzzScalarMatchesDecoding(f *testing.F) {
	for _, s := range []string{
		`{"meta":{"id":"a"}}`, `{"meta":{"id":1.5e3}}`, `{"meta":{"id":"a\"b\u00e9"}}`, `{"m\u0065ta":{"id":"x"}}`,
		`{"meta":{"id":"a"},"meta":{"id":"b"}}`, `{"meta":null}`, `null`, `[1]`, `{"meta":[{"id":1}]}`,
		` { "meta" : { "x" : [ "}" , {"id":2} ] , "id" : "y" } } `, `{"meta":{"id":true}}`, `{"meta":"s"}`, `{}`,
		"{\"meta\":{\"id\":\"\xff\"}}", `{"a":{"b":{"c":"deep"}}}`, `{"meta":{"id":""}}`, `"str"`, `{"meta":{"id":-0.0}}`,
		`{"meta":{"id":"o-\ud800"}}`, `{"meta":{"id":"o-\udbff"}}`, `{"meta":{"id":"o-\ufffd"}}`, `{"meta":{"id":"\udc00\ud800"}}`,
		`{"meta":{"id":"\ud83d\ude00"}}`, `{"meta":{"id":"\uD83D\uDE00\uDE00"}}`, `{"meta":{"id":"\ud800\\ude00"}}`, `{"meta":{"id":"\\ud800"}}`,
		`{"meta":{"id":"\ud800\u0041"}}`, "{\"meta\":{\"id\":\"\\ud800\xff\"}}", `{"m\ud800":{"id":"x"}}`,
	} {
		f.Add([]byte(s))
	}
	paths := [][]string{{"meta", "id"}, {"a", "b", "c"}, {"meta"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range paths {
			d := parseDoc(body)
			v, why := d.scalar(p)
			rv, rwhy := referenceScalar(t, body, p)
			if v != rv || why != rwhy {
				t.Fatalf("body %q path %v: scanner (%q, %q), decoding (%q, %q)", body, p, v, why, rv, rwhy)
			}
		}
	})
}

// A rule that reads the body records whether it is JSON, so the app's
// Content-Type needs no second pass; one that does not leaves it unchecked.
func TestKeyRecordsWhetherTheBodyIsJSON(t *testing.T) {
	byJSON, err := Parse([]string{"json:meta.id"})
	if err != nil {
		t.Fatal(err)
	}
	byHeader, err := Parse([]string{"header:bq-message-id"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ex   *Extractor
		body string
		want broker.JSONCheck
	}{
		{byJSON, `{"meta":{"id":"a"}}`, broker.JSONValid},
		{byJSON, `[1,2]`, broker.JSONValid},
		{byJSON, `{"meta":`, broker.JSONInvalid},
		{byHeader, `{"meta":{"id":"a"}}`, broker.JSONUnchecked},
	} {
		m := &broker.Message{Body: []byte(tc.body), Headers: map[string]string{"bq-message-id": "h"}}
		tc.ex.Key(m)
		if m.BodyJSON != tc.want {
			t.Errorf("%v on %s: BodyJSON %d, want %d", tc.ex.Specs(), tc.body, m.BodyJSON, tc.want)
		}
	}
}

func TestLowerEquals(t *testing.T) {
	for _, tc := range []struct{ s, lower string }{
		{"bq-message-id", "bq-message-id"},
		{"BQ-Message-Id", "bq-message-id"},
		{"BQ-Message-Ie", "bq-message-id"},
		{"BQ-Message-I", "bq-message-id"},
		{"", ""},
		{"x", ""},
		{"X-\u212Aey", "x-key"}, // the Kelvin sign lowers to an ASCII k
		{"X-ÄB", "x-äb"},
		{"x-@[`{", "x-@[`{"},
		{"X-@[`{", "x-@{`{"},
	} {
		if got, want := lowerEquals(tc.s, tc.lower), strings.ToLower(tc.s) == tc.lower; got != want {
			t.Errorf("lowerEquals(%q, %q) = %v, want %v", tc.s, tc.lower, got, want)
		}
	}
}
