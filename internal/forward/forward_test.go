package forward

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// received is what the app saw of one request.
type received struct {
	method, path, query, host string
	header                    http.Header
	body                      []byte
	contentLength             int64
}

// recordingApp answers 204 to everything and hands each request to the test.
func recordingApp(t *testing.T) (*httptest.Server, <-chan received) {
	t.Helper()
	ch := make(chan received, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("app: reading body: %v", err)
		}
		ch <- received{
			method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, host: r.Host,
			header: r.Header.Clone(), body: body, contentLength: r.ContentLength,
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

func newClient(t testing.TB, c Config) *Client {
	t.Helper()
	cl, err := New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func next(t *testing.T, ch <-chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the app received nothing")
		return received{}
	}
}

func TestDoSendsBodyByteForByte(t *testing.T) {
	big := make([]byte, 1<<20)
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	tests := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"json", []byte(`{"meta":{"id":"42"},"amount":"9.99"}`)},
		{"invalid utf-8 and nul", []byte{0xff, 0xfe, 0x00, 'a', 0xc3, 0x28, '\r', '\n', 0x80}},
		{"1 MiB random", big},
	}
	srv, got := recordingApp(t)
	c := newClient(t, Config{URL: srv.URL})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := c.Do(context.Background(), Request{Path: "/orders", Body: tt.body})
			if res.Outcome != Success || res.Status != http.StatusNoContent {
				t.Fatalf("result = %+v, want success 204", res)
			}
			r := next(t, got)
			if r.method != http.MethodPost || r.path != "/orders" {
				t.Errorf("request = %s %s, want POST /orders", r.method, r.path)
			}
			if !bytes.Equal(r.body, tt.body) {
				t.Errorf("body differs: got %d bytes, want %d", len(r.body), len(tt.body))
			}
			if r.contentLength != int64(len(tt.body)) {
				t.Errorf("Content-Length = %d, want %d (no chunking)", r.contentLength, len(tt.body))
			}
		})
	}
}

// writeCounter counts a connection's writes.
type writeCounter struct {
	net.Conn
	n *atomic.Int32
}

func (c writeCounter) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// A request goes out in one write, headers and body together: net/http
// flushes the headers on their own before any body it does not know to
// be in memory, which is a second write syscall, and a second TCP
// segment for the app to read, on every message.
func TestOneWritePerRequest(t *testing.T) {
	srv, got := recordingApp(t)
	c := newClient(t, Config{URL: srv.URL})
	var writes atomic.Int32
	dial := c.transport.DialContext
	c.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{conn, &writes}, nil
	}
	body := bytes.Repeat([]byte("x"), 256)
	for i := range 3 {
		writes.Store(0)
		res := c.Do(context.Background(), Request{Path: "/orders", Body: body, IdempotencyKey: "k" + strconv.Itoa(i), Attempt: 1,
			Meta: []Header{{Name: "X-Dedupe-Topic", Value: "orders"}, {Name: "X-Dedupe-Offset", Value: strconv.Itoa(i)}}})
		if res.Outcome != Success {
			t.Fatalf("request %d: %+v", i, res)
		}
		if r := next(t, got); !bytes.Equal(r.body, body) {
			t.Fatalf("request %d: body of %d bytes, want %d", i, len(r.body), len(body))
		}
		if n := writes.Load(); n != 1 {
			t.Errorf("request %d went out in %d writes, want 1", i, n)
		}
	}
}

