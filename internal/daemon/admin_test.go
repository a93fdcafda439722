package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// The review's case: DELETE /v1/keys/a//b was cleaned and redirected (307,
// method kept) to /v1/keys/a/b, and a client following it forgot a/b. Each
// odd path names exactly the key it spells; a/b stays done, in Redis.
func TestAdminOddKeyPathForgetsOnlyItsKey(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { withAdmin(c); c.Admin.Token = "tok" })
	p := h.start()
	ctx := context.Background()
	if _, err := p.d.Store().Claim(ctx, storedKey("a/b"), "t1", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.d.Store().Commit(ctx, storedKey("a/b"), "t1", time.Hour); err != nil {
		t.Fatal(err)
	}
	// http.DefaultClient follows redirects, as curl -L and most SDKs do.
	for _, tc := range []struct{ path, key string }{
		{"/v1/keys/a//b", "a//b"},
		{"/v1/keys/a/./b", "a/./b"},
		{"/v1/keys/./a/b", "./a/b"},
		{"/v1/keys/c/../a/b", "c/../a/b"},
		{"/v1/keys/../x", "../x"},
		{"/v1/keys/a/b/", "a/b/"},
	} {
		code, body := adminDo(t, p, "DELETE", tc.path, "Bearer tok")
		var res struct {
			Key       string `json:"key"`
			Forgotten bool   `json:"forgotten"`
		}
		_ = json.Unmarshal([]byte(body), &res)
		if code != http.StatusOK || res.Key != tc.key || res.Forgotten {
			t.Errorf("DELETE %s = %d %s, want 200 forgetting nothing of key %q", tc.path, code, body, tc.key)
		}
		if s := h.status("a/b"); s.State != seenset.Done {
			t.Fatalf("after DELETE %s, a/b is %s: another key was forgotten", tc.path, s.State)
		}
	}
	// Percent-encoding is how a key names a '/' it cannot otherwise
	// spell: a%2Fb is a/b, unescaped once.
	if s := getKey(t, p, "a%2Fb"); s.Key != "a/b" || s.State != "done" {
		t.Errorf("GET a%%2Fb = %+v, want a/b done", s)
	}
	if s := getKey(t, p, "a%252Fb"); s.Key != "a%2Fb" || s.State != "absent" {
		t.Errorf("GET a%%252Fb = %+v, want a%%2Fb absent", s)
	}
}

