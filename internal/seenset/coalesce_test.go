package seenset_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// tripCounter is a go-redis hook that counts round trips (a single
// command or a pipeline), records the most in flight at once, and can
// hold the first round trip until released.
type tripCounter struct {
	trips, cmds atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	holdFirst   chan struct{} // closed to let the first round trip go
	held        chan struct{} // closed when the first round trip is held
	once        sync.Once
}

func (h *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tripCounter) enter(n int) func() {
	h.trips.Add(1)
	h.cmds.Add(int64(n))
	cur := h.inFlight.Add(1)
	for {
		m := h.maxInFlight.Load()
		if cur <= m || h.maxInFlight.CompareAndSwap(m, cur) {
			break
		}
	}
	if h.holdFirst != nil {
		h.once.Do(func() {
			close(h.held)
			<-h.holdFirst
		})
	}
	return func() { h.inFlight.Add(-1) }
}

func (h *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if setUp(cmd) {
			return next(ctx, cmd)
		}
		defer h.enter(1)()
		return next(ctx, cmd)
	}
}

func (h *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && setUp(cmds[0]) {
			return next(ctx, cmds)
		}
		defer h.enter(len(cmds))()
		return next(ctx, cmds)
	}
}

// setUp is a new connection's HELLO and CLIENT SETINFO, which go-redis
// sends through the hooks too: not the store's round trips.
func setUp(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "hello" || n == "client"
}

// While one round trip is on the wire, every claim and commit that other
// messages ask for waits and goes in the next pipeline, one pipeline in
// flight at a time; the answers are each call's own.
func TestCoalescedCallsShareTheNextRoundTrip(t *testing.T) {
	c := sharedRedis(t)
	prefix := randomPrefix(t)
	t.Cleanup(func() { cleanPrefix(t, c, prefix) })
	h := &tripCounter{holdFirst: make(chan struct{}), held: make(chan struct{})}
	c.AddHook(h)
	s := seenset.NewRedisWithClient(c, prefix)
	defer s.Close()
	ctx := context.Background()

	// The first claim goes at once and is held on the wire.
	first := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, "first", "t0", time.Minute)
		first <- err
	}()
	<-h.held
	const n = 100
	var wg sync.WaitGroup
	results := make([]seenset.ClaimResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "k" + strconv.Itoa(i%(n/2)) // every key twice
			results[i], errs[i] = s.Claim(ctx, key, "t"+strconv.Itoa(i), time.Minute)
		}()
	}
	// A batch claim joins the same queue.
	var many []seenset.ClaimReply
	wg.Add(1)
	go func() {
		defer wg.Done()
		many = s.ClaimMany(ctx, []seenset.KeyToken{{Key: "m1", Token: "a"}, {Key: "m2", Token: "b"}}, time.Minute)
	}()
	// Let every caller queue up behind the held round trip.
	time.Sleep(300 * time.Millisecond)
	close(h.holdFirst)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	claimed, busy := 0, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		switch results[i] {
		case seenset.Claimed:
			claimed++
		case seenset.Busy:
			busy++
		}
	}
	if claimed != n/2 || busy != n/2 {
		t.Errorf("claimed %d, busy %d; want %d each (each key claimed once)", claimed, busy, n/2)
	}
	for i, r := range many {
		if r.Err != nil || r.Result != seenset.Claimed {
			t.Errorf("ClaimMany item %d: %v %v", i, r.Result, r.Err)
		}
	}
	// 1 held + the n+2 waiting calls in pipelines of at most 256.
	if got := h.trips.Load(); got != 2 {
		t.Errorf("%d round trips for %d calls, want 2 (the held one and one for everything that waited)", got, h.cmds.Load())
	}
	if m := h.maxInFlight.Load(); m != 1 {
		t.Errorf("%d round trips in flight at once, want 1", m)
	}
}

// An idle store sends a call at once: nothing waits for others to join.
func TestIdleCallIsSentAtOnce(t *testing.T) {
	c := sharedRedis(t)
	prefix := randomPrefix(t)
	t.Cleanup(func() { cleanPrefix(t, c, prefix) })
	h := &tripCounter{}
	c.AddHook(h)
	s := seenset.NewRedisWithClient(c, prefix)
	defer s.Close()
	ctx := context.Background()
	for i := range 20 {
		key := "idle" + strconv.Itoa(i)
		if r, err := s.Claim(ctx, key, "t", time.Minute); err != nil || r != seenset.Claimed {
			t.Fatalf("claim: %v %v", r, err)
		}
		if err := s.Commit(ctx, key, "t", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.trips.Load(); got != 40 {
		t.Errorf("%d round trips for 40 calls one after the other, want 40", got)
	}
}

// A caller whose context ends while its calls wait behind a slow round
// trip gets its context's error for each, and the store goes on.
func TestCoalescedCallsGivenUp(t *testing.T) {
	// A server that accepts and never answers: the first round trip hangs.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: 2 * time.Second, MaxRetries: -1})
	defer c.Close()
	s := seenset.NewRedisWithClient(c, "x:")
	defer s.Close()
	go func() { _, _ = s.Claim(context.Background(), "hang", "t", time.Minute) }()
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	replies := s.ClaimMany(ctx, []seenset.KeyToken{{Key: "a", Token: "1"}, {Key: "b", Token: "2"}}, time.Minute)
	if d := time.Since(start); d > time.Second {
		t.Errorf("ClaimMany returned after %s, want about its 200ms deadline", d)
	}
	for i, r := range replies {
		if r.Err == nil {
			t.Errorf("item %d: no error behind a hung round trip", i)
		}
	}
}
