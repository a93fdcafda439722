// Package forward delivers one message to the unchanged app over local HTTP
// and says what became of it: Success (commit the key, ack), Retryable
// (release the claim, back off, try again) or Permanent (release,
// dead-letter now).
//
// It is modelled on alertmanager's notify/webhook: a deadline per request, a
// bounded read of the answer so the connection goes back to the pool, URLs
// redacted from errors, 5xx retryable and other non-2xx permanent. Two
// things are added for apps that move over from Dapr or Knative: which
// statuses retry is configurable, and a 2xx whose JSON body carries Dapr's
// {"status": "SUCCESS" | "RETRY" | "DROP"} is honoured.
//
// Do never returns an error: every failure is a Result whose Outcome the
// caller acts on and whose Reason is safe to log and to put into a
// dead-letter header.
package forward

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxRequestTime   = 5 * time.Minute
	DefaultMaxConns         = 32
	DefaultMaxResponseBytes = 64 << 10
	DefaultUserAgent        = "dedupe-proxy"
)

// DefaultRetryStatuses are the non-2xx statuses retried when
// Config.RetryStatuses is empty: server errors, request timeout and rate
// limiting are the app saying "not now"; any other 4xx says "never".
func DefaultRetryStatuses() []string { return []string{"5xx", "408", "429"} }

// ErrInvalidRequest marks a Request that cannot be sent as it is (a path
// that is not a URL, an idempotency key that is not a valid header value).
// Retrying cannot fix it, so its Outcome is Permanent.
var ErrInvalidRequest = errors.New("forward: invalid request")

// Config configures a Client. Zero fields take the defaults above.
type Config struct {
	// URL is the app's base URL, e.g. http://127.0.0.1:8080; a request goes
	// to URL + Request.Path. Userinfo, if present, is sent as basic auth.
	URL string
	// Socket, when set, is a Unix socket dialled instead of URL's host; URL
	// still gives the scheme, the Host header and the base path.
	Socket string
	// Timeout is how long the app may take to answer before the request
	// counts as slow. A slow request is not abandoned: the app may be
	// acting on it, so it is waited for, and its late answer counts, up to
	// MaxRequestTime.
	Timeout time.Duration
	// MaxRequestTime bounds one request, reading the (bounded) answer
	// included. Past it the request is given up (Result.Abandoned): the
	// app may still be working on it, so a second request for the same
	// key may then overlap it. Never shorter than Timeout.
	MaxRequestTime time.Duration
	// IgnoreAppStatus turns off reading Dapr's {"status": ...} words from
	// a 2xx answer, for apps that are not Dapr apps: every 2xx is then a
	// success, whatever its body.
	IgnoreAppStatus bool
	// MaxConns is the number of idle keep-alive connections kept to the app.
	// Size it to the number of workers: with fewer, net/http closes every
	// connection it cannot keep idle, so each request beyond them opens
	// and closes a TCP connection.
	MaxConns int
	// MaxResponseBytes is how much of an answer is read. A shorter answer is
	// read to the end so the connection is reused; a longer one is cut off
	// by closing the connection, so a runaway app cannot make us buffer or
	// download megabytes per message.
	MaxResponseBytes int64
	// RetryStatuses lists the non-2xx statuses that are retryable, as codes
	// ("503") or classes ("5xx"); every other non-2xx is permanent. Empty
	// means DefaultRetryStatuses.
	RetryStatuses []string
	// HeaderAllowlist names the message headers copied onto the request
	// (case-insensitive). traceparent and tracestate always pass.
	HeaderAllowlist []string
	// UserAgent is sent with every request; empty means DefaultUserAgent.
	UserAgent string
}

// Request is one message to forward.
type Request struct {
	// Path is appended to Config.URL; it may carry a query.
	Path string
	// Body is sent byte for byte and is not copied; the caller must not
	// modify it until Do returns.
	Body []byte
	// ContentType is the message's content type; empty means
	// application/octet-stream.
	ContentType string
	// IdempotencyKey is the message key without the consumer prefix, sent
	// as Idempotency-Key: the app's own defence for the one crash window
	// the seen-set cannot close. Empty (no usable key) sends no header.
	IdempotencyKey string
	// Attempt is sent as X-Dedupe-Attempt when positive.
	Attempt int
	// Meta are the source metadata headers (X-Dedupe-Source, -Queue,
	// -Topic, -Partition, -Offset, -Redelivered, …), set as given. They
	// override message headers of the same name.
	Meta []Header
	// MessageHeaders are the message's own headers; only allow-listed ones
	// and traceparent/tracestate are sent.
	MessageHeaders map[string]string
	// OnSlow, when set, is called once, from another goroutine, when the
	// request has had no answer for Config.Timeout; Do goes on waiting.
	OnSlow func()
}

