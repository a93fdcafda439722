package keys

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

var validSeeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `1`, `-`, `01`, `-01`, `1.`, `.1`, `1.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`,
	`1.5e3`, `-1.0E-0`, `true`, `false`, `null`, `tru`, `truex`, `nul`, `True`, `NaN`, `Infinity`, `0x10`, `+1`,
	`{"a":1}`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{"a" : 1 , "b" : [1, 2, {"c": null}]}`, `{1:2}`, `{'a':1}`,
	`[1,2]`, `[1,]`, `[,1]`, `[1 2]`, `[[[]]]`, `[[[]]`, `[]]`, `{]`, `[}`, `{"a":[}]`, `"a\"b"`, `"\u00e9"`,
	`"\u00G0"`, `"\u00e"`, `"\x"`, `"\/"`, "\"\t\"", "\"\x7f\"", "\"\xff\xfe\"", "\"\xc3\"", `"abc`, `"\`,
	"\ufeff{}", " \t\r\n{} \n", "{}\x00", "{} {}", `{"meta":{"id":"order-1"},"data":{"amount":12.5,"tags":["a","b"]}}`,
	`{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}`,
}

// validJSON must accept exactly what json.Valid accepts: a body one
// calls JSON and the other not would be forwarded, or dead-lettered,
// against what the app's own parser says.
func FuzzValidJSON(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b, nil), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}

// encoding/json refuses more than 10000 open containers.
func TestValidJSONDepth(t *testing.T) {
	for _, depth := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closeWith := "]"
			if open != "[" {
				closeWith = "}"
			}
			b := []byte(strings.Repeat(open, depth) + "1" + strings.Repeat(closeWith, depth))
			if got, want := validJSON(b, nil), json.Valid(b); got != want || want != (depth <= maxDepth) {
				t.Errorf("depth %d of %q: validJSON %v, json.Valid %v", depth, open, got, want)
			}
		}
	}
}

func BenchmarkValidJSON(b *testing.B) {
	body := []byte(`{"job":"urn:bench:orders:created","meta":{"id":"key-12345","schema_version":1},"data":{"order_id":12345,"amount_cents":1999,"note":"` +
		strings.Repeat("x", 150) + `"}}`)
	b.Run("validJSON", func(b *testing.B) {
		for b.Loop() {
			if !validJSON(body, nil) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		for b.Loop() {
			if !json.Valid(body) {
				b.Fatal("invalid")
			}
		}
	})
}

// TestPlainRunFindsTheFirstSpecialByte holds the eight-at-a-time scan to
// a byte-by-byte one: every byte value at every offset of short and long
// runs, bytes that only resemble a quote, backslash or control character
// (0xA2, 0xDC, 0x80 with their top bit set) and two special bytes in one
// word, where the second's borrow must not move the answer.
func TestPlainRunFindsTheFirstSpecialByte(t *testing.T) {
	naive := func(b []byte, i int) int {
		for ; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
				return i
			}
		}
		return len(b)
	}
	for n := 0; n <= 20; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				for from := 0; from <= pos; from++ {
					got, want := plainRun(b, from), naive(b, from)
					// Within the last seven bytes plainRun stops at once.
					if got != want && !(got < want && got+8 > len(b)) {
						t.Fatalf("plainRun(%q, %d) = %d, want %d", b, from, got, want)
					}
				}
				if pos+1 < n {
					b[pos+1] = '"'
					if got, want := plainRun(b, 0), naive(b, 0); got != want && !(got < want && got+8 > len(b)) {
						t.Fatalf("plainRun(%q, 0) = %d, want %d", b, got, want)
					}
				}
			}
		}
	}
}

// The index validJSON records must give every path the value the plain
// scan finds: duplicates (the last wins), escaped names, more members
// than the index holds, and values of every kind, nested or not.
func TestIndexedLookupMatchesScan(t *testing.T) {
	many := "{"
	for i := range maxTop + 3 {
		many += fmt.Sprintf(`"k%d":%d,`, i, i)
	}
	many += `"meta":{"id":"last"}}`
	docs := []string{
		`{"ts":1,"meta":{"id":"a"},"data":"xxxx"}`,
		`{"meta":{"id":"first"},"meta":{"id":"second"}}`,
		` { "meta" : { "id" : 7 } , "x" : [1,{"meta":2}] } `,
		`{"m\u0065ta":{"id":"escaped"},"a":{}}`,
		`{"a":[],"b":{},"meta":{"id":[1]},"c":null,"d":true,"e":-1.5e3}`,
		`{}`,
		many,
	}
	paths := [][]string{{"meta", "id"}, {"meta"}, {"x"}, {"a"}, {"e"}, {"k3"}, {"k14"}, {"nope"}}
	for _, s := range docs {
		d := parseDoc([]byte(s))
		if d.notObj {
			t.Fatalf("%s: not taken for an object", s)
		}
		if wantIndexed := s != many; d.indexed != wantIndexed {
			t.Errorf("%s: indexed %v, want %v", s, d.indexed, wantIndexed)
		}
		for _, p := range paths {
			got, gotOK := d.lookup(p)
			want, wantOK := lookup([]byte(s), p)
			if gotOK != wantOK || string(got) != string(want) {
				t.Errorf("%s at %v: indexed %q %v, scan %q %v", s, p, got, gotOK, want, wantOK)
			}
		}
	}
}

func FuzzIndexedLookupMatchesScan(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s), "meta", "id")
	}
	f.Add([]byte(`{"a":{"b":1},"a":{"b":2}}`), "a", "b")
	f.Fuzz(func(t *testing.T, b []byte, first, second string) {
		d := parseDoc(b)
		if d.notObj || d.null {
			return
		}
		for _, p := range [][]string{{first}, {first, second}} {
			got, gotOK := d.lookup(p)
			want, wantOK := lookup(b, p)
			if gotOK != wantOK || string(got) != string(want) {
				t.Fatalf("%q at %q: indexed %q %v, scan %q %v", b, p, got, gotOK, want, wantOK)
			}
		}
	})
}
