package seenset_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset/storetest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func newHashingStore(t *testing.T, over int) (*seenset.Redis, string) {
	t.Helper()
	c := sharedRedis(t)
	prefix := randomPrefix(t)
	s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{testutil.RedisAddr()}, Prefix: prefix, HashKeysOver: over})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanPrefix(t, c, prefix) })
	t.Cleanup(func() { _ = s.Close() })
	return s, prefix
}

// With the shortest threshold every key of the suite ("storetest:<test
// name>:<hex>") is stored hashed, including keys that are prefixes of
// each other and a 512-byte key: the suite's answers do not change.
func TestRedisHashedKeysConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) seenset.Store {
		s, _ := newHashingStore(t, seenset.HashedKeyLen)
		return s
	})
}

// A key over the threshold is stored as "#" + base64url(SHA-256) under
// the prefix, one at the threshold as it is; every operation finds the
// hashed key from the original one.
func TestRedisHashedKeyLayout(t *testing.T) {
	t.Parallel()
	s, prefix := newHashingStore(t, 64)
	c := sharedRedis(t)
	ctx := context.Background()
	short := "billing:payments:" + strings.Repeat("s", 64-len("billing:payments:"))
	long := short + "L"
	for _, k := range []string{short, long} {
		if res, err := s.Claim(ctx, k, "A", time.Minute); err != nil || res != seenset.Claimed {
			t.Fatalf("claim %d bytes: %v %v", len(k), res, err)
		}
		if err := s.Commit(ctx, k, "A", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256([]byte(long))
	hashed := prefix + "#" + base64.RawURLEncoding.EncodeToString(sum[:])
	if len(hashed) != len(prefix)+seenset.HashedKeyLen {
		t.Fatalf("hashed key %q is %d bytes after the prefix", hashed, len(hashed)-len(prefix))
	}
	if v := c.Get(ctx, hashed).Val(); v != "done:A" {
		t.Fatalf("hashed key holds %q", v)
	}
	if v := c.Get(ctx, prefix+short).Val(); v != "done:A" {
		t.Fatalf("key at the threshold holds %q, want it stored as it is", v)
	}
	if n := c.Exists(ctx, prefix+long).Val(); n != 0 {
		t.Fatal("long key stored as it is too")
	}
	if st, err := s.Status(ctx, long); err != nil || st.State != seenset.Done || st.Token != "A" {
		t.Fatalf("status of the long key: %+v %v", st, err)
	}
	if ok, err := s.Forget(ctx, long); err != nil || !ok {
		t.Fatalf("forget the long key: %v %v", ok, err)
	}
	if n := c.Exists(ctx, hashed).Val(); n != 0 {
		t.Fatal("forget left the hashed key")
	}
}

func TestNewRedisRejectsShortHashThreshold(t *testing.T) {
	if s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{"127.0.0.1:1"}, HashKeysOver: seenset.HashedKeyLen - 1}); err == nil {
		_ = s.Close()
		t.Fatal("accepted a threshold below the hashed form's length")
	}
}
