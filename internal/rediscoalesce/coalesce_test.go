package rediscoalesce_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/rediscoalesce"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// wire is a go-redis hook that records what goes to Redis (1 for a
// command alone, n for a pipeline of n) and, once armed, holds the next
// thing sent until released: while it is held, the batcher has a
// pipeline in flight and every other call queues.
type wire struct {
	mu      sync.Mutex
	sizes   []int
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (w *wire) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *wire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake([]redis.Cmder{cmd}) {
			w.pass(1)
		}
		return next(ctx, cmd)
	}
}

func (w *wire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !handshake(cmds) {
			w.pass(len(cmds))
		}
		return next(ctx, cmds)
	}
}

// handshake: what the client sends of its own (HELLO and CLIENT SETINFO
// on a new connection, a Cluster client's reading of the layout), not
// what the batcher sent.
func handshake(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch strings.ToLower(c.Name()) {
		case "hello", "client", "auth", "select", "cluster", "command", "readonly":
		default:
			return false
		}
	}
	return true
}

func (w *wire) pass(n int) {
	w.mu.Lock()
	w.sizes = append(w.sizes, n)
	armed, entered, release := w.armed, w.entered, w.release
	w.armed = false
	w.mu.Unlock()
	if armed {
		close(entered)
		<-release
	}
}

// hold arms the hook: the next thing sent waits in it until the returned
// release is called; entered is closed once it does.
func (w *wire) hold() (entered <-chan struct{}, release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.entered, w.release = true, make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := w.release
	return w.entered, func() { once.Do(func() { close(r) }) }
}

// sent returns what went to Redis since the last call, and forgets it.
func (w *wire) sent() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.sizes
	w.sizes = nil
	return out
}

type fixture struct {
	c      *redis.Client
	b      *rediscoalesce.Coalescer
	w      *wire
	prefix string
}

// newFixture is a batcher on addr under a key prefix of its own.
func newFixture(t *testing.T, addr string, waitReplicas int, waitTimeout time.Duration) *fixture {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	w := &wire{}
	c.AddHook(w)
	f := &fixture{c: c, w: w, b: rediscoalesce.New(c, 5*time.Second, waitReplicas, waitTimeout),
		prefix: "{" + testutil.UniqueName("rediscoalesce") + "}:"}
	t.Cleanup(func() {
		f.b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, f.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		_ = c.Close()
	})
	return f
}

func (f *fixture) key(name string) string { return f.prefix + name }

// inFlight sends one call and holds it on the wire; the calls made until
// release queue behind it. done is closed when the held call returned.
func (f *fixture) inFlight(t *testing.T) (release func(), done <-chan struct{}) {
	t.Helper()
	entered, release := f.w.hold()
	d := make(chan struct{})
	go func() {
		defer close(d)
		if _, err := f.b.DoInt(context.Background(), "INCR", f.key("held")); err != nil {
			t.Errorf("the held call: %v", err)
		}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the held call never reached Redis")
	}
	t.Cleanup(release)
	return release, d
}

// queued waits until n calls wait for the loop.
func (f *fixture) queued(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d calls queued", n), func() bool {
		return rediscoalesce.QueuedForTest(f.b) == n
	})
}

// While a pipeline is on the wire the calls that come meanwhile queue and
// go out together in the next, at most MaxBatch to a pipeline; an idle
// batcher sends a call alone at once.
// doManyQueued runs calls with DoMany while a call is held on the wire
// (inFlight), so they all queue and go out together once it is released,
// and fails the test on any call's error.
func (f *fixture) doManyQueued(t *testing.T, release func(), held <-chan struct{}, calls []*rediscoalesce.Call) {
	t.Helper()
	done := make(chan []error)
	go func() { done <- f.b.DoMany(context.Background(), calls) }()
	f.queued(t, len(calls))
	release()
	gone := <-done
	<-held
	for i, err := range gone {
		if err != nil || calls[i].Err != nil {
			t.Fatalf("call %d: gone %v, err %v", i, err, calls[i].Err)
		}
	}
}

