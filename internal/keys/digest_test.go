package keys_test

import (
	"encoding/json"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

func TestDigestWholeBody(t *testing.T) {
	d, err := keys.ParseDigestFields(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := []byte(`{"meta":{"id":"ord-1"},"payload":{"amount":10}}`)
	if d.Digest(a) != seenset.SumDigest(a) {
		t.Fatal("without fields the digest is not the whole body's")
	}
	if d.Digest(a) == d.Digest([]byte(`{"meta":{"id":"ord-1"},"payload":{"amount":99}}`)) {
		t.Fatal("two bodies share a digest")
	}
}

func TestDigestFields(t *testing.T) {
	d, err := keys.ParseDigestFields([]string{"payload", "meta.tenant"})
	if err != nil {
		t.Fatal(err)
	}
	base := d.Digest([]byte(`{"meta":{"id":"ord-1","created_at":"2024-01-01T00:00:00Z","tenant":"t1"},"payload":{"amount":10}}`))
	for _, tc := range []struct {
		body string
		same bool
	}{
		// A re-published envelope: only meta.created_at changed.
		{`{"meta":{"id":"ord-1","created_at":"2024-01-02T09:30:00Z","tenant":"t1"},"payload":{"amount":10}}`, true},
		{`{"payload": {"amount":10} , "meta":{"tenant":"t1","id":"ord-1"}}`, true},
		{`{"meta":{"id":"ord-1","tenant":"t1"},"payload":{"amount":99}}`, false},
		{`{"meta":{"id":"ord-1","tenant":"t2"},"payload":{"amount":10}}`, false},
		{`{"meta":{"id":"ord-1"},"payload":{"amount":10}}`, false}, // tenant absent
		{`{"meta":{"id":"ord-1","tenant":"t1"},"payload":{"amount": 10}}`, false},
		{`not json`, false},
	} {
		if got := d.Digest([]byte(tc.body)) == base; got != tc.same {
			t.Errorf("%s: same digest %v, want %v", tc.body, got, tc.same)
		}
	}
	// Absent fields and empty strings are told apart; so are the fields' boundaries.
	e, _ := keys.ParseDigestFields([]string{"a", "b"})
	if e.Digest([]byte(`{"a":"xy","b":""}`)) == e.Digest([]byte(`{"a":"x","b":"y"}`)) ||
		e.Digest([]byte(`{"a":""}`)) == e.Digest([]byte(`{"a":"","b":""}`)) {
		t.Fatal("field boundaries or absence are lost")
	}
	if n := []byte(`plain text`); d.Digest(n) != seenset.SumDigest(n) {
		t.Fatal("a body that is not a JSON object is not digested whole")
	}
}

func TestDigestFieldsInvalid(t *testing.T) {
	if _, err := keys.ParseDigestFields([]string{"payload", "", "a..b"}); err == nil {
		t.Fatal("empty paths accepted")
	}
}

// DigestMessage is Digest, checking the body for JSON only when the key
// rules have not: what m.BodyJSON says is taken as it is, and an unchecked
// body's answer is recorded.
func TestDigestMessage(t *testing.T) {
	d, err := keys.ParseDigestFields([]string{"payload", "meta.tenant"})
	if err != nil {
		t.Fatal(err)
	}
	bodies := []string{
		`{"meta":{"tenant":"t1"},"payload":{"amount":10}}`,
		` null `, `[1,2]`, `"s"`, `{"payload":1}`, `{}`, `not json`, `{"payload":`, ``,
	}
	for _, b := range bodies {
		body := []byte(b)
		want := d.Digest(body)
		m := &broker.Message{Body: body}
		if got := d.DigestMessage(m); got != want {
			t.Errorf("%q unchecked: DigestMessage differs from Digest", b)
		}
		wantCheck := broker.JSONInvalid
		if json.Valid(body) {
			wantCheck = broker.JSONValid
		}
		if m.BodyJSON != wantCheck {
			t.Errorf("%q: BodyJSON = %v, want %v", b, m.BodyJSON, wantCheck)
		}
		// As the key rules left it: the same digest without a second check.
		if got := d.DigestMessage(&broker.Message{Body: body, BodyJSON: wantCheck}); got != want {
			t.Errorf("%q checked: DigestMessage differs from Digest", b)
		}
	}
	// The recorded answer is trusted, not checked again.
	body := []byte(`{"payload":1}`)
	if d.DigestMessage(&broker.Message{Body: body, BodyJSON: broker.JSONInvalid}) != seenset.SumDigest(body) {
		t.Error("a body recorded as not JSON is not digested whole")
	}
	whole, _ := keys.ParseDigestFields(nil)
	if whole.DigestMessage(&broker.Message{Body: body}) != seenset.SumDigest(body) {
		t.Error("without fields the digest is not the whole body's")
	}
}
