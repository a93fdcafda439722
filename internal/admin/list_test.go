package admin

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// fill stores keys of space "orders" (and one of "returns") in st: some
// done, some in flight, one with glob characters in its name.
func fill(t *testing.T, st seenset.Store, n int) {
	t.Helper()
	ctx := context.Background()
	put := func(full string, done bool) {
		if _, err := st.Claim(ctx, full, "tok", time.Minute); err != nil {
			t.Fatal(err)
		}
		if done {
			if err := st.Commit(ctx, full, "tok", time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range n {
		put("c:orders:ord-"+string(rune('a'+i%26))+"-"+time.Duration(i).String(), i%2 == 0)
	}
	put("c:orders:inv-*[1]", true)
	put("c:returns:ord-x", true)
}

func keyNames(l KeyList) []string {
	var out []string
	for _, k := range l.Keys {
		out = append(out, k.Key)
	}
	sort.Strings(out)
	return out
}

func testList(t *testing.T, st seenset.Store) {
	const n = 1200 // more than one SCAN page
	fill(t, st, n)
	k := &Keys{Store: seenset.Observe(st, &opsSeen{}), Consumer: "c", Spaces: []string{"orders", "returns"}}
	ctx := context.Background()
	all, err := k.List(ctx, ListOptions{Space: "orders", Limit: MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Keys) != n+1 || all.Truncated {
		t.Fatalf("all: %d keys (truncated %v), want %d", len(all.Keys), all.Truncated, n+1)
	}
	done, _ := k.List(ctx, ListOptions{Space: "orders", State: "done", Limit: MaxListLimit})
	inflight, _ := k.List(ctx, ListOptions{Space: "orders", State: "inflight", Limit: MaxListLimit})
	if len(done.Keys) != n/2+1 || len(inflight.Keys) != n/2 {
		t.Fatalf("done %d, inflight %d; want %d and %d", len(done.Keys), len(inflight.Keys), n/2+1, n/2)
	}
	for _, ks := range inflight.Keys {
		if ks.State != "inflight" || ks.TTLSeconds <= 0 || ks.Space != "orders" {
			t.Fatalf("inflight listing holds %+v", ks)
		}
	}
	glob, _ := k.List(ctx, ListOptions{Space: "orders", Prefix: "inv-*["})
	if got := keyNames(glob); len(got) != 1 || got[0] != "inv-*[1]" {
		t.Fatalf("prefix with glob characters: %v, want [inv-*[1]] only", got)
	}
	cut, _ := k.List(ctx, ListOptions{Space: "orders", Prefix: "ord-", Limit: 10})
	if len(cut.Keys) != 10 || !cut.Truncated {
		t.Fatalf("limit 10: %d keys, truncated %v", len(cut.Keys), cut.Truncated)
	}
	other, _ := k.List(ctx, ListOptions{Space: "returns"})
	if got := keyNames(other); len(got) != 1 || got[0] != "ord-x" {
		t.Fatalf("space returns: %v", got)
	}
	if _, err := k.List(ctx, ListOptions{Space: "orders", State: "gone"}); !errors.Is(err, ErrQuery) {
		t.Errorf("bad state: %v, want ErrQuery", err)
	}
	if _, err := k.List(ctx, ListOptions{Space: "orders", Limit: MaxListLimit + 1}); !errors.Is(err, ErrQuery) {
		t.Errorf("limit too high: %v, want ErrQuery", err)
	}
	code, body := serve(t, k.Handler("t", nil), "GET", "/v1/keys?space=orders&state=done&prefix=inv-&limit=5", "Bearer t")
	if code != http.StatusOK || body == "" {
		t.Fatalf("GET /v1/keys = %d %s", code, body)
	}
	if code, _ := serve(t, k.Handler("t", nil), "GET", "/v1/keys?space=orders&limit=x", "Bearer t"); code != http.StatusBadRequest {
		t.Errorf("bad limit = %d, want 400", code)
	}
}

func TestListRedis(t *testing.T) {
	testList(t, testutil.RedisStore(t, "adminlist-"))
}

func TestListRedisCluster(t *testing.T) {
	c := testutil.StartRedisCluster(t, testutil.RedisClusterOptions{})
	st, err := seenset.NewRedis(seenset.RedisOptions{Addrs: c.Addrs(), Prefix: testutil.UniqueName("adminlist-") + ":"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testList(t, st)
}

func TestListMemory(t *testing.T) {
	testList(t, seenset.NewMemory())
}
