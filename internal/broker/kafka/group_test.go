package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// start_offset latest: a member that holds messages and finishes none
// (the app is down) commits nothing of its own. The log end it started
// at must be the group's before anything was handed out, or the member
// that takes over after it stops starts at a newer end and the held
// messages are never delivered.
func TestStartLatestPinnedBeforeHandout(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders"})
	c.Produce(t, "orders", records(1, 5)...) // before the group: skipped
	o := options(c, "orders")
	o.StartOffset = kafka.StartLatest
	var held atomic.Int64
	a := start(t, o, func(d broker.Delivery) {
		held.Add(1)
		<-d.Lost() // the app is down: nothing finishes
		_ = d.Requeue(context.Background())
	})
	// Nothing is handed out before the pin: the group holds the end.
	testutil.Eventually(t, 10*time.Second, "log end committed for the group", allCommitted(t, c, o.Group, "orders", uniform(1, 5)))
	c.Produce(t, "orders", kafkatest.Record{Value: []byte("held-1")}, kafkatest.Record{Value: []byte("held-2")})
	testutil.Eventually(t, 10*time.Second, "first member holds a message", func() bool { return held.Load() > 0 })
	a.stop(t)
	if got := c.Committed(t, o.Group, "orders", 1)[0]; got != 5 {
		t.Fatalf("committed %d after the first member stopped, want 5 (the end it started at)", got)
	}

	c.Produce(t, "orders", kafkatest.Record{Value: []byte("after")})
	var col collector
	start(t, o, col.handle)
	testutil.Eventually(t, 10*time.Second, "the held messages delivered by the next member", func() bool { return col.count() == 3 })
	col.mu.Lock()
	defer col.mu.Unlock()
	var got []string
	for _, m := range col.msgs {
		got = append(got, string(m.Body))
	}
	if fmt.Sprint(got) != "[held-1 held-2 after]" {
		t.Fatalf("next member got %q, want the two held messages and the new one", got)
	}
}

// member is a source run in the background whose handler records the
// partitions it sees and whether a delivery it holds was lost.
type member struct {
	r     *running
	mu    sync.Mutex
	parts map[int]int // partition → deliveries
	lost  atomic.Int64
}

func (m *member) handle(d broker.Delivery) {
	msg := d.Message()
	m.mu.Lock()
	m.parts[msg.Partition]++
	m.mu.Unlock()
	select {
	case <-d.Lost():
		m.lost.Add(1)
		_ = d.Requeue(context.Background())
		return
	default:
	}
	_ = d.Ack(context.Background())
}

func startMember(t *testing.T, o kafka.Options) *member {
	m := &member{parts: map[int]int{}}
	m.r = start(t, o, m.handle)
	return m
}

// waitAssigned waits until the group is stable with every want member
// (by instance id) holding at least one partition, and returns each
// member's partitions.
func waitAssigned(t *testing.T, c *kafkatest.Cluster, group string, want ...string) map[string][]int32 {
	t.Helper()
	var got map[string][]int32
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("group stable with %v holding partitions", want), func() bool {
		state, members := c.Describe(t, group, "orders")
		if state != "Stable" || len(members) != len(want) {
			return false
		}
		for _, w := range want {
			if len(members[w]) == 0 {
				return false
			}
		}
		got = members
		return true
	})
	for _, ps := range got {
		slices.Sort(ps)
	}
	return got
}

