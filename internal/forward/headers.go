package forward

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// Header names that describe the connection or the framing of this one hop
// (RFC 9110 7.6.1) rather than the message. Copied from a message they would
// desynchronise or hijack the request: a stale Content-Length, a
// Transfer-Encoding or Connection: close, an Upgrade, an Expect that stalls
// the body.
var hopByHop = map[string]struct{}{
	"connection":        {},
	"content-length":    {},
	"expect":            {},
	"host":              {},
	"keep-alive":        {},
	"te":                {},
	"trailer":           {},
	"transfer-encoding": {},
	"upgrade":           {},
}

func isHopByHop(lower string) bool {
	_, ok := hopByHop[lower]
	return ok || strings.HasPrefix(lower, "proxy-")
}

// isOwned reports the headers dedupe-proxy itself states to the app. A
// producer must not be able to set them: an app that trusts
// X-Dedupe-Redelivered or Idempotency-Key would be lied to (and with
// X-Idempotency-Key net/http would re-send the request by itself).
func isOwned(lower string) bool {
	return lower == "content-type" || lower == "idempotency-key" || lower == "x-idempotency-key" || strings.HasPrefix(lower, "x-dedupe-")
}

// validateHeaderAllowlist checks Config.HeaderAllowlist: every entry must be
// a header name, and none may be a hop-by-hop or framing header or one that
// dedupe-proxy sets itself. Refusing them at start says why they would never
// arrive; silently dropping them would not. Every bad entry is named.
func validateHeaderAllowlist(names []string) error {
	var errs []error
	for _, n := range names {
		lower := strings.ToLower(n)
		switch {
		case !validHeaderName(n):
			errs = append(errs, fmt.Errorf("header %q: not a valid header name", n))
		case isHopByHop(lower):
			errs = append(errs, fmt.Errorf("header %q: hop-by-hop and framing headers are never forwarded", n))
		case isOwned(lower):
			errs = append(errs, fmt.Errorf("header %q: set by dedupe-proxy, cannot come from the message", n))
		}
	}
	return errors.Join(errs...)
}

// validHeaderValue reports whether s can be sent as a header value: no
// control characters other than tab (so no CR or LF to inject headers with).
// net/http refuses the whole request otherwise, so a key extractor should
// treat a key that fails this as "no usable key".
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
		default:
			return false
		}
	}
	return true
}

// setHeaders fills h, with at most n headers, in increasing order of trust: message headers, then
// the caller's metadata, then the headers this package owns, each
// overriding the one before.
func (c *Client) setHeaders(h http.Header, r *Request, n int) {
	// One backing array for every value rather than a []string each;
	// the full slice expression keeps an Add to one header from
	// overwriting the next.
	vals := make([]string, 0, n)
	set := func(name, v string) {
		vals = append(vals, v)
		n := len(vals)
		h[name] = vals[n-1 : n : n]
	}
	var buf [64]byte
	for name, v := range r.MessageHeaders {
		// Only a valid name can be allow-listed (the allowlist was
		// validated), so checking it first changes no answer, and it
		// makes the name ASCII, which lowerToken lowers exactly as
		// strings.ToLower would.
		if !validHeaderName(name) || !validHeaderValue(v) {
			continue
		}
		canon, ok := c.allow[string(lowerToken(&buf, name))]
		if !ok {
			continue
		}
		set(canon, v)
	}
	for _, m := range r.Meta {
		if !validHeaderValue(m.Value) {
			continue
		}
		if ownMetaName(m.Name) {
			set(m.Name, m.Value)
			continue
		}
		if !validHeaderName(m.Name) || isHopByHopToken(lowerToken(&buf, m.Name)) {
			continue
		}
		set(textproto.CanonicalMIMEHeaderKey(m.Name), m.Value)
	}
	ct := r.ContentType
	if ct == "" || !validHeaderValue(ct) {
		ct = "application/octet-stream"
	}
	set("Content-Type", ct)
	if r.IdempotencyKey != "" {
		set("Idempotency-Key", r.IdempotencyKey)
	}
	if r.Attempt > 0 {
		set("X-Dedupe-Attempt", strconv.Itoa(r.Attempt))
	}
	set("User-Agent", c.userAgent)
	if c.basicAuth != "" {
		set("Authorization", c.basicAuth)
	}
}

// ownMetaName reports the metadata header names the proxy's sources and
// webhooks send: canonical tokens, none hop-by-hop
// (TestOwnMetaNamesNeedNoCheck), so a request sets them as they are.
// Checking and canonicalising them for every request was a tenth of the
// header work per message.
func ownMetaName(name string) bool {
	switch name {
	case "X-Dedupe-Source", "X-Dedupe-Broker", "X-Dedupe-Queue", "X-Dedupe-Topic", "X-Dedupe-Partition",
		"X-Dedupe-Offset", "X-Dedupe-Record-Key", "X-Dedupe-Redelivered", "X-Dedupe-Key-Reused":
		return true
	}
	return false
}

// lowerToken lowers a valid header name, which is ASCII, into buf when
// it fits: a map lookup of string(b) then allocates nothing, where
// strings.ToLower allocates for every name with a capital, as the
// canonical names of the metadata headers all have.
func lowerToken(buf *[64]byte, s string) []byte {
	b := buf[:0]
	if len(s) > len(buf) {
		b = make([]byte, 0, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

func isHopByHopToken(lower []byte) bool {
	_, ok := hopByHop[string(lower)]
	return ok || bytes.HasPrefix(lower, []byte("proxy-"))
}
