package forward

import (
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

// setHeaders fills h in increasing order of trust: message headers, then
// the caller's metadata, then the headers this package owns, each
// overriding the one before.
func (c *Client) setHeaders(h http.Header, r *Request) {
	// One backing array for every value rather than a []string each;
	// the full slice expression keeps an Add to one header from
	// overwriting the next.
	vals := make([]string, 0, len(r.MessageHeaders)+len(r.Meta)+5)
	set := func(name, v string) {
		vals = append(vals, v)
		n := len(vals)
		h[name] = vals[n-1 : n : n]
	}
	for name, v := range r.MessageHeaders {
		lower := lowerASCII(name)
		if lower != "traceparent" && lower != "tracestate" {
			if _, ok := c.allow[lower]; !ok {
				continue
			}
		}
		// The allowlist was validated, so only the message's own name and
		// value can still be bad here; skip rather than fail the request.
		if !validHeaderName(name) || !validHeaderValue(v) {
			continue
		}
		set(textproto.CanonicalMIMEHeaderKey(name), v)
	}
	for _, m := range r.Meta {
		if !validHeaderName(m.Name) || !validHeaderValue(m.Value) || isHopByHop(lowerASCII(m.Name)) {
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

// lowerASCII avoids strings.ToLower's allocation for the common case of a
// name that is lower-case already (traceparent, most broker headers).
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
