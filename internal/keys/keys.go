// Package keys extracts a message's dedupe key by the source's rules, tried
// in order until one yields a usable key. A message without a usable key is
// never dropped: the pipeline forwards it without a seen-set step
// (fail-open) or dead-letters it, by configuration.
package keys

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template/parse"
	"unicode"
	"unicode/utf8"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// MaxKeyBytes bounds a key: longer values are not identities but payload,
// and they would bloat every Redis entry.
const MaxKeyBytes = 512

// DefaultRule is BabelQueue's canonical identity, the envelope's meta.id.
const DefaultRule = "json:meta.id"

// Extractor holds a source's parsed rules. It is safe for concurrent use.
type Extractor struct {
	rules []rule
	specs []string
}

type ruleKind int

const (
	ruleJSON ruleKind = iota
	ruleHeader
	ruleMessageID
	ruleRecordKey
	ruleTemplate
)

type rule struct {
	kind   ruleKind
	path   []string // ruleJSON
	header string   // ruleHeader, lower-cased
	parts  []part   // ruleTemplate
	escape string   // ruleTemplate: the characters escaped in field values
}

// part of a template: literal text, or a JSON path when path != nil.
type part struct {
	text string
	path []string
}

// Parse compiles rule specs such as "json:meta.id", "header:bq-message-id",
// "property:message_id", "record_key" or "template:inv:{{.month}}:{{.customer}}".
// The error names the offending spec.
func Parse(specs []string) (*Extractor, error) {
	if len(specs) == 0 {
		specs = []string{DefaultRule}
	}
	e := &Extractor{specs: specs}
	var errs []error
	for i, s := range specs {
		r, err := parseRule(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("[%d] %q: %w", i, s, err))
			continue
		}
		e.rules = append(e.rules, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return e, nil
}

func parseRule(s string) (rule, error) {
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "json":
		p, err := parsePath(arg)
		return rule{kind: ruleJSON, path: p}, err
	case "header":
		if arg == "" {
			return rule{}, errors.New("header rule needs a name, e.g. header:bq-message-id")
		}
		return rule{kind: ruleHeader, header: strings.ToLower(arg)}, nil
	case "property":
		if arg != "message_id" {
			return rule{}, errors.New("only property:message_id is supported")
		}
		return rule{kind: ruleMessageID}, nil
	case "record_key":
		if arg != "" {
			return rule{}, errors.New("record_key takes no argument")
		}
		return rule{kind: ruleRecordKey}, nil
	case "template":
		parts, escape, err := parseTemplate(arg)
		return rule{kind: ruleTemplate, parts: parts, escape: escape}, err
	}
	return rule{}, errors.New("unknown rule; use json:<path>, header:<name>, property:message_id, record_key or template:<text>")
}

func parsePath(p string) ([]string, error) {
	if p == "" {
		return nil, errors.New("empty JSON path")
	}
	segs := strings.Split(p, ".")
	for _, s := range segs {
		if s == "" {
			return nil, errors.New("empty segment in JSON path")
		}
	}
	return segs, nil
}