func TestDoSetsHeaders(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name      string
		allowlist []string
		req       Request
		want      map[string]string
		absent    []string
	}{
		{
			name:   "content type defaults to octet-stream",
			want:   map[string]string{"Content-Type": "application/octet-stream", "User-Agent": DefaultUserAgent},
			absent: []string{"Idempotency-Key", "X-Dedupe-Attempt", "Accept-Encoding"},
		},
		{
			name: "content type, key and attempt",
			req:  Request{ContentType: "application/json; charset=utf-8", IdempotencyKey: "order-42", Attempt: 3},
			want: map[string]string{
				"Content-Type":     "application/json; charset=utf-8",
				"Idempotency-Key":  "order-42",
				"X-Dedupe-Attempt": "3",
			},
		},
		{
			name: "meta set verbatim",
			req: Request{Meta: []Header{
				{"X-Dedupe-Source", "orders-rabbit"}, {"X-Dedupe-Queue", "orders"},
				{"x-dedupe-topic", "payments"}, {"X-Dedupe-Partition", "0"},
				{"X-Dedupe-Offset", "17"}, {"X-Dedupe-Redelivered", "true"},
			}},
			want: map[string]string{
				"X-Dedupe-Source": "orders-rabbit", "X-Dedupe-Queue": "orders",
				"X-Dedupe-Topic": "payments", "X-Dedupe-Partition": "0",
				"X-Dedupe-Offset": "17", "X-Dedupe-Redelivered": "true",
			},
		},
		{
			name:      "allowlist is case-insensitive both ways",
			allowlist: []string{"X-Tenant", "x-region"},
			req:       Request{MessageHeaders: map[string]string{"x-tenant": "acme", "X-REGION": "eu", "X-Other": "no"}},
			want:      map[string]string{"X-Tenant": "acme", "X-Region": "eu"},
			absent:    []string{"X-Other"},
		},
		{
			name:   "trace context passes without allowlist",
			req:    Request{MessageHeaders: map[string]string{"traceparent": tp, "TraceState": "rojo=00f067aa0ba902b7", "baggage": "k=v"}},
			want:   map[string]string{"Traceparent": tp, "Tracestate": "rojo=00f067aa0ba902b7"},
			absent: []string{"Baggage"},
		},
		{
			name: "hop-by-hop and framing never, from message or meta",
			req: Request{
				Body: []byte("hello"),
				MessageHeaders: map[string]string{
					"Connection": "close", "Keep-Alive": "timeout=1", "Transfer-Encoding": "chunked",
					"Content-Length": "99", "Host": "evil.example", "Upgrade": "h2c", "TE": "trailers",
					"Trailer": "X-Sum", "Proxy-Authorization": "Basic eA==", "Expect": "100-continue",
				},
				Meta: []Header{{"Connection", "close"}, {"Upgrade", "websocket"}, {"Proxy-Connection", "x"}, {"Content-Length", "1"}},
			},
			absent: []string{"Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Te", "Trailer", "Proxy-Authorization", "Proxy-Connection", "Expect"},
		},
		{
			name:      "values with CR, LF or NUL are skipped, the request still goes",
			allowlist: []string{"X-Note", "X-Nul"},
			req: Request{
				MessageHeaders: map[string]string{"X-Note": "a\r\nX-Evil: 1", "X-Nul": "a\x00b", "traceparent": "x\ny"},
				Meta:           []Header{{"X-Dedupe-Queue", "q\nX-Evil2: 1"}, {"Bad Name", "v"}},
				ContentType:    "text/plain\r\nX-Evil3: 1",
			},
			want:   map[string]string{"Content-Type": "application/octet-stream"},
			absent: []string{"X-Note", "X-Nul", "X-Evil", "X-Evil2", "X-Evil3", "X-Dedupe-Queue", "Traceparent"},
		},
		{
			name: "message cannot forge what the proxy states",
			req: Request{
				IdempotencyKey: "order-42", Attempt: 2,
				Meta:           []Header{{"X-Dedupe-Queue", "orders"}, {"Idempotency-Key", "meta-forged"}},
				MessageHeaders: map[string]string{"Idempotency-Key": "forged", "X-Dedupe-Attempt": "99", "X-Dedupe-Queue": "forged", "traceparent": tp},
			},
			want: map[string]string{"Idempotency-Key": "order-42", "X-Dedupe-Attempt": "2", "X-Dedupe-Queue": "orders", "Traceparent": tp},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, got := recordingApp(t)
			c := newClient(t, Config{URL: srv.URL, HeaderAllowlist: tt.allowlist})
			if res := c.Do(context.Background(), tt.req); res.Outcome != Success {
				t.Fatalf("result = %+v, want success", res)
			}
			r := next(t, got)
			for k, v := range tt.want {
				if vs := r.header.Values(k); len(vs) != 1 || vs[0] != v {
					t.Errorf("header %s = %q, want [%q]", k, vs, v)
				}
			}
			for _, k := range tt.absent {
				if vs := r.header.Values(k); len(vs) > 0 {
					t.Errorf("header %s = %q, want absent", k, vs)
				}
			}
			if want := strings.TrimPrefix(srv.URL, "http://"); r.host != want {
				t.Errorf("Host = %q, want %q", r.host, want)
			}
			if r.contentLength != int64(len(tt.req.Body)) {
				t.Errorf("Content-Length = %d, want %d", r.contentLength, len(tt.req.Body))
			}
		})
	}
}

func TestDoBasicAuthFromURLAndPathJoin(t *testing.T) {
	srv, got := recordingApp(t)
	u := strings.Replace(srv.URL, "http://", "http://svc:p%40ss@", 1) + "/api/"
	c := newClient(t, Config{URL: u})
	wantHost := strings.TrimPrefix(srv.URL, "http://")
	// Twice: the second round is sent with the URLs parsed in the first.
	for round := range 2 {
		for _, tt := range []struct{ path, wantPath, wantQuery string }{
			{"", "/api", ""},
			{"/orders", "/api/orders", ""},
			{"orders", "/api/orders", ""},
			{"/orders?src=rabbit", "/api/orders", "src=rabbit"},
			{"/orders?src=kafka", "/api/orders", "src=kafka"},
		} {
			if res := c.Do(context.Background(), Request{Path: tt.path}); res.Outcome != Success {
				t.Fatalf("round %d path %q: result = %+v", round, tt.path, res)
			}
			r := next(t, got)
			if r.path != tt.wantPath || r.query != tt.wantQuery || r.host != wantHost {
				t.Errorf("round %d path %q: app saw %s%s?%s, want %s%s?%s", round, tt.path, r.host, r.path, r.query, wantHost, tt.wantPath, tt.wantQuery)
			}
			req := &http.Request{Header: r.header}
			if user, pass, ok := req.BasicAuth(); !ok || user != "svc" || pass != "p@ss" {
				t.Errorf("basic auth = %q %q %v, want svc p@ss", user, pass, ok)
			}
		}
	}
}

