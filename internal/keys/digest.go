package keys

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// Digester computes the body digest kept with a key's claim and done
// mark (key_reuse_fields): over the whole body, or over chosen JSON
// fields only, so that a re-published envelope with a new
// meta.created_at is still the same message. It is safe for concurrent
// use.
type Digester struct {
	paths [][]string
}

// ParseDigestFields compiles key_reuse_fields, JSON paths in the key
// rules' syntax ("payload", "meta.tenant"). None: the whole body.
func ParseDigestFields(fields []string) (*Digester, error) {
	d := &Digester{}
	var errs []error
	for i, f := range fields {
		p, err := parsePath(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("[%d] %q: %w", i, f, err))
			continue
		}
		d.paths = append(d.paths, p)
	}
	return d, errors.Join(errs...)
}

// Digest is the digest of body. With fields, each field's JSON text as
// it appears in the body (its whitespace and key order count) goes in,
// length-prefixed, in the configured order, an absent field as a marker
// of its own; a body that is not a JSON object is digested whole.
func (d *Digester) Digest(body []byte) seenset.Digest {
	if d == nil || len(d.paths) == 0 {
		return seenset.SumDigest(body)
	}
	return d.fields(parseDoc(body))
}

// DigestMessage is Digest(m.Body), which it checks for JSON only when
// m.BodyJSON does not say already (a key rule on the body has checked
// it), and then records the answer there.
func (d *Digester) DigestMessage(m *broker.Message) seenset.Digest {
	if d == nil || len(d.paths) == 0 {
		return seenset.SumDigest(m.Body)
	}
	switch m.BodyJSON {
	case broker.JSONValid:
		return d.fields(shapeDoc(m.Body, true))
	case broker.JSONInvalid:
		return d.fields(shapeDoc(m.Body, false))
	}
	doc := parseDoc(m.Body)
	m.BodyJSON = broker.JSONValid
	if doc.invalid {
		m.BodyJSON = broker.JSONInvalid
	}
	return d.fields(doc)
}

func (d *Digester) fields(doc jsonDoc) seenset.Digest {
	body := doc.body
	if doc.notObj {
		return seenset.SumDigest(body)
	}
	h := sha256.New()
	var n [9]byte
	for _, p := range d.paths {
		var raw []byte
		ok := false
		if !doc.null {
			raw, ok = lookup(body, p)
		}
		if !ok {
			h.Write([]byte{0})
			continue
		}
		raw = trimWS(raw)
		n[0] = 1
		binary.BigEndian.PutUint64(n[1:], uint64(len(raw)))
		h.Write(n[:])
		h.Write(raw)
	}
	var out seenset.Digest
	copy(out[:], h.Sum(nil))
	return out
}

func trimWS(b []byte) []byte {
	i := skipWS(b, 0)
	j := len(b)
	for j > i && (b[j-1] == ' ' || b[j-1] == '\t' || b[j-1] == '\n' || b[j-1] == '\r') {
		j--
	}
	return b[i:j]
}