// Header is one header name and value.
type Header struct{ Name, Value string }

// Result is what became of one Request.
type Result struct {
	Outcome Outcome
	// Status is the HTTP status, 0 when no response arrived.
	Status int
	// RetryAfter is the app's Retry-After (seconds or HTTP-date), capped at
	// MaxRetryAfter; 0 when absent, invalid or in the past.
	RetryAfter time.Duration
	// Reason is short and safe for logs and dead-letter headers: "status
	// 503", "app status RETRY", "timeout", "connection refused", …
	Reason string
	// Err is the underlying error when there was no usable response, with
	// the URL's credentials and query removed; nil otherwise.
	Err error
	// Duration is the time Do took, reading the answer included.
	Duration time.Duration
	// Unreachable: the request never reached the app (connection refused,
	// Unix socket missing). The app is down or not started yet, so the
	// message itself has not failed.
	Unreachable bool
	// MayBeRunning: the request was sent, or may have been, and no answer
	// came back: it was cancelled, given up at MaxRequestTime, or its
	// connection failed after the request was written. The app may still
	// be working on it, so the caller must not send the same key again yet.
	MayBeRunning bool
	// Slow: the answer (or the failure) came after Config.Timeout.
	Slow bool
	// Abandoned: no answer within MaxRequestTime, and the request was
	// given up on while the app may still be working on it.
	Abandoned bool
}

// Client forwards requests to one app. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[/path], without userinfo or trailing slash
	basicAuth string // precomputed Authorization value from URL userinfo, or ""
	timeout   time.Duration
	maxReq    time.Duration
	appStatus bool
	maxResp   int64
	retry     StatusRules
	// allow maps each allow-listed header name, and traceparent and
	// tracestate, in lower case to its canonical form: the name a copied
	// message header is set under, computed once rather than per message.
	allow     map[string]string
	userAgent string
	transport *http.Transport
	client    *http.Client
	urls      urlCache
}

// urlCache keeps the parsed request URL of each path sent to: a source
// sends every message to one path, and building its URL string and
// parsing it were two allocations and a parse per message.
// Copied on write: the per-message read takes no lock.
type urlCache struct {
	m  atomic.Pointer[map[string]url.URL] // by Request.Path
	mu sync.Mutex                         // serialises writers
}

// maxCachedURLs bounds the cache for a caller that sends to ever new
// paths; past it a path's URL is parsed per request, as it always was.
const maxCachedURLs = 64