func TestDoRejectsInvalidRequest(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	c := newClient(t, Config{URL: srv.URL})
	for _, r := range []Request{
		{IdempotencyKey: "a\r\nX-Evil: 1"},
		{Path: "/%zz?token=s3cret"},
		{Path: "/%zz?token=s3cret"}, // a path that failed is not remembered as good
	} {
		res := c.Do(context.Background(), r)
		if res.Outcome != Permanent || !errors.Is(res.Err, ErrInvalidRequest) {
			t.Errorf("Do(%+v) = %+v, want permanent ErrInvalidRequest", r, res)
		}
		if res.Err != nil && strings.Contains(res.Err.Error(), "s3cret") {
			t.Errorf("error leaks the query: %v", res.Err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("app received %d requests, want 0", n)
	}
}

// statusApp answers the status given in ?code=, with a Location for 3xx.
func statusApp(t *testing.T, followed *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/followed" {
			followed.Add(1)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		if code/100 == 3 {
			w.Header().Set("Location", "/followed")
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "answer %d", code)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestDoClassifiesStatus(t *testing.T) {
	var followed atomic.Int32
	srv := statusApp(t, &followed)
	tests := []struct {
		rules []string
		code  int
		want  Outcome
	}{
		{nil, 200, Success},
		{nil, 201, Success},
		{nil, 204, Success},
		{nil, 302, Permanent},
		{nil, 400, Permanent},
		{nil, 404, Permanent},
		{nil, 408, Retryable},
		{nil, 409, Permanent},
		{nil, 429, Retryable},
		{nil, 500, Retryable},
		{nil, 503, Retryable},
		// Knative-style: 404 retries; 5xx removed, so only 503 of them does.
		{[]string{"404", "503"}, 404, Retryable},
		{[]string{"404", "503"}, 503, Retryable},
		{[]string{"404", "503"}, 500, Permanent},
		{[]string{"404", "503"}, 429, Permanent},
		{[]string{"404", "503"}, 408, Permanent},
		{[]string{"404", "503"}, 200, Success},
		{[]string{"4XX"}, 400, Retryable},
		{[]string{"4XX"}, 500, Permanent},
		{[]string{"3xx"}, 307, Retryable},
	}
	clients := map[string]*Client{}
	for _, tt := range tests {
		key := strings.Join(tt.rules, ",")
		name := fmt.Sprintf("rules=%s/%d", cmpStr(key, "default"), tt.code)
		t.Run(name, func(t *testing.T) {
			c := clients[key]
			if c == nil {
				c = newClient(t, Config{URL: srv.URL, RetryStatuses: tt.rules})
				clients[key] = c
			}
			res := c.Do(context.Background(), Request{Path: "/?code=" + strconv.Itoa(tt.code), Body: []byte("x")})
			if res.Outcome != tt.want || res.Status != tt.code {
				t.Errorf("result = %v %d (%q), want %v %d", res.Outcome, res.Status, res.Reason, tt.want, tt.code)
			}
			if want := "status " + strconv.Itoa(tt.code); res.Reason != want {
				t.Errorf("reason = %q, want %q", res.Reason, want)
			}
			if res.Err != nil {
				t.Errorf("err = %v, want nil with a response", res.Err)
			}
		})
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("a redirect was followed %d times; a POST must never become a GET", n)
	}
}

func cmpStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func TestDoHonoursDaprStatus(t *testing.T) {
	tests := []struct {
		name        string
		code        int
		contentType string
		body        string
		want        Outcome
		reason      string
	}{
		{"SUCCESS", 200, "application/json", `{"status":"SUCCESS"}`, Success, "status 200"},
		{"success lower-case", 200, "application/json", `{"status":"success"}`, Success, "status 200"},
		{"RETRY", 200, "application/json", `{"status":"RETRY"}`, Retryable, "app status RETRY"},
		{"retry mixed case", 200, "application/json; charset=utf-8", `{"status":"Retry"}`, Retryable, "app status RETRY"},
		{"DROP", 200, "application/json", `{"status":"DROP","message":"bad invoice"}`, Permanent, "app status DROP"},
		// Only Dapr's own words change a 2xx: what most REST handlers
		// answer is a success, not a retry (a retry is a second effect).
		{"ok is success", 200, "application/json", `{"status":"ok"}`, Success, "status 200"},
		{"created is success", 201, "application/json", `{"status":"created","id":7}`, Success, "status 201"},
		{"Accepted is success", 202, "application/json", `{"status":"Accepted"}`, Success, "status 202"},
		{"unknown word is success", 200, "application/json", `{"status":"PENDING"}`, Success, "status 200"},
		{"empty status is success", 200, "application/json", `{"status":""}`, Success, "status 200"},
		{"no status field", 200, "application/json", `{"ok":true}`, Success, "status 200"},
		{"status not a string", 200, "application/json", `{"status":1}`, Success, "status 200"},
		{"status not top-level", 200, "application/json", `{"data":{"status":"DROP"}}`, Success, "status 200"},
		{"invalid JSON", 200, "application/json", `{"status":"DROP"`, Success, "status 200"},
		{"JSON array", 200, "application/json", `[{"status":"DROP"}]`, Success, "status 200"},
		{"key matched case-insensitively like daprd", 200, "application/json", `{"Status":"DROP"}`, Permanent, "app status DROP"},
		{"body starting with { without JSON type", 200, "text/plain", ` {"status":"DROP"}`, Permanent, "app status DROP"},
		{"+json media type", 202, "application/cloudevents+json", `{"status":"RETRY"}`, Retryable, "app status RETRY"},
		{"plain text RETRY is not a status", 200, "text/plain", `RETRY`, Success, "status 200"},
		{"no body", 204, "", ``, Success, "status 204"},
		{"non-2xx body ignored", 500, "application/json", `{"status":"SUCCESS"}`, Retryable, "status 500"},
		{"non-2xx body ignored, permanent", 400, "application/json", `{"status":"RETRY"}`, Permanent, "status 400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.WriteHeader(tt.code)
				_, _ = io.WriteString(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			res := newClient(t, Config{URL: srv.URL}).Do(context.Background(), Request{})
			if res.Outcome != tt.want || res.Reason != tt.reason || res.Status != tt.code {
				t.Errorf("result = %v %d %q, want %v %d %q", res.Outcome, res.Status, res.Reason, tt.want, tt.code, tt.reason)
			}
		})
	}
}

// dapr_status: false makes every 2xx a success, Dapr's words included.
func TestDoIgnoreAppStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"`+r.URL.Query().Get("s")+`"}`)
	}))
	t.Cleanup(srv.Close)
	for _, ignore := range []bool{false, true} {
		c := newClient(t, Config{URL: srv.URL, IgnoreAppStatus: ignore})
		for word, honoured := range map[string]Outcome{"RETRY": Retryable, "DROP": Permanent} {
			want := honoured
			if ignore {
				want = Success
			}
			if res := c.Do(context.Background(), Request{Path: "/?s=" + word}); res.Outcome != want {
				t.Errorf("IgnoreAppStatus %v, status %s: outcome %v, want %v", ignore, word, res.Outcome, want)
			}
		}
	}
}

func TestDoReportsRetryAfter(t *testing.T) {
	tests := []struct {
		name     string
		value    string
		min, max time.Duration
	}{
		{"absent", "", 0, 0},
		{"seconds", "120", 120 * time.Second, 120 * time.Second},
		{"zero", "0", 0, 0},
		{"HTTP-date", time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat), 85 * time.Second, 91 * time.Second},
		{"HTTP-date in the past", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0, 0},
		{"capped", "36000", MaxRetryAfter, MaxRetryAfter},
		{"HTTP-date capped", time.Now().Add(48 * time.Hour).UTC().Format(http.TimeFormat), MaxRetryAfter, MaxRetryAfter},
		{"garbage", "soon", 0, 0},
		{"negative", "-5", 0, 0},
		{"fraction", "1.5", 0, 0},
	}
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusOK} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%d/%s", code, tt.name), func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if tt.value != "" {
						w.Header().Set("Retry-After", tt.value)
					}
					w.WriteHeader(code)
				}))
				t.Cleanup(srv.Close)
				res := newClient(t, Config{URL: srv.URL}).Do(context.Background(), Request{})
				if res.Status != code {
					t.Fatalf("status = %d, want %d", res.Status, code)
				}
				if res.RetryAfter < tt.min || res.RetryAfter > tt.max {
					t.Errorf("RetryAfter = %s, want in [%s, %s]", res.RetryAfter, tt.min, tt.max)
				}
			})
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{" 30 ", 30 * time.Second},
		{"599", 599 * time.Second},
		{"600", MaxRetryAfter},
		{"99999999999999999999999", MaxRetryAfter},
		{"Sun, 01 Mar 2026 12:02:00 GMT", 2 * time.Minute},   // IMF-fixdate
		{"Sunday, 01-Mar-26 12:00:30 GMT", 30 * time.Second}, // RFC 850
		{"Sun Mar  1 12:00:05 2026", 5 * time.Second},        // asctime
		{"Sun, 01 Mar 2026 11:59:00 GMT", 0},                 // past
		{"Sun, 01 Mar 2026 13:00:00 GMT", MaxRetryAfter},     // beyond the cap
		{"Sun, 01 Mar 2026 12:02:00 +0000", 0},               // not an HTTP-date
		{"0x10", 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// A request slower than Timeout is not given up: OnSlow is told, the
// late answer counts. Only MaxRequestTime gives up on it, and then the
// app may still be running it.
func TestDoSlowIsWaitedFor(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("after"))
		if r.URL.Path == "/slow-body" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(d):
		}
		_, _ = io.WriteString(w, "done")
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, Config{URL: srv.URL, Timeout: 100 * time.Millisecond, MaxRequestTime: 2 * time.Second})
	tests := []struct {
		name, path string
		slow       bool
		want       Outcome
		abandoned  bool
		reason     string
		status     int
	}{
		{"fast", "/?after=0s", false, Success, false, "status 200", 200},
		{"late answer", "/?after=400ms", true, Success, false, "status 200", 200},
		{"late body", "/slow-body?after=400ms", true, Success, false, "status 200", 200},
		{"no answer", "/?after=1h", true, Retryable, true, "no answer within app.max_request_time", 0},
		// The status line said 2xx: the app acted, whatever the body.
		{"body never ends", "/slow-body?after=1h", true, Success, false, "status 200", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var slow atomic.Int32
			res := c.Do(context.Background(), Request{Path: tt.path, OnSlow: func() { slow.Add(1) }})
			if res.Outcome != tt.want || res.Reason != tt.reason || res.Status != tt.status || res.Abandoned != tt.abandoned || res.MayBeRunning != tt.abandoned {
				t.Errorf("result = %+v, want %v %q status %d abandoned %v", res, tt.want, tt.reason, tt.status, tt.abandoned)
			}
			if got := slow.Load(); res.Slow != tt.slow || (got == 1) != tt.slow || got > 1 {
				t.Errorf("Slow = %v, OnSlow called %d times; want slow %v", res.Slow, got, tt.slow)
			}
		})
	}
}

// The one timer behind Timeout and MaxRequestTime: whether OnSlow is set
// or not, however long OnSlow takes, and when the two are equal, the
// request is given up at MaxRequestTime as a context deadline, OnSlow
// told exactly once.
func TestDoAbandonsAtMaxRequestTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	const maxReq = 300 * time.Millisecond
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name    string
		timeout time.Duration
		onSlow  func(*atomic.Int32) func()
		slow    int32
	}{
		{"no OnSlow", 50 * time.Millisecond, func(*atomic.Int32) func() { return nil }, 0},
		{"OnSlow", 50 * time.Millisecond, func(n *atomic.Int32) func() { return func() { n.Add(1) } }, 1},
		// An OnSlow that blocks must not hold the deadline back.
		{"blocking OnSlow", 50 * time.Millisecond, func(n *atomic.Int32) func() {
			return func() { n.Add(1); <-release }
		}, 1},
		{"Timeout equal to MaxRequestTime", maxReq, func(n *atomic.Int32) func() { return func() { n.Add(1) } }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, Config{URL: srv.URL, Timeout: tt.timeout, MaxRequestTime: maxReq})
			var slow atomic.Int32
			done := make(chan Result, 1)
			go func() { done <- c.Do(context.Background(), Request{OnSlow: tt.onSlow(&slow)}) }()
			var res Result
			select {
			case res = <-done:
			case <-time.After(maxReq + 5*time.Second):
				t.Fatalf("Do still running %v after MaxRequestTime", 5*time.Second)
			}
			if res.Outcome != Retryable || res.Reason != "no answer within app.max_request_time" || !res.Abandoned || !res.MayBeRunning || !res.Slow || res.Unreachable {
				t.Errorf("result = %+v, want retryable, abandoned, slow", res)
			}
			if !errors.Is(res.Err, context.DeadlineExceeded) {
				t.Errorf("Err = %v, want it to wrap context.DeadlineExceeded", res.Err)
			}
			if res.Duration < maxReq || res.Duration > maxReq+time.Second {
				t.Errorf("Duration = %v, want about %v", res.Duration, maxReq)
			}
			// OnSlow runs on the timer's goroutine: give a late one time
			// to show up before counting.
			time.Sleep(50 * time.Millisecond)
			if got := slow.Load(); got != tt.slow {
				t.Errorf("OnSlow called %d times, want %d", got, tt.slow)
			}
		})
	}
}

// net/http re-sends a POST by itself when the request has a rewindable
// body and an Idempotency-Key and a kept-alive connection fails after the
// app read it. The proxy must see that failure and decide itself: the
// app got the request once, and the result says it may still run it.
func TestDoNeverResendsByItself(t *testing.T) {
	for _, body := range []string{"order-1", ""} {
		t.Run(fmt.Sprintf("body %q", body), func(t *testing.T) {
			var seen atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				if seen.Add(1) == 1 {
					return // the first request on the connection is answered
				}
				// Later ones: read, acted on, then the connection breaks.
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
			}))
			t.Cleanup(srv.Close)
			c := newClient(t, Config{URL: srv.URL})
			if res := c.Do(context.Background(), Request{Body: []byte(body), IdempotencyKey: "k1"}); res.Outcome != Success {
				t.Fatalf("first: %+v", res)
			}
			res := c.Do(context.Background(), Request{Body: []byte(body), IdempotencyKey: "k2"})
			if got := seen.Load(); got != 2 {
				t.Fatalf("the app saw %d requests, want 2: the transport re-sent one by itself", got)
			}
			if res.Outcome != Retryable || !res.MayBeRunning {
				t.Errorf("result = %+v, want retryable and maybe still running (the app read it)", res)
			}
		})
	}
}

// A kept-alive connection the app closed while idle is found out before
// any of the request is written: that request is sent again at once on
// a new connection, since the app cannot have seen it.
func TestDoRetriesUnwrittenOnStaleConnection(t *testing.T) {
	var seen atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		seen.Add(1)
	}))
	srv.Config.IdleTimeout = 50 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	c := newClient(t, Config{URL: srv.URL})
	for i := range 3 {
		if res := c.Do(context.Background(), Request{Body: []byte("x"), IdempotencyKey: "k"}); res.Outcome != Success {
			t.Fatalf("request %d: %+v", i, res)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := seen.Load(); got != 3 {
		t.Errorf("the app saw %d requests, want 3", got)
	}
}

// A 2xx whose body is cut short is a success: the app said it acted.
func TestDo2xxWithCutBodyIsSuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"status\":")
		buf.Flush()
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	res := newClient(t, Config{URL: srv.URL}).Do(context.Background(), Request{Body: []byte("x")})
	if res.Outcome != Success || res.Status != 200 {
		t.Fatalf("result = %+v, want success", res)
	}
}

func TestDoCallerCancel(t *testing.T) {
	started := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, Config{URL: srv.URL, Timeout: time.Minute})

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	res := c.Do(ctx, Request{})
	if res.Outcome != Retryable || res.Reason != "cancelled" || !errors.Is(res.Err, context.Canceled) || !res.MayBeRunning {
		t.Errorf("in flight: result = %+v, want retryable cancelled wrapping context.Canceled, the app maybe still running it", res)
	}

	res = c.Do(ctx, Request{})
	if res.Outcome != Retryable || res.Reason != "cancelled" || !errors.Is(res.Err, context.Canceled) {
		t.Errorf("already cancelled: result = %+v, want retryable cancelled", res)
	}

	// A deadline of the caller's own is the caller's, not our timeout.
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	res = c.Do(dctx, Request{})
	if res.Outcome != Retryable || res.Reason != "cancelled" || !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Errorf("caller deadline: result = %+v, want retryable cancelled wrapping DeadlineExceeded", res)
	}
}

func TestDoConnectionRefusedRedactsURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	c := newClient(t, Config{URL: "http://svc:s3cret@" + addr + "/base"})
	res := c.Do(context.Background(), Request{Path: "/orders?token=t0ken"})
	if res.Outcome != Retryable || res.Reason != "connection refused" || res.Status != 0 || res.Err == nil || !res.Unreachable || res.MayBeRunning {
		t.Fatalf("result = %+v, want retryable, unreachable, connection refused", res)
	}
	msg := res.Err.Error() + " " + res.Reason
	for _, secret := range []string{"s3cret", "svc", "t0ken", "token"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error %q leaks %q", msg, secret)
		}
	}
	if !strings.Contains(msg, addr+"/base/orders") {
		t.Errorf("error %q should still name host and path", msg)
	}
}

func TestDoConnectionReset(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_ = conn.(*net.TCPConn).SetLinger(0) // RST rather than FIN
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	res := newClient(t, Config{URL: srv.URL}).Do(context.Background(), Request{Body: []byte("x")})
	if res.Outcome != Retryable || res.Status != 0 || res.Err == nil {
		t.Fatalf("result = %+v, want retryable without status", res)
	}
	if res.Reason != "connection reset" && res.Reason != "connection closed" {
		t.Errorf("reason = %q, want connection reset or closed", res.Reason)
	}
}

func TestDoUnixSocket(t *testing.T) {
	dir := shortTempDir(t)
	socket := filepath.Join(dir, "app.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan received, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{path: r.URL.Path, host: r.Host, body: body}
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)

	c := newClient(t, Config{URL: "http://app.local", Socket: socket})
	res := c.Do(context.Background(), Request{Path: "/orders", Body: []byte("via socket")})
	if res.Outcome != Success {
		t.Fatalf("result = %+v, want success", res)
	}
	r := next(t, got)
	if r.path != "/orders" || r.host != "app.local" || string(r.body) != "via socket" {
		t.Errorf("app saw %+v", r)
	}
	if err := c.Probe(context.Background(), "/healthz"); err != nil {
		t.Errorf("Probe over the socket: %v", err)
	}

	missing := newClient(t, Config{URL: "http://app.local", Socket: filepath.Join(dir, "absent.sock")})
	res = missing.Do(context.Background(), Request{})
	if res.Outcome != Retryable || res.Reason != "socket missing" {
		t.Errorf("missing socket: result = %+v, want retryable socket missing", res)
	}
}

// shortTempDir makes a short directory: t.TempDir() can exceed the 108
// bytes a Unix socket path may have.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "fwd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// connCounter counts the TCP connections an httptest server accepts.
func connCounter(srv *httptest.Server) *atomic.Int32 {
	var n atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

func TestDoCutsOffLargeResponse(t *testing.T) {
	const size = 50 << 20
	for _, code := range []int{http.StatusOK, http.StatusInternalServerError} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			var written atomic.Int64
			done := make(chan struct{}, 2)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/small" {
					return
				}
				defer func() { done <- struct{}{} }()
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", strconv.Itoa(size))
				w.WriteHeader(code)
				chunk := bytes.Repeat([]byte("{"), 32<<10)
				for written.Load() < size {
					n, err := w.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			}))
			conns := connCounter(srv)
			srv.Start()
			t.Cleanup(srv.Close)
			c := newClient(t, Config{URL: srv.URL})

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			res := c.Do(context.Background(), Request{})
			runtime.ReadMemStats(&after)
			if res.Status != code || res.Outcome == 0 || res.Err != nil {
				t.Fatalf("result = %+v, want status %d", res, code)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
				t.Errorf("Do allocated %d MiB for a %d MiB answer; it must read only MaxResponseBytes", alloc>>20, size>>20)
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the app is still writing: the client did not close the connection")
			}
			t.Logf("the app wrote %d KiB of %d MiB; Do allocated %d KiB", written.Load()>>10, size>>20, (after.TotalAlloc-before.TotalAlloc)>>10)
			// Whatever the kernel's socket buffers took is written; the rest
			// must not have been.
			if w := written.Load(); w > 24<<20 {
				t.Errorf("the app wrote %d MiB before the client closed; want far less than %d MiB", w>>20, size>>20)
			}
			// The cut-off connection must not be reused.
			if res := c.Do(context.Background(), Request{Path: "/small"}); res.Outcome != Success {
				t.Fatalf("follow-up: %+v", res)
			}
			if n := conns.Load(); n != 2 {
				t.Errorf("connections = %d, want 2 (the oversized answer's one closed)", n)
			}
		})
	}
}

func TestDoDrainsShortResponseForReuse(t *testing.T) {
	for _, code := range []int{http.StatusOK, http.StatusServiceUnavailable, http.StatusNotFound} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			body := bytes.Repeat([]byte("a"), 32<<10)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(code)
				_, _ = w.Write(body)
			}))
			conns := connCounter(srv)
			srv.Start()
			t.Cleanup(srv.Close)
			c := newClient(t, Config{URL: srv.URL})
			for range 20 {
				if res := c.Do(context.Background(), Request{Body: []byte("x")}); res.Status != code {
					t.Fatalf("result = %+v", res)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("connections = %d for 20 requests, want 1", n)
			}
		})
	}
}

func TestDoReusesConnections(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		conns := connCounter(srv)
		srv.Start()
		t.Cleanup(srv.Close)
		c := newClient(t, Config{URL: srv.URL})
		for i := range 200 {
			if res := c.Do(context.Background(), Request{Body: []byte("message " + strconv.Itoa(i))}); res.Outcome != Success {
				t.Fatalf("request %d: %+v", i, res)
			}
		}
		if n := conns.Load(); n > 2 {
			t.Errorf("200 sequential requests opened %d connections, want 1 or 2", n)
		}
	})
	t.Run("parallel", func(t *testing.T) {
		const workers = 16
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		conns := connCounter(srv)
		srv.Start()
		t.Cleanup(srv.Close)
		c := newClient(t, Config{URL: srv.URL, MaxConns: workers})
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range 50 {
					if res := c.Do(context.Background(), Request{Body: []byte("x")}); res.Outcome != Success {
						t.Errorf("result = %+v", res)
						return
					}
				}
			})
		}
		wg.Wait()
		// Go's default of 2 idle connections per host would open hundreds.
		if n := conns.Load(); n > 2*workers {
			t.Errorf("%d workers × 50 requests opened %d connections, want at most %d", workers, n, 2*workers)
		}
	})
}

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("probe method = %s, want GET", r.Method)
		}
		switch r.URL.Path {
		case "/healthz":
			_, _ = io.WriteString(w, "ok")
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()

	c := newClient(t, Config{URL: strings.Replace(srv.URL, "http://", "http://u:s3cret@", 1)})
	tests := []struct {
		name, url, wantErr string
	}{
		{"relative healthy", "/healthz", ""},
		{"absolute healthy", srv.URL + "/healthz", ""},
		{"unhealthy", "/starting?token=t0ken", "status 503"},
		{"refused", "http://" + closed + "/healthz?token=t0ken", "connection refused"},
		{"empty", "", "empty"},
		{"not http", "ftp://host/healthz", "http(s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Probe(context.Background(), tt.url)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Probe = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Probe = %v, want error containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "t0ken") {
				t.Errorf("Probe error leaks a secret: %v", err)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	valid := Config{URL: "http://127.0.0.1:8080"}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string // substrings, all required
	}{
		{"empty URL", func(c *Config) { c.URL = "" }, []string{"URL: is empty"}},
		{"no scheme", func(c *Config) { c.URL = "localhost:8080" }, []string{"URL", `scheme "localhost"`}},
		{"ftp", func(c *Config) { c.URL = "ftp://host" }, []string{`scheme "ftp"`}},
		{"no host", func(c *Config) { c.URL = "http:///orders" }, []string{"no host"}},
		{"query", func(c *Config) { c.URL = "http://host/?token=x" }, []string{"query"}},
		{"fragment", func(c *Config) { c.URL = "http://host/#x" }, []string{"fragment"}},
		{"unparsable, secret not echoed", func(c *Config) { c.URL = "http://u:s3cret@host/%zz" }, []string{"URL: not a URL"}},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, []string{"Timeout"}},
		{"negative max conns", func(c *Config) { c.MaxConns = -1 }, []string{"MaxConns"}},
		{"negative max response", func(c *Config) { c.MaxResponseBytes = -1 }, []string{"MaxResponseBytes"}},
		{"bad status rule", func(c *Config) { c.RetryStatuses = []string{"5xx", "50"} }, []string{`RetryStatuses: status rule "50"`}},
		{"2xx cannot retry", func(c *Config) { c.RetryStatuses = []string{"2xx"} }, []string{`"2xx"`}},
		{"hop-by-hop allow-listed", func(c *Config) { c.HeaderAllowlist = []string{"X-Ok", "Connection", "proxy-authorization"} },
			[]string{`"Connection"`, `"proxy-authorization"`, "hop-by-hop"}},
		{"owned header allow-listed", func(c *Config) { c.HeaderAllowlist = []string{"X-Dedupe-Attempt", "idempotency-key"} },
			[]string{`"X-Dedupe-Attempt"`, `"idempotency-key"`, "set by dedupe-proxy"}},
		{"bad header name", func(c *Config) { c.HeaderAllowlist = []string{"X Tenant"} }, []string{`"X Tenant"`}},
		{"bad user agent", func(c *Config) { c.UserAgent = "a\r\nb" }, []string{"UserAgent"}},
		{"every problem at once", func(c *Config) { c.URL = ""; c.Timeout = -1; c.RetryStatuses = []string{"abc"} },
			[]string{"URL", "Timeout", `"abc"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mutate(&c)
			cl, err := New(c)
			if err == nil {
				cl.Close()
				t.Fatal("New accepted a bad config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error leaks the URL's password: %v", err)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	c := newClient(t, Config{URL: "https://app:8443/"})
	if c.timeout != DefaultTimeout || c.maxResp != DefaultMaxResponseBytes || c.userAgent != DefaultUserAgent {
		t.Errorf("defaults: timeout %s, maxResp %d, userAgent %q", c.timeout, c.maxResp, c.userAgent)
	}
	if c.transport.MaxIdleConnsPerHost != DefaultMaxConns || c.transport.MaxIdleConns != DefaultMaxConns {
		t.Errorf("pool: MaxIdleConns %d, MaxIdleConnsPerHost %d, want %d", c.transport.MaxIdleConns, c.transport.MaxIdleConnsPerHost, DefaultMaxConns)
	}
	if !c.transport.DisableCompression || c.transport.Proxy != nil || c.transport.IdleConnTimeout != time.Second {
		t.Error("transport: want compression off, no proxy, 1s idle timeout (below the app servers' own)")
	}
	if c.transport.Protocols.HTTP2() || !c.transport.Protocols.HTTP1() {
		t.Error("transport: want HTTP/1.1 only")
	}
	for code, want := range map[int]bool{500: true, 599: true, 408: true, 429: true, 404: false, 400: false, 302: false} {
		if got := c.retry.Retryable(code); got != want {
			t.Errorf("default rules: Retryable(%d) = %v, want %v", code, got, want)
		}
	}
	if c.base != "https://app:8443" {
		t.Errorf("base = %q", c.base)
	}
}

func TestParseStatusRules(t *testing.T) {
	r, err := ParseStatusRules([]string{" 5XX ", "404", "308"})
	if err != nil {
		t.Fatal(err)
	}
	for code, want := range map[int]bool{500: true, 503: true, 404: true, 308: true, 400: false, 429: false, 200: false, 0: false, 999: false, -500: false} {
		if got := r.Retryable(code); got != want {
			t.Errorf("Retryable(%d) = %v, want %v", code, got, want)
		}
	}
	if r, err := ParseStatusRules(nil); err != nil || r.Retryable(503) {
		t.Errorf("ParseStatusRules(nil) = %v, %v; want no rule, nil", r, err)
	}
	for _, bad := range []string{"", "50", "5000", "2xx", "1xx", "600", "6xx", "x5x", "5x3", "+50", "abc", "２00"} {
		_, err := ParseStatusRules([]string{"503", bad})
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ParseStatusRules(%q) = %v, want an error naming it", bad, err)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Success: "success", Retryable: "retryable", Permanent: "permanent", 0: "unknown"} {
		if got := o.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(o), got, want)
		}
	}
}