func TestCallsQueuedBehindAPipelineShareTheNext(t *testing.T) {
	f := newFixture(t, testutil.RedisAddr(), 0, 0)
	ctx := context.Background()
	if n, err := f.b.DoInt(ctx, "INCR", f.key("idle")); err != nil || n != 1 {
		t.Fatalf("idle call: %d %v", n, err)
	}
	if got := f.w.sent(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("an idle call went out as %v, want one command alone", got)
	}

	release, held := f.inFlight(t)
	n := rediscoalesce.MaxBatchForTest + 44
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := f.b.DoInt(ctx, "INCR", f.key("n")); err != nil {
				t.Errorf("INCR: %v", err)
			}
		})
	}
	f.queued(t, n)
	release()
	wg.Wait()
	<-held
	got := f.w.sent()
	want := []int{1, rediscoalesce.MaxBatchForTest, 44}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sent %v, want %v: the held call, then the queued ones in full pipelines", got, want)
	}
	if v, err := f.c.Get(ctx, f.key("n")).Int(); err != nil || v != n {
		t.Fatalf("counter = %d %v, want %d", v, err, n)
	}
}

// Calls made by goroutines that became runnable together, while the
// loop was idle, share one round trip: the first wakes the loop, which
// lets the others queue before it sends. One P makes the interleaving
// the same in every run: without the loop's yield it sent the first
// call alone ([1 7]).
func TestCallsWokenTogetherShareARoundTrip(t *testing.T) {
	f := newFixture(t, testutil.RedisAddr(), 0, 0)
	ctx := context.Background()
	if _, err := f.b.DoInt(ctx, "INCR", f.key("warm")); err != nil {
		t.Fatal(err) // dials the connection: the round trips below are the calls alone
	}
	f.w.sent() // forgets what was sent so far
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 8
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-gate
			if _, err := f.b.DoInt(ctx, "INCR", f.key("n")); err != nil {
				t.Errorf("INCR: %v", err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // every goroutine waits at the gate
	close(gate)
	wg.Wait()
	if got := f.w.sent(); fmt.Sprint(got) != fmt.Sprint([]int{n}) {
		t.Fatalf("sent %v, want one pipeline of %d", got, n)
	}
}

// The calls of one pipeline, and of the pipelines that follow each
// other, run in the order they were queued.
func TestQueuedCallsRunInOrder(t *testing.T) {
	f := newFixture(t, testutil.RedisAddr(), 0, 0)
	release, held := f.inFlight(t)
	k := f.key("order")
	n := rediscoalesce.MaxBatchForTest + 10
	calls := []*rediscoalesce.Call{{Cmd: []any{"SET", k, ""}}}
	var want strings.Builder
	lengths := make([]int64, n) // what each APPEND answers, run in order
	for i := range n {
		s := strconv.Itoa(i) + ","
		want.WriteString(s)
		lengths[i] = int64(want.Len())
		calls = append(calls, &rediscoalesce.Call{Cmd: []any{"APPEND", k, s}, IntReply: true})
	}
	calls = append(calls, &rediscoalesce.Call{Cmd: []any{"GET", k}})
	f.doManyQueued(t, release, held, calls)
	for i, c := range calls[1 : n+1] {
		if c.N != lengths[i] {
			t.Fatalf("APPEND %d answered length %d, want %d: it did not run after the ones queued before it", i, c.N, lengths[i])
		}
	}
	if got := calls[len(calls)-1].Val; got != want.String() {
		t.Fatalf("GET after the appends = %q…, want %q…", got[:min(40, len(got))], want.String()[:40])
	}
	if got := f.w.sent(); len(got) != 3 {
		t.Fatalf("sent %v, want the held call and two pipelines", got)
	}
}

// In one pipeline each call has its own reply and its own error: a
// script that fails, a command on a key of the wrong type, a nil reply,
// and scripts Redis no longer has cached (restarted, or SCRIPT FLUSH),
// which are loaded and run again.
func TestErrorsAreEachCallsOwn(t *testing.T) {
	// Its own server: SCRIPT FLUSH must not touch the shared one.
	srv := testutil.StartRedis(t)
	f := newFixture(t, srv.Addr(), 0, 0)
	ctx := context.Background()
	boom := redis.NewScript(`return redis.error_reply('BOOM ' .. KEYS[1])`)
	incr := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	if err := f.c.Set(ctx, f.key("str"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T) {
		t.Helper()
		release, held := f.inFlight(t)
		calls := []*rediscoalesce.Call{
			{Script: incr, Keys: []string{f.key("a")}, Args: []any{5}},
			{Script: boom, Keys: []string{f.key("b")}},
			{Cmd: []any{"INCR", f.key("str")}, IntReply: true},
			{Cmd: []any{"GET", f.key("missing")}},
			{Cmd: []any{"GET", f.key("str")}},
			{Script: incr, Keys: []string{f.key("c")}, Args: []any{7}},
		}
		done := make(chan []error)
		go func() { done <- f.b.DoMany(ctx, calls) }()
		f.queued(t, len(calls))
		release()
		gone := <-done
		<-held
		for i, err := range gone {
			if err != nil {
				t.Fatalf("call %d gone: %v", i, err)
			}
		}
		if calls[0].Err != nil || calls[0].N < 5 {
			t.Errorf("script INCRBY 5: %d %v", calls[0].N, calls[0].Err)
		}
		if err := calls[1].Err; err == nil || !strings.Contains(err.Error(), "BOOM "+f.key("b")) {
			t.Errorf("failing script: %v, want its own error", err)
		}
		if err := calls[2].Err; err == nil || !strings.Contains(err.Error(), "not an integer") {
			t.Errorf("INCR of a string: %v", err)
		}
		if c := calls[3]; c.Err != nil || !c.Absent || c.Val != "" {
			t.Errorf("GET missing: %q absent %v err %v", c.Val, c.Absent, c.Err)
		}
		if c := calls[4]; c.Err != nil || c.Absent || c.Val != "x" {
			t.Errorf("GET str: %q absent %v err %v", c.Val, c.Absent, c.Err)
		}
		if calls[5].Err != nil || calls[5].N < 7 {
			t.Errorf("script INCRBY 7: %d %v", calls[5].N, calls[5].Err)
		}
	}
	t.Run("first use", run)
	if err := f.c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	t.Run("after SCRIPT FLUSH", run)
	if v, _ := f.c.Get(ctx, f.key("a")).Int(); v != 10 {
		t.Errorf("a = %d, want 10: each script ran once per round", v)
	}

	// A call alone takes the same paths.
	if _, err := f.b.Do(ctx, boom, []string{f.key("d")}); err == nil || !strings.Contains(err.Error(), "BOOM") {
		t.Errorf("failing script alone: %v", err)
	}
	if _, _, err := f.b.DoCmd(ctx, "NOSUCHCOMMAND", f.key("e")); err == nil {
		t.Error("unknown command alone: no error")
	}
}

// A Redis killed while a pipeline is on the wire fails every call of
// that pipeline and of those queued behind it: none hangs and none
// reports success. Once Redis is back, the same batcher works.
func TestRedisDiesMidBatch(t *testing.T) {
	srv := testutil.StartRedisWith(t, "--enable-debug-command", "yes")
	f := newFixture(t, srv.Addr(), 0, 0)
	ctx := context.Background()
	if _, err := f.b.DoInt(ctx, "PING"); err == nil {
		// PING answers a string; DoInt must say so, not invent a number.
		t.Fatal("PING read as an integer")
	}
	entered, release := f.w.hold()
	release() // let the pipeline through; entered says when it is sent
	first := []*rediscoalesce.Call{
		{Cmd: []any{"INCR", f.key("a")}, IntReply: true},
		{Cmd: []any{"DEBUG", "SLEEP", "5"}},
		{Cmd: []any{"INCR", f.key("a")}, IntReply: true},
	}
	firstDone := make(chan []error)
	go func() { firstDone <- f.b.DoMany(ctx, first) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the pipeline never went out")
	}
	// Behind it, more calls queue while Redis sleeps.
	var later sync.WaitGroup
	laterErrs := make([]error, 20)
	for i := range laterErrs {
		later.Go(func() { _, laterErrs[i] = f.b.DoInt(ctx, "INCR", f.key("b")) })
	}
	f.queued(t, len(laterErrs))
	srv.Kill()

	gone := <-firstDone
	for i, c := range first {
		if gone[i] == nil && c.Err == nil {
			t.Errorf("call %d of the pipeline Redis died under: no error (N %d, Val %q)", i, c.N, c.Val)
		}
	}
	later.Wait()
	for i, err := range laterErrs {
		if err == nil {
			t.Errorf("queued call %d: no error with Redis gone", i)
		}
	}

	srv.Restart()
	testutil.Eventually(t, 10*time.Second, "calls work again once Redis is back", func() bool {
		n, err := f.b.DoInt(ctx, "INCR", f.key("c"))
		return err == nil && n >= 1
	})
}

// A caller whose context ends stops waiting at once. A call still
// queued then is never sent; one on the wire may have run (the caller
// retries, and every call the proxy makes is safe to repeat).
func TestContextCancel(t *testing.T) {
	f := newFixture(t, testutil.RedisAddr(), 0, 0)
	bg := context.Background()

	t.Run("queued", func(t *testing.T) {
		release, held := f.inFlight(t)
		ctx, cancel := context.WithCancel(bg)
		errc := make(chan error, 1)
		go func() { _, err := f.b.DoInt(ctx, "INCR", f.key("never")); errc <- err }()
		f.queued(t, 1)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled while queued: %v", err)
		}
		release()
		<-held
		// The loop has moved on: a call after it is answered.
		if _, err := f.b.DoInt(bg, "INCR", f.key("after")); err != nil {
			t.Fatal(err)
		}
		if n, err := f.c.Exists(bg, f.key("never")).Result(); err != nil || n != 0 {
			t.Fatalf("a call cancelled while queued ran: exists %d %v", n, err)
		}
	})

	t.Run("on the wire", func(t *testing.T) {
		entered, release := f.w.hold()
		defer release()
		ctx, cancel := context.WithCancel(bg)
		errc := make(chan error, 1)
		go func() { _, _, err := f.b.DoCmd(ctx, "GET", f.key("x")); errc <- err }()
		<-entered
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled on the wire: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a cancelled caller still waits for its reply")
		}
	})

	t.Run("DoMany", func(t *testing.T) {
		done, cancel := context.WithCancel(bg)
		cancel()
		calls := []*rediscoalesce.Call{{Cmd: []any{"INCR", f.key("m")}, IntReply: true}, {Cmd: []any{"INCR", f.key("m")}, IntReply: true}}
		for i, err := range f.b.DoMany(done, calls) {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("DoMany with an ended context: call %d gone %v", i, err)
			}
		}

		release, held := f.inFlight(t)
		ctx, cancel := context.WithCancel(bg)
		calls = []*rediscoalesce.Call{{Cmd: []any{"INCR", f.key("m")}, IntReply: true}, {Cmd: []any{"GET", f.key("m")}}}
		gonec := make(chan []error, 1)
		go func() { gonec <- f.b.DoMany(ctx, calls) }()
		f.queued(t, len(calls))
		cancel()
		gone := <-gonec
		for i, err := range gone {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("DoMany cancelled while queued: call %d gone %v", i, err)
			}
		}
		release()
		<-held
		if n, _ := f.c.Exists(bg, f.key("m")).Result(); n != 0 {
			t.Error("a call DoMany gave up on while queued ran")
		}
	})
}