// A static member (group_instance_id) restarted within the session
// timeout takes its partitions back without a rebalance: the other
// member never loses a partition, and nothing moves.
func TestStaticMemberRestart(t *testing.T) {
	c := kafkatest.Start(t, 4, []string{"orders"})
	o := options(c, "orders")
	oa, ob := o, o
	oa.GroupInstanceID, ob.GroupInstanceID = "pod-a", "pod-b"
	a := startMember(t, oa)
	b := startMember(t, ob)
	before := waitAssigned(t, c, o.Group, "pod-a", "pod-b")

	// pod-a crashes: its client is gone without leaving the group.
	crash(t, a.r)
	state, members := c.Describe(t, o.Group, "orders")
	if len(members) != 2 {
		t.Fatalf("after the crash the group has %d members (%s), want pod-a kept until its session times out", len(members), state)
	}
	restarted := time.Now()
	a2 := startMember(t, oa)
	after := waitAssigned(t, c, o.Group, "pod-a", "pod-b")
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("assignment moved across the restart: %v, then %v", before, after)
	}
	// A dynamic member would wait for the crashed one's session to time
	// out before the group gave it anything.
	if took := time.Since(restarted); took >= o.SessionTimeout {
		t.Fatalf("the restarted member held its partitions again after %s, not before the %s session timeout", took, o.SessionTimeout)
	}
	// Traffic on every partition: the restarted member serves its own,
	// the other never had one lost or revoked.
	c.Produce(t, "orders", records(4, 10)...)
	testutil.Eventually(t, 15*time.Second, "all delivered", func() bool {
		n := 0
		for _, m := range []*member{a2, b} {
			m.mu.Lock()
			for _, k := range m.parts {
				n += k
			}
			m.mu.Unlock()
		}
		return n >= 40
	})
	if n := b.lost.Load(); n != 0 {
		t.Fatalf("the other member lost %d deliveries across a static restart", n)
	}
	testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(4, 10)))
}

// A static member that is stopped (SIGTERM) leaves the group at once:
// a stopped pod is replaced under another name, and its partitions go
// to the other member without waiting for the session timeout.
func TestStaticMemberStopLeaves(t *testing.T) {
	c := kafkatest.Start(t, 4, []string{"orders"})
	o := options(c, "orders")
	o.SessionTimeout = 30 * time.Second
	o.RebalanceTimeout = 30 * time.Second
	oa, ob := o, o
	oa.GroupInstanceID, ob.GroupInstanceID = "pod-a", "pod-b"
	a := startMember(t, oa)
	b := startMember(t, ob)
	waitAssigned(t, c, o.Group, "pod-a", "pod-b")
	stopped := time.Now()
	a.r.stop(t)
	got := waitAssigned(t, c, o.Group, "pod-b")
	if took := time.Since(stopped); len(got["pod-b"]) != 4 || took > 10*time.Second {
		t.Fatalf("after pod-a stopped pod-b holds %v after %s; want all 4 well before the 30s session timeout", got["pod-b"], took)
	}
	if n := b.lost.Load(); n != 0 {
		t.Fatalf("pod-b lost %d deliveries while only gaining partitions", n)
	}
}

// crash ends a running source as a SIGKILL would: its client is closed
// under it, so neither its last commit nor its leave reaches the group.
func crash(t *testing.T, r *running) {
	t.Helper()
	kafka.CrashForTest(r.s)
	r.stop(t)
}