func BenchmarkDo(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	c := newClient(b, Config{URL: srv.URL, MaxConns: 64, HeaderAllowlist: []string{"X-Tenant"}})
	body := bytes.Repeat([]byte("x"), 1024)
	req := Request{
		Path: "/orders", Body: body, ContentType: "application/json", IdempotencyKey: "order-42", Attempt: 1,
		Meta:           []Header{{"X-Dedupe-Source", "rabbitmq"}, {"X-Dedupe-Queue", "orders"}, {"X-Dedupe-Redelivered", "false"}},
		MessageHeaders: map[string]string{"x-tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res := c.Do(context.Background(), req); res.Outcome != Success {
				b.Errorf("result = %+v", res)
				return
			}
		}
	})
}

// TestProbeCredentialsStayWithTheirOrigin: app.url's basic-auth
// credentials go to app.url's own origin only; a health_url on another
// origin (another port is another origin) is probed without them.
func TestProbeCredentialsStayWithTheirOrigin(t *testing.T) {
	auth := func(got *atomic.Value) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got.Store(r.Header.Get("Authorization"))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	var appAuth, otherAuth atomic.Value
	app, other := auth(&appAuth), auth(&otherAuth)
	c := newClient(t, Config{URL: strings.Replace(app.URL, "http://", "http://u:s3cret@", 1) + "/base"})
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:s3cret"))

	for _, healthURL := range []string{"/healthz", app.URL + "/healthz", strings.Replace(app.URL, "http://", "HTTP://", 1) + "/healthz"} {
		appAuth.Store("")
		if err := c.Probe(context.Background(), healthURL); err != nil {
			t.Fatalf("Probe(%s) = %v", healthURL, err)
		}
		if got := appAuth.Load(); got != want {
			t.Errorf("Probe(%s) on app.url's origin sent Authorization %q, want %q", healthURL, got, want)
		}
	}
	otherLocalhost := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	appLocalhost := strings.Replace(app.URL, "127.0.0.1", "localhost", 1)
	for _, healthURL := range []string{other.URL + "/healthz", otherLocalhost + "/healthz", appLocalhost + "/healthz", strings.Replace(app.URL, "http://", "https://", 1) + "/healthz"} {
		otherAuth.Store("")
		appAuth.Store("")
		_ = c.Probe(context.Background(), healthURL) // https to an http server fails; what was sent is the point
		if got := otherAuth.Load().(string) + appAuth.Load().(string); got != "" {
			t.Errorf("Probe(%s), another origin than app.url, sent Authorization %q", healthURL, got)
		}
	}
}

func TestStatusReason(t *testing.T) {
	for _, code := range []int{-1, 0, 99, 100, 200, 204, 429, 503, 599, 600, 999, 1000} {
		if got, want := statusReason(code), "status "+strconv.Itoa(code); got != want {
			t.Errorf("statusReason(%d) = %q, want %q", code, got, want)
		}
	}
}