// New validates c, applies defaults and builds the connection pool. All
// problems are reported at once.
func New(c Config) (*Client, error) {
	var errs []error
	bad := func(field string, err error) { errs = append(errs, fmt.Errorf("forward: %s: %w", field, err)) }

	base, err := ParseBaseURL(c.URL)
	if err != nil {
		bad("URL", err)
	}
	if c.Timeout < 0 {
		bad("Timeout", fmt.Errorf("must not be negative, got %s", c.Timeout))
	}
	if c.MaxRequestTime < 0 {
		bad("MaxRequestTime", fmt.Errorf("must not be negative, got %s", c.MaxRequestTime))
	}
	if c.MaxConns < 0 {
		bad("MaxConns", fmt.Errorf("must not be negative, got %d", c.MaxConns))
	}
	if c.MaxResponseBytes < 0 {
		bad("MaxResponseBytes", fmt.Errorf("must not be negative, got %d", c.MaxResponseBytes))
	}
	statuses := c.RetryStatuses
	if len(statuses) == 0 {
		statuses = DefaultRetryStatuses()
	}
	rules, err := ParseStatusRules(statuses)
	if err != nil {
		bad("RetryStatuses", err)
	}
	if err := validateHeaderAllowlist(c.HeaderAllowlist); err != nil {
		bad("HeaderAllowlist", err)
	}
	if c.UserAgent != "" && !validHeaderValue(c.UserAgent) {
		bad("UserAgent", errors.New("contains characters not allowed in a header value"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	cl := &Client{
		timeout:   orDefault(c.Timeout, DefaultTimeout),
		appStatus: !c.IgnoreAppStatus,
		maxResp:   orDefault(c.MaxResponseBytes, DefaultMaxResponseBytes),
		retry:     rules,
		allow:     make(map[string]string, len(c.HeaderAllowlist)+2),
		userAgent: orDefault(c.UserAgent, DefaultUserAgent),
	}
	if u := base.User; u != nil {
		pw, _ := u.Password()
		cl.basicAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw))
		base.User = nil // request URLs, and so their errors, never carry the credentials
	}
	cl.maxReq = max(orDefault(c.MaxRequestTime, DefaultMaxRequestTime), cl.timeout)
	cl.base = strings.TrimSuffix(base.String(), "/")
	for _, n := range append([]string{"traceparent", "tracestate"}, c.HeaderAllowlist...) {
		cl.allow[strings.ToLower(n)] = textproto.CanonicalMIMEHeaderKey(n)
	}

	maxConns := orDefault(c.MaxConns, DefaultMaxConns)
	// No dial timeout of its own: the per-request deadline bounds the dial.
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if c.Socket != "" {
		socket := c.Socket
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socket)
		}
	}
	// HTTP/1.1 only: the idle pool then holds one connection per in-flight
	// request, which is what MaxConns sizes, and a slow answer never stalls
	// the others on a shared HTTP/2 connection.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	cl.transport = &http.Transport{
		// The app is local; HTTP_PROXY set for the pod's egress must not
		// reroute the forward step.
		Proxy:               nil,
		DialContext:         dial,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		// Shorter than the keep-alive timeouts app servers close idle
		// connections after (gunicorn 2 s, Node 5 s): a request written
		// on a connection the app is closing at that moment fails with
		// no answer, and since the app may have read it, it then counts
		// as possibly running and its key waits a lease.
		IdleConnTimeout:     time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// MaxResponseBytes bounds the body; this bounds what a runaway app
		// can make each worker buffer before the body (net/http: 10 MiB).
		MaxResponseHeaderBytes: 1 << 20,
		// Without this net/http asks for gzip and silently decodes it, and
		// MaxResponseBytes would bound the compressed size only.
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
		Protocols:          &protocols,
	}
	cl.client = &http.Client{
		Transport: cl.transport,
		// Following a 301/302/303 turns the POST into a body-less GET: a 200
		// from it would ack a message the app never saw. A redirect is
		// reported as its own status instead (permanent unless "3xx" is in
		// RetryStatuses).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return cl, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ParseBaseURL checks the app's base URL (app.url) as New takes it, so
// that config validation refuses what New would; its errors never quote
// the URL, which may hold credentials.
func ParseBaseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("scheme %q: want http:// or https://", u.Scheme)
	case u.Host == "":
		return nil, errors.New("has no host")
	case u.RawQuery != "" || u.ForceQuery:
		return nil, errors.New("must not have a query: each message's path is appended to it")
	case u.Fragment != "":
		return nil, errors.New("must not have a fragment: each message's path is appended to it")
	}
	if p := u.Port(); p != "" {
		// url.Parse takes any digits for a port; the dial would fail
		// with every message.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %s: must be 1-65535", p)
		}
	}
	return u, nil
}

// target appends path to the base URL with exactly one slash between them.
func (c *Client) target(path string) string {
	switch {
	case path == "":
		return c.base
	case path[0] == '/' || path[0] == '?':
		return c.base + path
	}
	return c.base + "/" + path
}

// Do POSTs r to the app and classifies the answer. It never panics on a
// misbehaving app. It returns when the app answered, when ctx ends, or at
// Config.MaxRequestTime; a request without an answer after
// Config.Timeout is slow (r.OnSlow) but still waited for, because the app
// may be acting on it and its answer decides what becomes of the key.
func (c *Client) Do(ctx context.Context, r Request) Result {
	start := time.Now()
	res := c.do(ctx, start, r)
	res.Duration = time.Since(start)
	res.Slow = res.Duration > c.timeout
	return res
}