// Close answers the call on the wire, fails what is still queued with
// ErrClosed or runs it (never neither), and every call after it fails
// with ErrClosed at once. Closing twice is fine.
func TestClose(t *testing.T) {
	f := newFixture(t, testutil.RedisAddr(), 0, 0)
	ctx := context.Background()
	release, held := f.inFlight(t)
	errs := make([]error, 10)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { _, errs[i] = f.b.DoInt(ctx, "INCR", f.key("q")) })
	}
	f.queued(t, len(errs))
	closed := make(chan struct{})
	go func() { f.b.Close(); close(closed) }()
	release()
	<-held
	wg.Wait()
	<-closed
	ran := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ran++
		case !errors.Is(err, rediscoalesce.ErrClosed):
			t.Errorf("queued call %d at Close: %v", i, err)
		}
	}
	if n, _ := f.c.Get(ctx, f.key("q")).Int(); n != ran {
		t.Errorf("%d queued calls answered success, the counter says %d ran", ran, n)
	}

	f.b.Close()
	for range 50 {
		if _, err := f.b.DoInt(ctx, "INCR", f.key("after")); !errors.Is(err, rediscoalesce.ErrClosed) {
			t.Fatalf("after Close: %v, want ErrClosed", err)
		}
	}
	for range 20 {
		calls := []*rediscoalesce.Call{{Cmd: []any{"INCR", f.key("after")}, IntReply: true}, {Cmd: []any{"GET", f.key("after")}}}
		for i, err := range f.b.DoMany(ctx, calls) {
			if !errors.Is(err, rediscoalesce.ErrClosed) {
				t.Fatalf("DoMany after Close: call %d gone %v, want ErrClosed", i, err)
			}
		}
	}
	if n, _ := f.c.Exists(ctx, f.key("after")).Result(); n != 0 {
		t.Error("a call made after Close ran")
	}
}

