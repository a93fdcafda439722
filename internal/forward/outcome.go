package forward

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Outcome is what the pipeline does next with a forwarded message.
type Outcome int

const (
	// Success: the app took the message; commit the key and ack.
	Success Outcome = iota + 1
	// Retryable: the app could not take it now; release the claim and try
	// again after a backoff (at least Result.RetryAfter).
	Retryable
	// Permanent: the app will never take it as it is; release the claim and
	// dead-letter it now.
	Permanent
)

// The zero Outcome is deliberately none of the above, so that a Result
// nobody filled in is never mistaken for Success and acked.

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Retryable:
		return "retryable"
	case Permanent:
		return "permanent"
	}
	return "unknown"
}

// MaxRetryAfter caps the app's Retry-After: a typo of "36000" must not park
// a message, and with Kafka the whole partition behind it, for ten hours.
const MaxRetryAfter = 10 * time.Minute

// StatusRules says which non-2xx statuses are retryable. The zero value
// retries none.
type StatusRules struct {
	classes [6]bool // index: first digit
	codes   map[int]struct{}
}

// Retryable reports whether a non-2xx status should be retried.
func (s StatusRules) Retryable(status int) bool {
	if c := status / 100; c >= 0 && c < len(s.classes) && s.classes[c] {
		return true
	}
	_, ok := s.codes[status]
	return ok
}

// ParseStatusRules parses entries like "503" or "5xx" (case-insensitive,
// surrounding spaces ignored). Only 3xx, 4xx and 5xx can be listed: 2xx is
// always success and 1xx never reaches the caller. Every bad entry is named
// in the returned error.
func ParseStatusRules(rules []string) (StatusRules, error) {
	var s StatusRules
	var errs []error
	for _, raw := range rules {
		e := strings.ToLower(strings.TrimSpace(raw))
		if len(e) != 3 || e[0] < '3' || e[0] > '5' {
			errs = append(errs, fmt.Errorf("status rule %q: want a code 300-599 like \"503\" or a class like \"5xx\"", raw))
			continue
		}
		if e[1:] == "xx" {
			s.classes[e[0]-'0'] = true
			continue
		}
		code, err := strconv.Atoi(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("status rule %q: want a code 300-599 like \"503\" or a class like \"5xx\"", raw))
			continue
		}
		if s.codes == nil {
			s.codes = make(map[int]struct{})
		}
		s.codes[code] = struct{}{}
	}
	if len(errs) > 0 {
		return StatusRules{}, errors.Join(errs...)
	}
	return s, nil
}

// parseRetryAfter reads delta-seconds or an HTTP-date (RFC 9110 10.2.3).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
				return MaxRetryAfter
			}
			return 0
		}
		if secs >= uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	switch {
	case d <= 0:
		return 0
	case d > MaxRetryAfter:
		return MaxRetryAfter
	}
	return d
}

// appStatus reads Dapr's verdict from a 2xx JSON answer. ok is false when
// there is none (not JSON, no "status" string), and then the 2xx stands.
// Field matching is encoding/json's case-insensitive one, as in daprd.
func appStatus(contentType string, body []byte) (o Outcome, reason string, ok bool) {
	if !looksJSON(contentType, body) {
		return 0, "", false
	}
	var v struct {
		Status *string `json:"status"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Status == nil {
		// daprd, too, treats an answer it cannot parse as success.
		return 0, "", false
	}
	// Only Dapr's own words change a 2xx. Any other status word ("ok",
	// "created", "Accepted": what most REST handlers answer) leaves it a
	// success: the app acted, and a retry would make it act again.
	// (daprd retries a word it does not know; for an app that is not a
	// Dapr app that is a double effect per retry.)
	switch strings.ToUpper(*v.Status) {
	case "RETRY":
		return Retryable, "app status RETRY", true
	case "DROP":
		return Permanent, "app status DROP", true
	}
	return 0, "", false
}

func looksJSON(contentType string, body []byte) bool {
	if len(body) == 0 {
		return false
	}
	if contentType != "" {
		if mt, _, err := mime.ParseMediaType(contentType); err == nil &&
			(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
			return true
		}
	}
	for _, b := range body {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b == '{'
	}
	return false
}

// transportReason names a transport failure in a few words that are the
// same for every occurrence, so they can be counted and grepped.
func transportReason(err error) string {
	var (
		dnsErr   *net.DNSError
		netErr   net.Error
		certErr  *tls.CertificateVerificationError
		alertErr tls.AlertError
		recErr   tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, syscall.ENOENT):
		// Only a Unix socket dial ends this way: the app has not created
		// its socket yet.
		return "socket missing"
	case errors.As(err, &dnsErr):
		return "dns lookup failed"
	case errors.As(err, &certErr), errors.As(err, &alertErr), errors.As(err, &recErr):
		return "tls error"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		strings.Contains(err.Error(), "server closed idle connection"):
		return "connection closed"
	}
	return "transport error"
}