func (c *Client) do(parent context.Context, start time.Time, r Request) Result {
	if r.IdempotencyKey != "" && !validHeaderValue(r.IdempotencyKey) {
		// Sending the message without its key would silently drop the app's
		// defence against a double effect; mangling it could collide with
		// another key. The key extractor should have called this "no usable
		// key" (see validHeaderValue).
		return Result{
			Outcome: Permanent,
			Reason:  "invalid idempotency key",
			Err:     fmt.Errorf("%w: idempotency key contains characters not allowed in a header value", ErrInvalidRequest),
		}
	}
	b := c.bound(parent, start, r.OnSlow)
	defer b.stop()
	var ctx context.Context = b
	for try := 1; ; try++ {
		// The first try's trace and body come with the bound, in its one
		// allocation; a re-send takes new ones, since net/http may still
		// hold the failed try's.
		sent, body := &b.sent, &b.body
		if try > 1 {
			sent, body = new(sendTrace), new(bytes.Reader)
		}
		body.Reset(r.Body)
		req, err := c.newRequest(httptrace.WithClientTrace(ctx, sent.trace()), &r, body)
		if err != nil {
			return Result{
				Outcome: Permanent,
				Reason:  "invalid request path",
				Err:     fmt.Errorf("%w: path: %w", ErrInvalidRequest, redact(err)),
			}
		}
		// The Transport, not the Client: redirects are not followed anyway
		// (see CheckRedirect), and Client.Do would copy every request's
		// headers for them.
		resp, err := c.transport.RoundTrip(req)
		if err == nil {
			return c.classify(parent, ctx, resp)
		}
		if !sent.wrote.Load() && sent.reused.Load() && try == 1 && ctx.Err() == nil {
			// A kept-alive connection the app had closed, found out
			// before a byte of the request went: the app cannot have
			// seen it, so it is sent once more on a new connection.
			continue
		}
		f := failure(parent, ctx, redact(&url.Error{Op: "Post", URL: req.URL.String(), Err: err}), "")
		if sent.wrote.Load() && !f.MayBeRunning && !f.Unreachable {
			// The app may have read the whole request before the
			// connection failed, and may be acting on it.
			f.MayBeRunning = true
		}
		return f
	}
}

// reqBound is the per-request context: it ends at MaxRequestTime, and on
// the way, at Timeout, tells OnSlow. Both are one timer, re-armed after
// its first firing, where context.WithTimeout and a time.AfterFunc for
// OnSlow were two timers and their allocations per message.
type reqBound struct {
	// context.Context is a WithCancelCause child of the caller's context;
	// only Deadline is overridden.
	context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time // start + MaxRequestTime
	onSlow   func()

	mu      sync.Mutex
	t       *time.Timer
	slowed  bool // the timer's first firing, OnSlow's, has happened
	stopped bool // Do is done: the timer must not be re-armed

	sent sendTrace
	body bytes.Reader
}

// bound returns the request's context; its stop ends it.
// The deadline is reached by cancelling with context.DeadlineExceeded as
// the cause: net/http reports context.Cause, so its errors are the ones
// a WithTimeout context gave, and failure still tells our deadline from
// the caller's by which of the two contexts ended.
func (c *Client) bound(parent context.Context, start time.Time, onSlow func()) *reqBound {
	b := &reqBound{deadline: start.Add(c.maxReq), onSlow: onSlow}
	if d, ok := parent.Deadline(); ok && d.Before(b.deadline) {
		// As context.WithTimeout: the caller's earlier deadline stands.
		b.deadline = d
	}
	b.Context, b.cancel = context.WithCancelCause(parent)
	first := c.maxReq
	if onSlow != nil && c.timeout < c.maxReq {
		first = c.timeout
	} else if onSlow == nil {
		b.slowed = true
	}
	b.mu.Lock()
	b.t = time.AfterFunc(first, b.fire)
	b.mu.Unlock()
	return b
}

// Deadline is the one net.Dialer bounds a dial by, as with WithTimeout.
func (b *reqBound) Deadline() (time.Time, bool) { return b.deadline, true }

func (b *reqBound) fire() {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	if !b.slowed {
		// Re-armed before OnSlow runs: a slow OnSlow must not push the
		// deadline back.
		b.slowed = true
		if rest := time.Until(b.deadline); rest > 0 {
			b.t.Reset(rest)
			b.mu.Unlock()
			b.onSlow()
			return
		}
		b.mu.Unlock()
		b.onSlow()
		b.cancel(context.DeadlineExceeded)
		return
	}
	b.mu.Unlock()
	b.cancel(context.DeadlineExceeded)
}

func (b *reqBound) stop() {
	b.mu.Lock()
	b.stopped = true
	b.t.Stop()
	b.mu.Unlock()
	b.cancel(context.Canceled)
}