// With waitReplicas every pipeline ends with WAIT on the connection that
// carried its writes. Too few replicas fails every call of it, though
// the writes stand on the master; enough replicas answers each call its
// own reply, scripts included.
func TestWaitReplicas(t *testing.T) {
	master := testutil.StartRedis(t)
	ctx := context.Background()
	script := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)

	t.Run("no replica", func(t *testing.T) {
		f := newFixture(t, master.Addr(), 1, 50*time.Millisecond)
		if f.b.WaitReplicas() != 1 {
			t.Fatalf("WaitReplicas = %d", f.b.WaitReplicas())
		}
		_, err := f.b.DoInt(ctx, "INCR", f.key("w"))
		if err == nil || !strings.Contains(err.Error(), "not enough replicas acknowledged the write") || !strings.Contains(err.Error(), "WAIT 1 50 answered 0") {
			t.Fatalf("INCR with no replica to WAIT for: %v", err)
		}
		if n, err := f.c.Get(ctx, f.key("w")).Int(); err != nil || n != 1 {
			t.Fatalf("the write on the master: %d %v, want it to stand", n, err)
		}
	})

	t.Run("one replica", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(master.Addr())
		replica := testutil.StartRedisWith(t, "--replicaof", host, port)
		rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
		defer rc.Close()
		testutil.Eventually(t, 20*time.Second, "the replica in sync", func() bool {
			info, err := rc.Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "master_link_status:up")
		})
		f := newFixture(t, master.Addr(), 1, 5*time.Second)
		release, held := f.inFlight(t)
		calls := []*rediscoalesce.Call{
			{Cmd: []any{"SET", f.key("s"), "v"}},
			{Script: script, Keys: []string{f.key("n")}, Args: []any{3}},
			{Cmd: []any{"INCR", f.key("s")}, IntReply: true},
			{Cmd: []any{"GET", f.key("missing")}},
		}
		done := make(chan []error)
		go func() { done <- f.b.DoMany(ctx, calls) }()
		f.queued(t, len(calls))
		release()
		gone := <-done
		<-held
		for i, err := range gone {
			if err != nil {
				t.Fatalf("call %d gone: %v", i, err)
			}
		}
		if calls[0].Err != nil || calls[0].Val != "OK" {
			t.Errorf("SET: %q %v", calls[0].Val, calls[0].Err)
		}
		if calls[1].Err != nil || calls[1].N != 3 {
			t.Errorf("script: %d %v", calls[1].N, calls[1].Err)
		}
		if calls[2].Err == nil || errors.Is(calls[2].Err, context.DeadlineExceeded) {
			t.Errorf("INCR of a string: %v, want Redis's own error", calls[2].Err)
		}
		if !calls[3].Absent || calls[3].Err != nil {
			t.Errorf("GET missing: absent %v err %v", calls[3].Absent, calls[3].Err)
		}
		if v, err := rc.Get(ctx, f.key("s")).Result(); err != nil || v != "v" {
			t.Errorf("the replica has %q %v: WAIT returned before it had the write", v, err)
		}
	})
}

