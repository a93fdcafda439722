package seenset

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// The sweep must reclaim expired entries that are never touched again, or a
// long-running single-replica proxy grows without bound.
func TestMemorySweepReclaimsUntouchedEntries(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := NewMemory()
	m.now = func() time.Time { return now }
	ctx := context.Background()

	const dead = 10_000
	for i := range dead {
		if err := m.Commit(ctx, "old:"+strconv.Itoa(i), "t", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Hour)
	// Keep writing live keys, touching none of the old ones.
	const live = 20_000
	for i := range live {
		if _, err := m.Claim(ctx, "new:"+strconv.Itoa(i), "t", 2*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// Each write scans about sweepBudget/sweepEvery entries, so after twice
	// as many writes as dead keys most of them must be gone.
	if n := m.size(); n > live+dead/4 {
		t.Fatalf("%d entries for %d live keys: sweep is not reclaiming", n, live)
	}
}

func TestMemoryLazyExpiry(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := NewMemory()
	m.now = func() time.Time { return now }
	ctx := context.Background()
	if _, err := m.Claim(ctx, "k", "A", time.Second); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second) // expiry is inclusive: the lease has run out
	if st, _ := m.Status(ctx, "k"); st.State != Absent {
		t.Fatalf("status at expiry: %v", st.State)
	}
	if m.size() != 0 {
		t.Fatalf("expired entry kept after access")
	}
}