// A rolling upgrade from members that speak only range (an older
// dedupe-proxy) to this one: the mixed group agrees on range and never
// stalls, the new member takes partitions while the old one is still
// there, everything the old member did not commit is delivered, and
// once the old member is gone the new one holds everything.
func TestMixedGroupRollingUpgrade(t *testing.T) {
	c := kafkatest.Start(t, 4, []string{"orders"})
	o := options(c, "orders")

	// The old member: range only, eager, commits after each poll.
	var oldMu sync.Mutex
	oldSeen := map[string]bool{}
	old := c.Client(t, kgo.ConsumerGroup(o.Group), kgo.ConsumeTopics("orders"), kgo.Balancers(kgo.RangeBalancer()),
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(time.Second), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	oldCtx, stopOld := context.WithCancel(context.Background())
	oldDone := make(chan struct{})
	go func() {
		defer close(oldDone)
		for oldCtx.Err() == nil {
			fs := old.PollFetches(oldCtx)
			fs.EachRecord(func(r *kgo.Record) {
				oldMu.Lock()
				oldSeen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = true
				oldMu.Unlock()
			})
			_ = old.CommitUncommittedOffsets(context.Background())
		}
	}()
	c.Produce(t, "orders", records(4, 20)...)
	testutil.Eventually(t, 15*time.Second, "old member consuming", func() bool { oldMu.Lock(); defer oldMu.Unlock(); return len(oldSeen) == 80 })

	var col collector
	n := start(t, o, col.handle)
	state, members := c.Describe(t, o.Group, "orders")
	testutil.Eventually(t, 20*time.Second, "new member holds partitions beside the old one", func() bool {
		state, members = c.Describe(t, o.Group, "orders")
		if state != "Stable" || len(members) != 2 {
			return false
		}
		for _, ps := range members {
			if len(ps) == 0 {
				return false
			}
		}
		return true
	})
	c.Produce(t, "orders", records(4, 20)...)
	testutil.Eventually(t, 20*time.Second, "new member delivers while the old one is in the group", func() bool { return col.count() > 0 })

	// The old member is stopped (its last commit may or may not land).
	stopOld()
	<-oldDone
	old.Close()
	c.Produce(t, "orders", records(4, 20)...)
	testutil.Eventually(t, 30*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(4, 60)))
	if err := n.s.Ready(); err != nil {
		t.Fatalf("new member not ready after the upgrade: %v", err)
	}
	state, members = c.Describe(t, o.Group, "orders")
	if len(members) != 1 {
		t.Fatalf("group %s has members %v, want the new one alone", state, members)
	}
	// No loss: every offset 0..59 of every partition reached one of them.
	col.mu.Lock()
	defer col.mu.Unlock()
	oldMu.Lock()
	defer oldMu.Unlock()
	for p := range 4 {
		for off := range 60 {
			k := fmt.Sprintf("%d/%d", p, off)
			if !oldSeen[k] && col.seen[k] == 0 {
				t.Errorf("%s never delivered", k)
			}
		}
	}
}

// Cooperative-sticky: a member that joins takes only the partitions that
// move to it. The first member's deliveries on the partitions it keeps
// are never lost, those on the moved ones are, and what it finished on
// them is committed before the newcomer reads them.
func TestCooperativeJoinMovesOnlyWhatChangesOwner(t *testing.T) {
	c := kafkatest.Start(t, 4, []string{"orders"})
	c.Produce(t, "orders", records(4, 2)...)
	o := options(c, "orders")
	oa, ob := o, o
	oa.GroupInstanceID, ob.GroupInstanceID = "pod-a", "pod-b"
	var mu sync.Mutex
	lostOn := map[int]bool{}
	holding := map[int]bool{}
	release := make(chan struct{})
	start(t, oa, func(d broker.Delivery) {
		m := d.Message()
		if m.Offset == 0 {
			_ = d.Ack(context.Background())
			return
		}
		// Offset 1 of every partition stays at the "app".
		mu.Lock()
		holding[m.Partition] = true
		mu.Unlock()
		select {
		case <-d.Lost():
			mu.Lock()
			lostOn[m.Partition] = true
			mu.Unlock()
			_ = d.Requeue(context.Background())
		case <-release:
			_ = d.Ack(context.Background())
		}
	})
	testutil.Eventually(t, 10*time.Second, "pod-a holds offset 1 of every partition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(holding) == 4
	})
	testutil.Eventually(t, 10*time.Second, "offset 0 committed", allCommitted(t, c, o.Group, "orders", uniform(4, 1)))
	var b collector
	start(t, ob, b.handle)
	got := waitAssigned(t, c, o.Group, "pod-a", "pod-b")
	testutil.Eventually(t, 10*time.Second, "pod-b delivers offset 1 of its partitions", func() bool { return b.count() == len(got["pod-b"]) })
	mu.Lock()
	for _, p := range got["pod-a"] {
		if lostOn[int(p)] {
			t.Errorf("partition %d stayed with pod-a, but its delivery was lost", p)
		}
	}
	for _, p := range got["pod-b"] {
		if !lostOn[int(p)] {
			t.Errorf("partition %d moved to pod-b, but pod-a's delivery on it was not lost", p)
		}
	}
	mu.Unlock()
	b.mu.Lock()
	for k := range b.seen {
		if k[len(k)-2:] != "/1" {
			t.Errorf("pod-b got %s: pod-a's finished offset 0 was not committed before the move", k)
		}
	}
	b.mu.Unlock()
	close(release)
	testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(4, 2)))
}