// firstOfPipelines records the arguments of each pipeline's first
// command.
type firstOfPipelines struct {
	mu    sync.Mutex
	first [][]any
}

func (h *firstOfPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *firstOfPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *firstOfPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !handshake(cmds) {
			h.mu.Lock()
			h.first = append(h.first, cmds[0].Args())
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// A pipeline leads with a call whose reply is not usually nil, where it
// has one: go-redis treats a nil first reply as a failed pipeline and
// classifies it for a retry. The calls still get their own replies, the
// OftenNil ones keep their order among themselves, and *string
// arguments are sent as their strings.
func TestPipelineLeadsWithACallThatIsNotOftenNil(t *testing.T) {
	f := newFixture(t, testutil.RedisAddr(), 0, 0)
	h := &firstOfPipelines{}
	f.c.AddHook(h)
	ctx := context.Background()
	if err := f.c.Set(ctx, f.key("there"), "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	release, held := f.inFlight(t)
	k1, k2, there := f.key("new1"), f.key("new2"), f.key("there")
	calls := []*rediscoalesce.Call{
		{Cmd: []any{"SET", &k1, "a", "NX", "GET"}, OftenNil: true},
		{Cmd: []any{"SET", &k2, "b", "NX", "GET"}, OftenNil: true},
		{Cmd: []any{"SET", k1, "c", "NX", "GET"}, OftenNil: true},
		{Cmd: []any{"GET", &there}},
	}
	f.doManyQueued(t, release, held, calls)
	h.mu.Lock()
	first := h.first
	h.mu.Unlock()
	if len(first) != 1 || len(first[0]) != 2 || first[0][0] != "GET" {
		t.Fatalf("pipelines led with %v, want one pipeline led by the GET", first)
	}
	if !calls[0].Absent || !calls[1].Absent {
		t.Errorf("the first SET NX GET of new keys: absent %v, %v; want both nil replies", calls[0].Absent, calls[1].Absent)
	}
	if calls[2].Absent || calls[2].Val != "a" {
		t.Errorf("the second SET NX GET of %s = %q (absent %v), want \"a\": it ran before the first", k1, calls[2].Val, calls[2].Absent)
	}
	if calls[3].Val != "v" {
		t.Errorf("GET = %q, want v", calls[3].Val)
	}
	if v, _ := f.c.Get(ctx, k2).Result(); v != "b" {
		t.Errorf("%s = %q, want b: the *string key was not sent as its string", k2, v)
	}
}

// Run runs one call and leaves its reply in it.
func TestRun(t *testing.T) {
	f := newFixture(t, testutil.RedisAddr(), 0, 0)
	ctx := context.Background()
	k := f.key("run")
	c := &rediscoalesce.Call{Cmd: []any{"SET", &k, "x", "NX", "GET"}, OftenNil: true}
	if err := f.b.Run(ctx, c); err != nil || !c.Absent {
		t.Fatalf("Run of a new key: %v, absent %v", err, c.Absent)
	}
	c = &rediscoalesce.Call{Cmd: []any{"SET", &k, "y", "NX", "GET"}, OftenNil: true}
	if err := f.b.Run(ctx, c); err != nil || c.Absent || c.Val != "x" {
		t.Fatalf("Run again: %v, %q (absent %v), want \"x\"", err, c.Val, c.Absent)
	}
}