// No path, odd or not, with or without a token, gets a redirect; with a
// token configured, anything but the public endpoints is 401 without it.
func TestAdminNeverRedirects(t *testing.T) {
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(t *testing.T, p *proxy, method, path, auth string) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+p.d.AdminAddr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if req.URL.EscapedPath() != strings.SplitN(path, "?", 2)[0] {
			t.Fatalf("the client would send %s, not %s", req.URL.EscapedPath(), path)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	odd := []string{
		"/healthz/", "//healthz", "/healthz/.", "/./healthz", "/x/../healthz", "/%2E%2E/healthz",
		"//metrics", "/metrics/", "/./metrics", "/readyz/..", "//readyz",
		"/v1", "/v1/", "/v1/keys", "/v1/keys/", "//v1/keys/a", "/v1//keys/a", "/v1/./keys/a",
		"/v1/keys/../keys/a", "/v1/keys/a//b", "/v1/keys/a/./b", "/v1/keys/..", "/v1%2Fkeys/a",
		"/debug/pprof", "/debug//pprof/", "/debug/pprof/../pprof/", "//", "/nope",
	}
	t.Run("token", func(t *testing.T) {
		p := newHarness(t, func(c *config.Config) { withAdmin(c); c.Admin.Token = "tok" }).start()
		for _, path := range odd {
			for _, m := range []string{"GET", "DELETE", "POST"} {
				if code := do(t, p, m, path, ""); code != http.StatusUnauthorized {
					t.Errorf("%s %s without the token = %d, want 401", m, path, code)
				}
				if code := do(t, p, m, path, "Bearer tok"); code >= 300 && code < 400 {
					t.Errorf("%s %s with the token = %d: a redirect", m, path, code)
				}
			}
		}
		for _, path := range []string{"/", "/healthz", "/readyz", "/metrics"} {
			if code := do(t, p, "GET", path, ""); code != http.StatusOK {
				t.Errorf("GET %s = %d, want 200 without a token", path, code)
			}
			if code := do(t, p, "POST", path, ""); code != http.StatusMethodNotAllowed {
				t.Errorf("POST %s = %d, want 405", path, code)
			}
		}
	})
	t.Run("no token, pprof", func(t *testing.T) {
		p := newHarness(t, func(c *config.Config) { withAdmin(c); c.Admin.Pprof = true }).start()
		for _, path := range odd {
			for _, m := range []string{"GET", "DELETE"} {
				code := do(t, p, m, path, "")
				if code >= 300 && code < 400 {
					t.Errorf("%s %s = %d: a redirect", m, path, code)
				}
				if code != http.StatusNotFound {
					t.Errorf("%s %s without a configured token = %d, want 404", m, path, code)
				}
			}
		}
	})
}

// The daemon's admin server bounds every phase of a connection (what each
// limit does is TestAdminLimitsCutSlowClients).
func TestAdminServerTimeouts(t *testing.T) {
	p := newHarness(t, withAdmin).start()
	s := p.d.admin
	// The values the README gives.
	if s.ReadHeaderTimeout != 5*time.Second || s.ReadTimeout != 10*time.Second || s.WriteTimeout != 15*time.Second ||
		s.IdleTimeout != time.Minute || s.MaxHeaderBytes != 64<<10 {
		t.Errorf("admin server limits: read header %s, read %s, write %s, idle %s, header bytes %d",
			s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes)
	}
	req, _ := http.NewRequest("GET", "http://"+p.d.AdminAddr()+"/healthz", nil)
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("x", 70<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("70 KiB of headers = %d, want 431", resp.StatusCode)
	}
}

// Each limit of adminLimits cuts off the client it is for; the others are
// set long so that it alone can be the one that did.
func TestAdminLimitsCutSlowClients(t *testing.T) {
	const short, long = 300 * time.Millisecond, time.Minute
	serve := func(t *testing.T, l adminLimits, h http.HandlerFunc) string {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := l.server(h)
		go func() { _ = s.Serve(ln) }()
		t.Cleanup(func() { _ = s.Close() })
		return ln.Addr().String()
	}
	ok := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("ok\n"))
	}
	// cutWithin writes head, then trickle every 50 ms until the server
	// closes the connection, which it must do within limit (plus slack).
	cutWithin := func(t *testing.T, addr, head, trickle string, limit time.Duration) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					if _, err := io.WriteString(c, trickle); err != nil {
						return
					}
				}
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(limit + 3*time.Second))
		_, err = io.Copy(io.Discard, c) // until the server closes
		if took := time.Since(start); err != nil || took > limit+2*time.Second {
			t.Fatalf("connection still open after %s (%v), limit %s", took.Round(time.Millisecond), err, limit)
		}
	}
	t.Run("slow headers", func(t *testing.T) {
		addr := serve(t, adminLimits{readHeader: short, read: long, write: long, idle: long, maxHeaderBytes: 1 << 10}, ok)
		cutWithin(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n", "X-A: b\r\n", short)
	})
	t.Run("slow body", func(t *testing.T) {
		addr := serve(t, adminLimits{readHeader: long, read: short, write: long, idle: long, maxHeaderBytes: 1 << 10}, ok)
		cutWithin(t, addr, "DELETE /v1/keys/a HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", "x", short)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		addr := serve(t, adminLimits{readHeader: long, read: long, write: long, idle: short, maxHeaderBytes: 1 << 10}, ok)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(short + 3*time.Second))
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) || time.Since(start) > short+2*time.Second {
			t.Fatalf("idle connection: %v after %s, want closed after about %s", err, time.Since(start), short)
		}
	})
	t.Run("slow handler", func(t *testing.T) {
		addr := serve(t, adminLimits{readHeader: long, read: long, write: short, idle: long, maxHeaderBytes: 1 << 10},
			func(w http.ResponseWriter, _ *http.Request) {
				time.Sleep(3 * short)
				_, _ = w.Write([]byte("late\n"))
			})
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("an answer written after the write timeout arrived: %d", resp.StatusCode)
		}
	})
	t.Run("huge header", func(t *testing.T) {
		addr := serve(t, adminLimits{readHeader: long, read: long, write: long, idle: long, maxHeaderBytes: 1 << 10}, ok)
		req, _ := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
		req.Header.Set("Authorization", "Bearer "+strings.Repeat("x", 16<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("16 KiB header with a 1 KiB limit = %d, want 431", resp.StatusCode)
		}
	})
	t.Run("pprof outlives the write timeout", func(t *testing.T) {
		for name, h := range map[string]http.HandlerFunc{"profile": pprof.Profile, "trace": pprof.Trace} {
			addr := serve(t, adminLimits{readHeader: long, read: long, write: short, idle: long, maxHeaderBytes: 1 << 10}, h)
			start := time.Now()
			resp, err := http.Get("http://" + addr + "/debug/pprof/" + name + "?seconds=1")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || len(body) == 0 || time.Since(start) < time.Second {
				t.Errorf("1 s %s, %s write timeout: %d, %d bytes, %v after %s", name, short, resp.StatusCode, len(body), err, time.Since(start))
			}
		}
	})
	if d := defaultAdminLimits(); d.read <= 0 || d.write <= 0 || d.idle <= 0 || d.readHeader <= 0 || d.maxHeaderBytes <= 0 {
		t.Errorf("defaultAdminLimits() = %+v: a limit is off", d)
	}
}

// GET / lists the admin endpoints, and says which are off and why.
func TestAdminIndexListsEndpoints(t *testing.T) {
	get := func(t *testing.T, p *proxy) string {
		resp, err := http.Get("http://" + p.d.AdminAddr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET / = %d: %s", resp.StatusCode, b)
		}
		return string(b)
	}
	off := get(t, newHarness(t, withAdmin).start())
	for _, want := range []string{"GET    /healthz", "GET    /readyz?deps=1", "GET    /metrics", "DELETE /v1/keys/{key}", "(off: set admin.token)", "/debug/pprof/     Go profiles (off: set admin.pprof)"} {
		if !strings.Contains(off, want) {
			t.Errorf("GET / lacks %q:\n%s", want, off)
		}
	}
	on := get(t, newHarness(t, func(c *config.Config) { withAdmin(c); c.Admin.Token = "tok"; c.Admin.Pprof = true }).start())
	if strings.Contains(on, "(off:") || !strings.Contains(on, "DELETE /v1/keys/{key}    forget a message key, bearer token\n") {
		t.Errorf("GET / with a token and pprof:\n%s", on)
	}
}
