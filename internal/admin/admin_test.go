package admin

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

func serve(t *testing.T, h http.Handler, method, path, auth string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, strings.TrimSpace(w.Body.String())
}

func TestHandlerNamespacesAndAnswersJSON(t *testing.T) {
	st := seenset.NewMemory()
	defer st.Close()
	ctx := context.Background()
	if _, err := st.Claim(ctx, "orders-worker:orders:k1", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, "orders-worker:orders:k1", "tok", time.Hour); err != nil {
		t.Fatal(err)
	}
	k := &Keys{Store: st, Consumer: "orders-worker", Spaces: []string{"orders"}}
	h := k.Handler("t", nil)

	code, body := serve(t, h, "GET", "/v1/keys/k1", "Bearer t")
	if code != 200 || !strings.HasPrefix(body, `{"key":"k1","space":"orders","state":"done","ttl_seconds":`) {
		t.Fatalf("GET done key = %d %s", code, body)
	}
	if code, body := serve(t, h, "GET", "/v1/keys/orders-worker:k1", "Bearer t"); code != 200 || !strings.Contains(body, `"state":"absent"`) {
		t.Fatalf("the prefix must not be typed: %d %s", code, body)
	}
	if code, body := serve(t, h, "DELETE", "/v1/keys/k1", "Bearer t"); code != 200 || body != `{"key":"k1","space":"orders","forgotten":true}` {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	if s, _ := st.Status(ctx, "orders-worker:orders:k1"); s.State != seenset.Absent {
		t.Fatalf("store state after forget = %s", s.State)
	}
	if code, _ := serve(t, h, "GET", "/v1/keys/k1", ""); code != 401 {
		t.Fatalf("no token = %d", code)
	}
}

// With several key spaces the space must be named; a named one must
// exist. Each space is its own namespace.
func TestHandlerKeySpaces(t *testing.T) {
	st := seenset.NewMemory()
	defer st.Close()
	ctx := context.Background()
	if _, err := st.Claim(ctx, "c:returns:k1", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	h := (&Keys{Store: st, Consumer: "c", Spaces: []string{"orders", "returns"}}).Handler("t", nil)
	if code, body := serve(t, h, "GET", "/v1/keys/k1", "Bearer t"); code != 400 || !strings.Contains(body, "orders, returns") {
		t.Fatalf("no space = %d %s, want 400 naming the spaces", code, body)
	}
	if code, body := serve(t, h, "GET", "/v1/keys/k1?space=nope", "Bearer t"); code != 400 {
		t.Fatalf("unknown space = %d %s, want 400", code, body)
	}
	if code, body := serve(t, h, "GET", "/v1/keys/k1?space=orders", "Bearer t"); code != 200 || !strings.Contains(body, `"state":"absent"`) {
		t.Fatalf("orders = %d %s, want absent", code, body)
	}
	if code, body := serve(t, h, "GET", "/v1/keys/k1?space=returns", "Bearer t"); code != 200 || !strings.Contains(body, `"state":"inflight"`) {
		t.Fatalf("returns = %d %s, want inflight", code, body)
	}
}

type downStore struct{ seenset.Store }

func (downStore) Status(context.Context, string) (seenset.Status, error) {
	return seenset.Status{}, seenset.ErrUnavailable
}

func TestHandlerStoreDownIs503(t *testing.T) {
	var ops opsSeen
	k := &Keys{Store: seenset.Observe(downStore{}, &ops), Consumer: "c", Spaces: []string{"s"}}
	if code, _ := serve(t, k.Handler("t", nil), "GET", "/v1/keys/x", "Bearer t"); code != http.StatusServiceUnavailable {
		t.Fatalf("store down = %d, want 503", code)
	}
	if len(ops) != 1 || ops[0] != "status" {
		t.Fatalf("observed failures %v", ops)
	}
}

// opsSeen records the operations of the failed store calls.
type opsSeen []string

func (o *opsSeen) StoreCall(op string, _ time.Duration, err error) {
	if err != nil {
		*o = append(*o, op)
	}
}

func TestBearer(t *testing.T) {
	for _, tc := range []struct {
		h, tok string
		ok     bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer  abc ", "abc", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"abc", "", false},
	} {
		if tok, ok := bearer(tc.h); tok != tc.tok || ok != tc.ok {
			t.Errorf("bearer(%q) = %q %v", tc.h, tok, ok)
		}
	}
}

func TestLoadToken(t *testing.T) {
	f := filepath.Join(t.TempDir(), "tok")
	_ = os.WriteFile(f, []byte("\tsecret \n"), 0o600)
	for _, tc := range []struct {
		c    config.Admin
		want string
		err  bool
	}{
		{config.Admin{}, "", false},
		{config.Admin{Token: "inline"}, "inline", false},
		{config.Admin{TokenFile: f}, "secret", false},
		{config.Admin{TokenFile: filepath.Join(t.TempDir(), "missing")}, "", true},
	} {
		got, err := LoadToken(tc.c)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("LoadToken(%+v) = %q, %v", tc.c, got, err)
		}
	}
}

func TestCommand(t *testing.T) {
	st := seenset.NewMemory()
	defer st.Close()
	k := &Keys{Store: st, Consumer: "c", Spaces: []string{"s"}}
	var out bytes.Buffer
	if err := k.Command(context.Background(), "status", "", "x", &out); err != nil || out.String() != `{"key":"x","space":"s","state":"absent","ttl_seconds":0}`+"\n" {
		t.Fatalf("status: %v %q", err, out.String())
	}
	if err := k.Command(context.Background(), "nope", "", "x", &out); err == nil {
		t.Fatal("unknown sub-command accepted")
	}
	if err := k.Command(context.Background(), "forget", "", "", &out); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
}

// The key is the escaped path after /v1/keys/, unescaped once and never
// cleaned: each odd path names exactly the key it spells, never another.
func TestHandlerKeyIsTheEscapedPathExactly(t *testing.T) {
	st := seenset.NewMemory()
	defer st.Close()
	k := &Keys{Store: st, Consumer: "c", Spaces: []string{"s"}}
	h := k.Handler("t", nil)
	for _, tc := range []struct{ path, key string }{
		{"/v1/keys/a/b", "a/b"},
		{"/v1/keys/a//b", "a//b"},
		{"/v1/keys/a/./b", "a/./b"},
		{"/v1/keys/../x", "../x"},
		{"/v1/keys/a/../b", "a/../b"},
		{"/v1/keys//a", "/a"},
		{"/v1/keys/a/", "a/"},
		{"/v1/keys/a%2Fb", "a/b"},
		{"/v1/keys/a%252Fb", "a%2Fb"},
		{"/v1/keys/a%20b+c", "a b+c"},
		{"/v1/keys/%2E%2E", ".."},
		{"/v1/keys/a?x=y", "a"},
	} {
		code, body := serve(t, h, "GET", tc.path, "Bearer t")
		want := `{"key":` + strconv.Quote(tc.key) + `,"space":"s","state":"absent","ttl_seconds":0}`
		if code != http.StatusOK || body != want {
			t.Errorf("GET %s = %d %s, want 200 %s", tc.path, code, body, want)
		}
	}
	// /v1/keys itself is the listing (GET /v1/keys); spelled any other way
	// it is nothing.
	for _, path := range []string{"/v1//keys", "/v1/%6Beys", "/v1//keys/a", "/v1/./keys/a", "/v1%2Fkeys/a", "/v1/%6Beys/a", "//v1/keys/a", "/"} {
		if code, body := serve(t, h, "GET", path, "Bearer t"); code != http.StatusNotFound {
			t.Errorf("GET %s = %d %s, want 404: not the key API", path, code, body)
		}
	}
	if code, body := serve(t, h, "GET", "/v1/keys/", "Bearer t"); code != http.StatusBadRequest {
		t.Errorf("empty key = %d %s, want 400", code, body)
	}
}

// The token is checked before the path is looked at: whatever the path,
// no token is 401, and nothing answers a redirect.
func TestHandlerAuthenticatesBeforeRouting(t *testing.T) {
	st := seenset.NewMemory()
	defer st.Close()
	h := (&Keys{Store: st, Consumer: "c", Spaces: []string{"s"}}).Handler("t", nil)
	for _, path := range []string{"/v1/keys/a", "/v1/keys/a//b", "/v1/keys/../x", "/v1/keys", "/v1//keys/a",
		"//v1/keys/a", "/v1/./keys/a", "/v1/keys/", "/nope", "/", "/v1%2Fkeys/a"} {
		for _, m := range []string{"GET", "DELETE", "PUT", "POST"} {
			code, body := serve(t, h, m, path, "")
			if code != http.StatusUnauthorized {
				t.Errorf("%s %s without a token = %d %s, want 401", m, path, code, body)
			}
			if code, _ := serve(t, h, m, path, "Bearer t"); code >= 300 && code < 400 {
				t.Errorf("%s %s with the token = %d: a redirect", m, path, code)
			}
		}
	}
	if code, _ := serve(t, h, "PUT", "/v1/keys/a", "Bearer t"); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT with the token = %d, want 405", code)
	}
	if code, _ := serve(t, h, "HEAD", "/v1/keys/a", "Bearer t"); code != http.StatusOK {
		t.Errorf("HEAD with the token = %d, want 200", code)
	}
}
