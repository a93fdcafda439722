package testutil

import (
	"os"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// RedisAddr is the shared Redis the tests use (DEDUPE_TEST_REDIS_ADDR
// overrides it). It is shared with other packages' tests and possibly
// other runs: tests touch only keys under their own random prefix and
// never flush, reconfigure or stop it. A test that needs a Redis to die
// starts its own (StartRedis).
func RedisAddr() string {
	if a := os.Getenv("DEDUPE_TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// RedisStore is a seen-set on the shared Redis (RedisAddr) under a key
// prefix of its own, closed when the test ends.
func RedisStore(t testing.TB, prefix string) *seenset.Redis {
	t.Helper()
	st, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{RedisAddr()}, Prefix: UniqueName(prefix) + ":"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}
