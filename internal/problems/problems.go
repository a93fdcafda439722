// Package problems collects what is wrong with a configuration, every
// problem at once, each as "<field path>: <what is wrong>": the config
// loader and each source kind's options report into one List, so an
// operator fixes a file in one round.
package problems

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// List is every problem found so far, in the order found.
type List []error

// Add records a problem with the field at path.
func (p *List) Add(path, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// Positive: d must be above zero.
func (p *List) Positive(path string, d time.Duration) {
	if d <= 0 {
		p.Add(path, "must be a positive duration, got %s", d)
	}
}

// AtLeast: n must be min or more.
func (p *List) AtLeast(path string, n, min int) {
	if n < min {
		p.Add(path, "must be at least %d, got %d", min, n)
	}
}

// OneOf: v must be one of allowed; a near miss is named.
func (p *List) OneOf(path, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = a
		if a == "" {
			quoted[i] = `""`
		}
	}
	p.Add(path, "must be one of %s, got %q%s", strings.Join(quoted, ", "), v, DidYouMean(v, allowed, func(s string) string { return s }))
}

// RedactAddr hides what precedes the '@' of an address given as a URL
// with credentials (redis://:pass@host:6379, user:pass@kafka:9092): it
// is invalid, so it is quoted in the error, and the part before the '@'
// may be a password.
func RedactAddr(a string) string {
	at := strings.LastIndex(a, "@")
	if at < 0 {
		return a
	}
	scheme, _, found := strings.Cut(a[:at], "://")
	if !found {
		scheme = ""
	} else {
		scheme += "://"
	}
	return scheme + "xxxxx" + a[at:]
}

// Redact hides credentials (amqp://user:pass@…) in error messages; an
// unparsable one is shown with what precedes its '@' hidden, so that the
// user sees what they wrote.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return RedactAddr(raw)
	}
	return u.Redacted()
}
