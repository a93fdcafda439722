package main

import (
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset/storetest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The embedded seen-set is the real seenset.Redis on miniredis: it must
// pass the same conformance suite as the real Redis before the demo may
// claim "duplicate effects 0" on it.
func TestEmbeddedRedisConformance(t *testing.T) {
	r, err := startEmbeddedRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	storetest.Run(t, func(t *testing.T) seenset.Store {
		s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{r.addr()}, Prefix: testutil.UniqueName("demo:") + ":"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