// parseTemplate accepts Go template syntax but only literal text and field
// references ({{.a.b}}): a key must be a pure function of the message, and
// restricting the language lets every referenced value be checked as a
// scalar instead of printing "map[...]" or "<no value>" into a key.
//
// Joining values with text must not let two messages share a key:
// {{.a}}:{{.b}} gives "x:y:z" for a="x:y", b="z" and for a="x", b="y:z".
// So render puts a backslash before every backslash in a value and before
// every character that starts the text after a field (escape lists them).
// Read left to right, a key then splits at the first unescaped such
// character after each value, which gives back the values: the mapping
// from values to keys is injective. That needs text between two fields
// (nothing marks where {{.a}}{{.b}} splits), and that text must not start
// with a backslash, which would read as an escape. A value holding none
// of those characters is written as it is, so most keys keep the shape
// they had before values were escaped.
func parseTemplate(s string) (parts []part, escape string, err error) {
	if s == "" {
		return nil, "", errors.New("empty template")
	}
	trees, err := parse.Parse("key", s, "{{", "}}")
	if err != nil {
		return nil, "", err
	}
	fields := 0
	for _, n := range trees["key"].Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			if len(n.Text) == 0 {
				continue
			}
			if k := len(parts) - 1; k >= 0 && parts[k].path == nil {
				parts[k].text += string(n.Text)
				continue
			}
			parts = append(parts, part{text: string(n.Text)})
		case *parse.ActionNode:
			if len(n.Pipe.Decl) > 0 || len(n.Pipe.Cmds) != 1 || len(n.Pipe.Cmds[0].Args) != 1 {
				return nil, "", fmt.Errorf("only field references like {{.customer}} are allowed, got %s", n)
			}
			f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode)
			if !ok {
				return nil, "", fmt.Errorf("only field references like {{.customer}} are allowed, got %s", n)
			}
			if k := len(parts) - 1; k >= 0 && parts[k].path != nil {
				return nil, "", fmt.Errorf("%s follows {{.%s}} with no text between them: a key could not tell where one value ends, so two messages could share it; put a separator between them", n, strings.Join(parts[k].path, "."))
			}
			parts = append(parts, part{path: f.Ident})
			fields++
		default:
			return nil, "", fmt.Errorf("only field references like {{.customer}} are allowed, got %s", n)
		}
	}
	if fields == 0 {
		return nil, "", errors.New("template references no field, so every message would share one key")
	}
	escape = `\`
	for i := 1; i < len(parts); i++ {
		if parts[i].path != nil || parts[i-1].path == nil {
			continue
		}
		r, _ := utf8.DecodeRuneInString(parts[i].text)
		if r == '\\' {
			return nil, "", fmt.Errorf("the text after {{.%s}} starts with a backslash, which escapes characters in keys; start it with another character", strings.Join(parts[i-1].path, "."))
		}
		if !strings.ContainsRune(escape, r) {
			escape += string(r)
		}
	}
	return parts, escape, nil
}

// Specs returns the rules as configured.
func (e *Extractor) Specs() []string { return e.specs }

// Key returns the first usable key. When none is usable it returns "" and
// why the last rule failed ("absent", "empty", "not a string or number",
// "too long", "invalid utf-8", "unpaired surrogate escape", "control
// characters", "ambiguous header", "body is not JSON"), for metrics and logs.
// A rule that reads the body records in m.BodyJSON whether it is JSON.
func (e *Extractor) Key(m *broker.Message) (key, why string) {
	var doc jsonDoc
	parsed := false
	why = "absent"
	for _, r := range e.rules {
		var v string
		var miss string
		switch r.kind {
		case ruleJSON, ruleTemplate:
			if !parsed {
				doc, parsed = parseDoc(m.Body), true
				m.BodyJSON = broker.JSONValid
				if doc.invalid {
					m.BodyJSON = broker.JSONInvalid
				}
			}
			if r.kind == ruleJSON {
				v, miss = doc.scalar(r.path)
			} else {
				v, miss = doc.render(r.parts, r.escape)
			}
		case ruleHeader:
			v, miss = header(m.Headers, r.header)
		case ruleMessageID:
			v, miss = m.MessageID, ""
		case ruleRecordKey:
			v, miss = string(m.RecordKey), ""
		}
		if miss == "" {
			miss = usable(v)
		}
		if miss == "" {
			return v, ""
		}
		why = miss
	}
	return "", why
}

func usable(v string) string {
	if plainASCII(v) && len(v) <= MaxKeyBytes {
		return ""
	}
	switch {
	case v == "":
		return "empty"
	case len(v) > MaxKeyBytes:
		return "too long"
	case !utf8.ValidString(v):
		return "invalid utf-8"
	case strings.ContainsFunc(v, unicode.IsControl):
		// The key travels as the Idempotency-Key header; a control
		// character cannot, and escaping it could collide with another key.
		return "control characters"
	}
	return ""
}

// plainASCII: v is not empty and holds printable ASCII only, which is
// valid UTF-8 without a control character: what nearly every key is, and
// a byte loop tells it for a fraction of decoding runes.
func plainASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return v != ""
}

// header looks the name up case-insensitively. Several spellings of it
// (bq-message-id and BQ-Message-Id) holding different values are
// ambiguous: picking one, even by a fixed rule, guesses the message's
// identity, and a wrong guess makes it a "duplicate" of the message that
// really has that id, acked without reaching the app. With no key it is
// still delivered (or dead-lettered) and counted, never lost; and the
// answer no longer depends on map order. Equal values are one identity.
func header(h map[string]string, name string) (string, string) {
	v, found := "", false
	for k, hv := range h {
		if !lowerEquals(k, name) {
			continue
		}
		if found && hv != v {
			return "", "ambiguous header"
		}
		v, found = hv, true
	}
	if !found {
		return "", "absent"
	}
	return v, ""
}

// lowerEquals is strings.ToLower(s) == lower without ToLower's
// allocation for a name with a capital, for the ASCII names headers
// almost always have: every header of every message is compared.
func lowerEquals(s, lower string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.ToLower(s) == lower
		}
	}
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// jsonDoc looks values up in a JSON body without decoding it: validJSON
// checks the whole body once (no allocation), then each path is found by
// scanning keys and skipping values in place. Decoding the envelope into
// maps cost ~40 allocations per message, most of the proxy's key work.
type jsonDoc struct {
	body   []byte
	notObj bool
	null   bool
	// invalid: the body is not JSON at all (notObj is set too).
	invalid bool
	// indexed: top holds the top-level members (validJSON found them
	// while it checked the body), so a path's first step is a look
	// among them, not a scan of the body.
	indexed bool
	top     topIndex
}

// parseDoc returns a value: a pointer escaped, one allocation per message.
func parseDoc(body []byte) jsonDoc {
	var top topIndex
	valid := validJSON(body, &top)
	d := shapeDoc(body, valid)
	if !d.notObj && !d.null && !top.over && !top.open {
		d.indexed, d.top = true, top
	}
	return d
}

// shapeDoc is parseDoc for a body already known to be JSON or not.
func shapeDoc(body []byte, valid bool) jsonDoc {
	d := jsonDoc{body: body}
	i := skipWS(body, 0)
	switch {
	case !valid:
		d.notObj, d.invalid = true, true
	case i < len(body) && body[i] == 'n':
		d.null = true // "null" decodes to an empty object: every path absent
	case i >= len(body) || body[i] != '{':
		d.notObj = true
	}
	return d
}

func (d *jsonDoc) scalar(path []string) (string, string) {
	if d.notObj {
		return "", "body is not JSON"
	}
	if d.null {
		return "", "absent"
	}
	raw, ok := d.lookup(path)
	if !ok {
		return "", "absent"
	}
	return scalarValue(raw)
}

// lookup is lookup(d.body, path), its first step taken in the index
// when there is one.
func (d *jsonDoc) lookup(path []string) ([]byte, bool) {
	if !d.indexed || len(path) == 0 {
		return lookup(d.body, path)
	}
	b := d.body
	for k := d.top.n - 1; k >= 0; k-- { // the last of duplicate keys wins
		m := d.top.m[k]
		end, esc := stringEnd(b, int(m.name))
		if !nameIs(b[m.name:end], esc, path[0]) {
			continue
		}
		if len(path) == 1 {
			return b[m.value:m.end], true
		}
		return lookup(b[m.value:m.end], path[1:])
	}
	return nil, false
}

// nameIs reports whether the member name q (quoted; esc: it holds an
// escape) decodes to seg.
func nameIs(q []byte, esc bool, seg string) bool {
	if !esc {
		return string(q[1:len(q)-1]) == seg
	}
	// A name with a lone surrogate decodes to U+FFFD but is not the
	// name U+FFFD: it matches nothing.
	var k string
	return !unpairedSurrogate(q) && json.Unmarshal(q, &k) == nil && k == seg
}

// lookup returns the raw value at path in a valid JSON document whose top
// level is an object. Like encoding/json, the last of duplicate keys wins.
func lookup(b []byte, path []string) ([]byte, bool) {
	for _, seg := range path {
		i := skipWS(b, 0)
		if i >= len(b) || b[i] != '{' {
			return nil, false
		}
		i++
		var found []byte
		for {
			i = skipWS(b, i)
			if b[i] == '}' {
				break
			}
			keyEnd, esc := stringEnd(b, i)
			match := nameIs(b[i:keyEnd], esc, seg)
			i = skipWS(b, keyEnd) + 1 // the colon
			i = skipWS(b, i)
			end := valueEnd(b, i)
			if match {
				found = b[i:end]
			}
			i = skipWS(b, end)
			if b[i] == ',' {
				i++
				continue
			}
			break // '}'
		}
		if found == nil {
			return nil, false
		}
		b = found
	}
	return b, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string starting at b[i] == '"'
// and whether it holds an escape.
func stringEnd(b []byte, i int) (int, bool) {
	// The document is valid, so only a quote or a backslash can end a
	// run of plain bytes. plainRun finds them eight bytes a step with no
	// call: most strings here are short names, for which the two
	// bytes.IndexByte calls this made cost more than the bytes they read.
	esc := false
	for i++; i < len(b); {
		if i = plainRun(b, i); i >= len(b) {
			break
		}
		switch b[i] {
		case '"':
			return i + 1, esc
		case '\\':
			esc = true
			i += 2 // the backslash and what it escapes
		default:
			i++ // within the last seven bytes, which plainRun leaves to us
		}
	}
	return len(b), esc
}

// valueEnd returns the index after the value starting at b[i]; the
// document is known to be valid.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		end, _ := stringEnd(b, i)
		return end
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i, _ = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

func scalarValue(raw json.RawMessage) (string, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", "absent"
	}
	switch raw[0] {
	case '"':
		if !utf8.Valid(raw) {
			return "", "invalid utf-8"
		}
		if bytes.IndexByte(raw, '\\') < 0 {
			return string(raw[1 : len(raw)-1]), ""
		}
		// encoding/json decodes a lone surrogate escape to U+FFFD, so
		// "\ud800", "\udbff" and "\ufffd" would be one key. Every other
		// escape decodes to exactly what it spells, and raw bytes were
		// checked above.
		if unpairedSurrogate(raw) {
			return "", "unpaired surrogate escape"
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", "invalid utf-8"
		}
		return s, ""
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		// The literal, not a float64 round trip: 12345678901234567890
		// must not become 1.2345678901234567e19.
		return string(raw), ""
	case 'n':
		return "", "absent"
	}
	return "", "not a string or number"
}

// unpairedSurrogate reports whether the JSON string literal s has a
// \uXXXX escape of a surrogate that is not a high one followed at once by
// an escaped low one: the only escape that cannot be decoded to the code
// point it spells, since UTF-8 has no encoding for a lone surrogate.
func unpairedSurrogate(s []byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		i++
		if i >= len(s) || s[i] != 'u' {
			continue // a one-letter escape, skipped with its letter
		}
		r := hex4(s, i+1)
		i += 4
		switch {
		case 0xd800 <= r && r < 0xdc00:
			if i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if lo := hex4(s, i+3); 0xdc00 <= lo && lo < 0xe000 {
					i += 6
					continue
				}
			}
			return true
		case 0xdc00 <= r && r < 0xe000:
			return true
		}
	}
	return false
}

// hex4 returns the value of the four hex digits at s[i:], or -1.
func hex4(s []byte, i int) rune {
	if i+4 > len(s) {
		return -1
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// render joins the template's text and its escaped field values; see
// parseTemplate for why and how values are escaped.
func (d *jsonDoc) render(parts []part, escape string) (string, string) {
	var b strings.Builder
	for _, p := range parts {
		if p.path == nil {
			b.WriteString(p.text)
			continue
		}
		v, miss := d.scalar(p.path)
		if miss == "" {
			miss = usable(v)
		}
		if miss != "" {
			return "", miss
		}
		if !strings.ContainsAny(v, escape) {
			b.WriteString(v)
			continue
		}
		for _, r := range v {
			if strings.ContainsRune(escape, r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	return b.String(), ""
}