// newRequest builds the POST. net/http re-sends a request by itself when
// a kept-alive connection fails before the answer and the request is
// "replayable": a body it can rewind (GetBody, or none at all) and an
// Idempotency-Key or X-Idempotency-Key header. The app may have acted on
// the first copy, and the caller, who decides every re-send, would see
// one request and one answer. So a body is given without GetBody, and an
// empty one, which net/http always counts as rewindable, is sent with
// the key's header under its lower-case name: the same header on the
// wire (names are case-insensitive, and HTTP/2 sends them so), but not
// the one net/http looks for. X-Idempotency-Key is the proxy's own and
// never comes from the message (isOwned).
func (c *Client) newRequest(ctx context.Context, r *Request, body *bytes.Reader) (*http.Request, error) {
	req, err := c.post(ctx, r.Path)
	if err != nil {
		return nil, err
	}
	if len(r.Body) > 0 {
		// io.NopCloser of a *bytes.Reader, exactly: net/http writes a
		// body it knows to be in memory behind the headers in one write,
		// and flushes the headers first for any other (a second write
		// and a second TCP segment per request; TestOneWritePerRequest).
		req.Body = io.NopCloser(body)
		req.ContentLength = int64(len(r.Body))
	}
	// Sized up front, to at most what setHeaders sets: the map would
	// otherwise grow twice per request, and a hint past what one group
	// holds (8) costs two more allocations for a map that never needs them.
	n := len(r.Meta) + len(r.MessageHeaders) + 2 // Content-Type, User-Agent
	if r.IdempotencyKey != "" {
		n++
	}
	if r.Attempt > 0 {
		n++
	}
	if c.basicAuth != "" {
		n++
	}
	if n > 8 {
		req.Header = make(http.Header, n)
	} // else NewRequestWithContext's empty map, whose one group holds them
	c.setHeaders(req.Header, r, n)
	if len(r.Body) == 0 {
		if v, ok := req.Header["Idempotency-Key"]; ok {
			delete(req.Header, "Idempotency-Key")
			req.Header["idempotency-key"] = v
		}
	}
	return req, nil
}

// post is http.NewRequestWithContext(ctx, POST, c.target(path), nil),
// the URL parsed once per path: on a hit the request is made with an
// empty URL, which parses to a fresh zero url.URL, and the cached one is
// copied into it, so no two requests share a *url.URL.
func (c *Client) post(ctx context.Context, path string) (*http.Request, error) {
	var u url.URL
	ok := false
	m := c.urls.m.Load()
	if m != nil {
		u, ok = (*m)[path]
	}
	if ok {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "", nil)
		if err != nil {
			return nil, err
		}
		*req.URL = u
		req.Host = u.Host
		return req, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.target(path), nil)
	if err != nil {
		return nil, err
	}
	c.urls.mu.Lock()
	defer c.urls.mu.Unlock()
	old := c.urls.m.Load()
	if old != nil && len(*old) >= maxCachedURLs {
		return req, nil
	}
	next := make(map[string]url.URL, 1)
	if old != nil {
		next = maps.Clone(*old)
	}
	next[path] = *req.URL
	c.urls.m.Store(&next)
	return req, nil
}

// sendTrace records whether any of the request was written, and on a
// connection used before: what tells a request the app cannot have seen
// from one it may be acting on.
// The ClientTrace is held inside it: one allocation for the two.
type sendTrace struct {
	wrote, reused atomic.Bool
	ct            httptrace.ClientTrace
}

func (s *sendTrace) trace() *httptrace.ClientTrace {
	s.ct.GotConn = func(i httptrace.GotConnInfo) { s.reused.Store(i.Reused) }
	s.ct.WroteHeaders = func() { s.wrote.Store(true) }
	return &s.ct
}

// classify reads at most maxResp bytes of the answer, closes it and decides.
func (c *Client) classify(parent, ctx context.Context, resp *http.Response) Result {
	code := resp.StatusCode
	res := Result{Status: code}
	// Indexed, not Header.Get: net/http stores a response's header names
	// canonical, and Get would canonicalise the constant on every message.
	if v := firstValue(resp.Header["Retry-After"]); v != "" {
		// Absent (most answers): parseRetryAfter says 0 without a clock.
		res.RetryAfter = parseRetryAfter(v, time.Now())
	}

	if code < 200 || code > 299 {
		// The body is of no use, but reading a short one to the end lets the
		// transport put the connection back into the pool.
		_, _ = io.CopyN(io.Discard, resp.Body, c.maxResp+1)
		resp.Body.Close()
		res.Outcome = Permanent
		if c.retry.Retryable(code) {
			res.Outcome = Retryable
		}
		res.Reason = statusReason(code)
		return res
	}

	buf := getBuffer()
	defer putBuffer(buf)
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, c.maxResp+1))
	// Closing a body not read to EOF closes the connection rather than
	// draining it: that is how an oversized answer is cut off.
	resp.Body.Close()
	res.Outcome, res.Reason = Success, statusReason(code)
	if err != nil || n > c.maxResp || !c.appStatus {
		// A 2xx is a success unless a complete body says otherwise: the
		// app acted, and retrying would act again. A body cut short or
		// too long to read can say nothing.
		return res
	}
	if o, reason, ok := appStatus(firstValue(resp.Header["Content-Type"]), buf.Bytes()); ok {
		res.Outcome, res.Reason = o, reason
	}
	return res
}

func firstValue(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// statusReasons holds Result.Reason for the statuses 100 to 599, made
// once: "status " + strconv.Itoa(code) was two allocations per message.
var statusReasons = func() (r [600]string) {
	for code := 100; code < len(r); code++ {
		r[code] = "status " + strconv.Itoa(code)
	}
	return r
}()

func statusReason(code int) string {
	if code >= 100 && code < len(statusReasons) {
		return statusReasons[code]
	}
	return "status " + strconv.Itoa(code)
}

// failure classifies an error that left no usable response. parent is the
// caller's context, ctx the per-request one derived from it: which of the
// two ended tells the caller's cancellation from our timeout.
func failure(parent, ctx context.Context, err error, prefix string) Result {
	if perr := parent.Err(); perr != nil {
		return Result{Outcome: Retryable, Reason: prefix + "cancelled", Err: fmt.Errorf("forward cancelled: %w", perr), MayBeRunning: true}
	}
	reason := transportReason(err)
	abandoned := ctx.Err() != nil
	if abandoned {
		reason = "no answer within app.max_request_time"
	}
	return Result{Outcome: Retryable, Reason: prefix + reason, Err: err,
		Unreachable:  reason == "connection refused" || reason == "socket missing",
		MayBeRunning: abandoned, Abandoned: abandoned}
}

// Probe GETs healthURL (absolute, or a path relative to Config.URL) through
// the same pool and reports nil for a 2xx. It is meant for gating
// consumption on the app being up: a native sidecar starts before its app.
func (c *Client) Probe(ctx context.Context, healthURL string) error {
	target, err := c.probeTarget(healthURL)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return fmt.Errorf("forward: probe: %w", redact(err))
	}
	req.Header.Set("User-Agent", c.userAgent)
	// app.url's credentials are for app.url's origin: a health_url
	// elsewhere (a shared health service, a typo) must not receive them.
	if c.basicAuth != "" && target.User == nil && c.sameOrigin(target) {
		req.Header.Set("Authorization", c.basicAuth)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("forward: probe: %w", redact(err))
	}
	_, _ = io.CopyN(io.Discard, resp.Body, c.maxResp+1)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("forward: probe %s: status %d", redactURL(target), resp.StatusCode)
	}
	return nil
}

func (c *Client) probeTarget(healthURL string) (*url.URL, error) {
	if healthURL == "" {
		return nil, errors.New("forward: probe: empty health URL")
	}
	raw := healthURL
	if raw[0] == '/' {
		raw = c.base + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("forward: probe: %w", redact(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("forward: probe: health URL must be a path or an http(s) URL with a host")
	}
	return u, nil
}

// sameOrigin reports whether u has the base URL's scheme, host and port
// (RFC 6454), a missing port being the scheme's default.
func (c *Client) sameOrigin(u *url.URL) bool {
	base, err := url.Parse(c.base)
	if err != nil {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(u.Scheme, base.Scheme) && strings.EqualFold(u.Hostname(), base.Hostname()) && port(u) == port(base)
}

// Close closes idle connections. In-flight requests are not interrupted;
// cancel their contexts for that.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// redact replaces the URL in a *url.Error by its scheme, host and path:
// userinfo and query may carry secrets, and errors end up in logs and
// dead-letter headers.
func redact(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	safe := "<redacted>"
	if u, perr := url.Parse(ue.URL); perr == nil {
		safe = redactURL(u)
	}
	return &url.Error{Op: ue.Op, URL: safe, Err: ue.Err}
}

func redactURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// A pooled buffer per 2xx answer: most answers are empty or tiny, but a
// worker may see a few KiB of JSON on every message.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer { return buffers.Get().(*bytes.Buffer) }

func putBuffer(b *bytes.Buffer) {
	if b.Cap() > 1<<20 {
		return // one huge answer must not pin memory in the pool
	}
	b.Reset()
	buffers.Put(b)
}
