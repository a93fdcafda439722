package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The Kafka failover section: how long the app gets nothing when one of
// two members of a group goes away. Each scenario runs two proxy
// processes (the real binary) in one group on a fresh topic, publishes at
// a steady -failover-rate, waits until both members hold partitions and
// every partition flows, and then:
//
//	(a) SIGTERM one member: it commits and leaves; the other takes over
//	(b) SIGKILL one member: the group notices after session_timeout
//	(c) SIGKILL one member every 1.5 s, twenty times, restarting it each
//	    time with the same instance id: how long after the last kill
//	    until every partition flows
//	(d) one member crash-loops for 60 s (SIGKILL 2 s after each start,
//	    restarted at once with the same instance id)
//
// Each member has its own group_instance_id (POD_NAME, as in a pod), and
// a restarted member keeps it. The app records every arrival with its
// partition (X-Dedupe-Partition). Three figures per scenario: the pause,
// the longest time no message at all reached the app; the partition
// stall, the longest time one partition delivered nothing; and others,
// the longest time one of the partitions the other (never signalled)
// member held before the first signal delivered nothing. A rebalance
// that stops every partition shows in others; one that moves only what
// changes owner leaves it at the publish interval.

// failoverKind is one scenario of the section.
type failoverKind int

const (
	failoverTerm failoverKind = iota
	failoverKill
	failoverBurst
)

const failoverLoop failoverKind = 3

var failoverKinds = []failoverKind{failoverTerm, failoverKill, failoverBurst, failoverLoop}

func (k failoverKind) letter() string { return string(rune('a' + int(k))) }

func (k failoverKind) label() string {
	switch k {
	case failoverTerm:
		return "SIGTERM one of two members"
	case failoverKill:
		return "SIGKILL one of two members"
	case failoverLoop:
		return fmt.Sprintf("one member crash-looping %s", loopFor)
	}
	return fmt.Sprintf("SIGKILL every %s, %d times", burstEvery, burstKills)
}

const (
	burstKills = 20
	burstEvery = 1500 * time.Millisecond
	// loopFor and loopUp: (d) kills the member loopUp after each start,
	// for loopFor.
	loopFor = 60 * time.Second
	loopUp  = 2 * time.Second
	// stallGap is what counts as a stall of a partition: at the rates
	// the section publishes, a partition gets a message every few ms.
	stallGap = time.Second
	// steadyFor is how long every partition must flow without a stall
	// before a scenario counts as resumed (and may end early).
	steadyFor = 5 * time.Second
)

// failoverRow is one scenario's result.
type failoverRow struct {
	kind failoverKind
	err  error
	// pause: the longest time without any arrival, from the last one
	// before the signal; stall: the same per partition, the longest.
	pause, stall time.Duration
	// others: the same as stall, over the partitions the member that is
	// never signalled held before the first signal.
	others time.Duration
	// resumed: from the last signal to the end of the last stall of any
	// partition; steady is false when the window ended before every
	// partition had flowed for steadyFor since.
	resumed time.Duration
	steady  bool
	target  time.Duration
	kills   int
	// exit (a): how long the SIGTERMed member took to exit.
	exit time.Duration
	// arrivals in the window, and duplicates among them (a key the app
	// saw before).
	arrivals, dups int
}

// failoverSection is the section's rows and the settings they ran with.
type failoverSection struct {
	missing            string
	session, heartbeat time.Duration
	rebalance, lease   time.Duration
	rate, partitions   int
	rows               []*failoverRow
}

// groupTiming is what the proxies run with: the flags, or the proxy's
// defaults.
func (o options) groupTiming() (session, heartbeat, rebalance, lease time.Duration) {
	session, heartbeat, rebalance, lease = 10*time.Second, time.Second, 30*time.Second, 30*time.Second
	if o.foSession > 0 {
		session = o.foSession
	}
	if o.foHeartbeat > 0 {
		heartbeat = o.foHeartbeat
	}
	if o.foRebalance > 0 {
		rebalance = o.foRebalance
	}
	if o.foLease > 0 {
		lease = o.foLease
	}
	return
}

func (b *bench) measureFailover(ctx context.Context) *failoverSection {
	s := &failoverSection{rate: b.o.foRate, partitions: b.o.partitions}
	s.session, s.heartbeat, s.rebalance, s.lease = b.o.groupTiming()
	if why := b.kafkaSupported(ctx); why != "" {
		s.missing = why
		return s
	}
	if b.kafka == nil {
		kb, err := startKafka(b.o)
		if err != nil {
			s.missing = "not measured: kfake did not start: " + err.Error()
			return s
		}
		b.kafka = kb
	}
	for _, k := range failoverKinds {
		if ctx.Err() != nil {
			break
		}
		if !strings.Contains(b.o.foWhich, k.letter()) {
			continue
		}
		r := b.runFailover(ctx, k, s)
		if r.err != nil {
			b.log.Warn("failover scenario failed", "scenario", k.letter(), "err", r.err)
		}
		s.rows = append(s.rows, r)
	}
	return s
}

// arrivalApp is the failover section's app: it records when each message
// arrived and on which partition.
type arrivalApp struct {
	url string
	srv *http.Server
	mu  sync.Mutex
	at  []time.Time
	par []int
	key []string
}

func startArrivalApp() (*arrivalApp, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &arrivalApp{url: "http://" + ln.Addr().String()}
	a.srv = &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *arrivalApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := time.Now()
	p, err := strconv.Atoi(r.Header.Get("X-Dedupe-Partition"))
	if err != nil {
		p = -1
	}
	a.mu.Lock()
	a.at = append(a.at, now)
	a.par = append(a.par, p)
	a.key = append(a.key, r.Header.Get("Idempotency-Key"))
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// since returns the arrivals from index i on.
func (a *arrivalApp) since(i int) (at []time.Time, par []int, key []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at[i:]), slices.Clone(a.par[i:]), slices.Clone(a.key[i:])
}

func (a *arrivalApp) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
}

// failoverRun is one scenario's topic, group, publisher and members.
type failoverRun struct {
	b       *bench
	id      string
	topic   string
	app     *arrivalApp
	members [2]*child
	starts  int
}

func (b *bench) runFailover(ctx context.Context, k failoverKind, s *failoverSection) *failoverRow {
	r := &failoverRow{kind: k}
	switch k {
	case failoverTerm:
		r.target = 3 * time.Second
	case failoverKill:
		r.target = s.session + 3*time.Second
	case failoverBurst, failoverLoop:
		r.target = s.session + 3*time.Second
	}
	id := fmt.Sprintf("bench-%s-failover-%s", b.runID, k.letter())
	d, err := b.kafka.newDest(ctx, id)
	if err != nil {
		r.err = fmt.Errorf("create topic: %w", err)
		return r
	}
	defer d.cleanup()
	app, err := startArrivalApp()
	if err != nil {
		r.err = err
		return r
	}
	defer app.close()
	run := &failoverRun{b: b, id: id, topic: id, app: app}
	defer run.stopAll()

	// The publisher runs for the whole scenario at a steady rate.
	pctx, stopPub := context.WithCancel(ctx)
	pubErr := make(chan error, 1)
	go func() { pubErr <- run.publish(pctx, d.(*kafkaDest)) }()
	defer func() {
		stopPub()
		if err := <-pubErr; err != nil && r.err == nil {
			r.err = fmt.Errorf("publish: %w", err)
		}
	}()

	for i := range run.members {
		if run.members[i], err = run.start(ctx, i); err != nil {
			r.err = err
			return r
		}
	}
	if err := run.waitSteady(ctx, d.(*kafkaDest).group()); err != nil {
		r.err = err
		return r
	}
	victim := run.members[1]
	others := run.held(ctx, d.(*kafkaDest).group(), run.instance(0))
	// signal is the first signal, t0 the last one.
	signal := time.Now()
	t0 := signal
	var minEnd, maxEnd time.Time
	switch k {
	case failoverTerm:
		exited := make(chan time.Duration, 1)
		_ = victim.cmd.Process.Signal(syscall.SIGTERM)
		go func() {
			<-victim.done
			exited <- time.Since(signal)
		}()
		defer func() {
			select {
			case r.exit = <-exited:
			case <-time.After(30 * time.Second):
			}
		}()
		minEnd, maxEnd = t0.Add(steadyFor), t0.Add(20*time.Second)
	case failoverKill:
		victim.kill()
		minEnd, maxEnd = t0.Add(s.session+steadyFor), t0.Add(s.session+s.rebalance+steadyFor)
	case failoverBurst:
		for i := range burstKills {
			if i > 0 && !sleepUntil(ctx, signal.Add(time.Duration(i)*burstEvery)) {
				r.err = ctx.Err()
				return r
			}
			t0 = time.Now()
			run.members[1].kill()
			r.kills++
			if run.members[1], err = run.start(ctx, 1); err != nil {
				r.err = err
				return r
			}
		}
		minEnd, maxEnd = t0.Add(s.session+steadyFor), t0.Add(s.session+s.rebalance+steadyFor)
	case failoverLoop:
		for time.Since(signal) < loopFor {
			if !sleepUntil(ctx, time.Now().Add(loopUp)) {
				r.err = ctx.Err()
				return r
			}
			t0 = time.Now()
			run.members[1].kill()
			r.kills++
			if run.members[1], err = run.start(ctx, 1); err != nil {
				r.err = err
				return r
			}
		}
		minEnd, maxEnd = t0.Add(s.session+steadyFor), t0.Add(s.session+s.rebalance+steadyFor)
	}
	if b.o.foWindow > 0 {
		maxEnd = t0.Add(b.o.foWindow)
	}
	// The window ends once the minimum has passed and every partition
	// has flowed for steadyFor since its last stall, or at the maximum.
	for {
		if !sleepUntil(ctx, time.Now().Add(250*time.Millisecond)) {
			r.err = ctx.Err()
			return r
		}
		now := time.Now()
		if now.After(maxEnd) {
			break
		}
		if now.After(minEnd) {
			at, par, _ := app.since(0)
			if end, ok := lastStallEnd(at, par, t0, s.partitions); ok && now.Sub(end) >= steadyFor {
				break
			}
		}
	}
	end := time.Now()
	at, par, keys := app.since(0)
	seen := map[string]bool{}
	for i, key := range keys {
		if at[i].Before(signal) {
			seen[key] = true
			continue
		}
		r.arrivals++
		if seen[key] {
			r.dups++
		}
		seen[key] = true
	}
	r.pause, r.stall = gaps(at, par, signal, end, s.partitions)
	r.others = stallOf(at, par, signal, end, others)
	last, ok := lastStallEnd(at, par, t0, s.partitions)
	r.steady = ok && end.Sub(last) >= steadyFor
	r.resumed = last.Sub(t0)
	return r
}

// gaps returns, over [t0, end], the longest time without any arrival and
// the longest time some partition had none. A gap that spans t0 counts
// from the last arrival before it.
func gaps(at []time.Time, par []int, t0, end time.Time, partitions int) (pause, stall time.Duration) {
	lastAny := time.Time{}
	last := make([]time.Time, partitions)
	for i, t := range at {
		if t.Before(t0) {
			lastAny = t
			if p := par[i]; p >= 0 && p < partitions {
				last[p] = t
			}
			continue
		}
		if !lastAny.IsZero() {
			pause = max(pause, t.Sub(lastAny))
		}
		lastAny = t
		if p := par[i]; p >= 0 && p < partitions {
			if !last[p].IsZero() {
				stall = max(stall, t.Sub(last[p]))
			}
			last[p] = t
		}
	}
	// Still nothing at the end of the window.
	if !lastAny.IsZero() {
		pause = max(pause, end.Sub(lastAny))
	}
	for _, l := range last {
		if !l.IsZero() {
			stall = max(stall, end.Sub(l))
		} else {
			stall = max(stall, end.Sub(t0))
		}
	}
	return pause, stall
}

// stallOf is the longest time over [t0, end] that one of parts had no
// arrival; a gap that spans t0 counts from the last arrival before it.
func stallOf(at []time.Time, par []int, t0, end time.Time, parts []int) time.Duration {
	last := map[int]time.Time{}
	for _, p := range parts {
		last[p] = time.Time{}
	}
	var stall time.Duration
	for i, t := range at {
		l, ok := last[par[i]]
		if !ok {
			continue
		}
		if !t.Before(t0) && !l.IsZero() {
			stall = max(stall, t.Sub(l))
		}
		last[par[i]] = t
	}
	for _, l := range last {
		if l.IsZero() {
			l = t0
		}
		stall = max(stall, end.Sub(l))
	}
	return stall
}

// lastStallEnd is when the last stall (a gap over stallGap) of any
// partition after t0 ended; t0 when there was none. ok is false while a
// partition has not delivered since its last stall began.
func lastStallEnd(at []time.Time, par []int, t0 time.Time, partitions int) (time.Time, bool) {
	end := t0
	last := make([]time.Time, partitions)
	for i, t := range at {
		p := par[i]
		if p < 0 || p >= partitions {
			continue
		}
		if !t.Before(t0) && !last[p].IsZero() && t.Sub(last[p]) > stallGap && t.After(end) {
			end = t
		}
		last[p] = t
	}
	now := time.Now()
	for _, l := range last {
		if l.IsZero() || now.Sub(l) > stallGap {
			return now, false
		}
	}
	return end, true
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// publish writes unique keys at -failover-rate until ctx ends.
func (run *failoverRun) publish(ctx context.Context, d *kafkaDest) error {
	p, err := d.pacer(ctx)
	if err != nil {
		return err
	}
	interval := time.Second / time.Duration(run.b.o.foRate)
	start := time.Now()
	for j := 0; ctx.Err() == nil; j++ {
		if !sleepUntil(ctx, start.Add(time.Duration(j)*interval)) {
			break
		}
		key := run.id + "-" + strconv.Itoa(j)
		if err := p.send(key, run.b.body(time.Now().UnixNano(), key)); err != nil {
			_ = p.close()
			return err
		}
	}
	return p.close()
}

// instance is member i's group_instance_id, the same across its
// restarts, as a pod's name is across container restarts.
func (run *failoverRun) instance(i int) string { return fmt.Sprintf("%s-pod%d", run.id, i) }

// start starts member i (again).
func (run *failoverRun) start(ctx context.Context, i int) (*child, error) {
	b := run.b
	run.starts++
	name := fmt.Sprintf("%s-m%d", run.id, run.starts)
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	session, heartbeat, rebalance, lease := b.o.groupTiming()
	cfg := fmt.Sprintf(`consumer: bench
shutdown_timeout: 10s
log: {level: info, format: json}
admin: {listen: "%s"}
app:
  url: "%s"
  max_conns: %d
seenset:
  backend: %s
  ttl: 1h
  lease: %s
  redis:
    addrs: ["%s"]
    prefix: "%s:"
sources:
  - name: bench
    path: /bench
    type: kafka
    kafka:
      brokers: ["%s"]
      topics: ["%s"]
      group: "%s-group"
      session_timeout: %s
      heartbeat_interval: %s
      rebalance_timeout: %s
`, admin, run.app.url, b.o.workers, b.o.seenset, lease, b.redis.addr, run.id,
		b.kafka.addr, run.topic, run.topic, session, heartbeat, rebalance)
	cfgPath := filepath.Join(b.dir, name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	return startChild(ctx, b.o.proxy, []string{"run", "--config", cfgPath}, []string{"POD_NAME=" + run.instance(i)}, admin, filepath.Join(b.dir, name+".log"), true)
}

// waitSteady waits until the group is stable with both members holding
// partitions and every partition has delivered within the last second,
// for two seconds on end.
func (run *failoverRun) waitSteady(ctx context.Context, group string) error {
	deadline := time.Now().Add(60 * time.Second)
	var since time.Time
	for {
		for _, m := range run.members {
			if err := m.exited(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group did not settle with both members within 60s (logs in %s)", run.b.dir)
		}
		ok := run.bothAssigned(ctx, group) && run.allFlowing()
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= 2*time.Second:
			return nil
		}
		if !sleepUntil(ctx, time.Now().Add(200*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// held returns the partitions the member with instance id holds, as
// the group describes them now.
func (run *failoverRun) held(ctx context.Context, group, instance string) []int {
	members, ok := run.describe(ctx, group)
	if !ok {
		return nil
	}
	return members[instance]
}

// describe returns the partitions each member holds, by instance id
// (member id when it has none); false unless the group is stable.
func (run *failoverRun) describe(ctx context.Context, group string) (map[string][]int, bool) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, run.b.kafka.client)
	if err != nil || len(resp.Groups) != 1 || kerr.ErrorForCode(resp.Groups[0].ErrorCode) != nil {
		return nil, false
	}
	g := resp.Groups[0]
	if g.State != "Stable" {
		return nil, false
	}
	out := map[string][]int{}
	for _, m := range g.Members {
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(m.MemberAssignment); err != nil {
			return nil, false
		}
		name := m.MemberID
		if m.InstanceID != nil {
			name = *m.InstanceID
		}
		out[name] = nil
		for _, t := range a.Topics {
			for _, p := range t.Partitions {
				out[name] = append(out[name], int(p))
			}
		}
	}
	return out, true
}

func (run *failoverRun) bothAssigned(ctx context.Context, group string) bool {
	members, ok := run.describe(ctx, group)
	if !ok || len(members) != 2 {
		return false
	}
	for _, ps := range members {
		if len(ps) == 0 {
			return false
		}
	}
	return true
}

func (run *failoverRun) allFlowing() bool {
	run.app.mu.Lock()
	defer run.app.mu.Unlock()
	seen := make([]bool, run.b.o.partitions)
	n := 0
	cut := time.Now().Add(-time.Second)
	for i := len(run.app.at) - 1; i >= 0 && run.app.at[i].After(cut); i-- {
		if p := run.app.par[i]; p >= 0 && p < len(seen) && !seen[p] {
			seen[p] = true
			n++
		}
	}
	return n == len(seen)
}

func (run *failoverRun) stopAll() {
	var wg sync.WaitGroup
	for _, m := range run.members {
		if m == nil {
			continue
		}
		wg.Go(func() {
			select {
			case <-m.done:
			default:
				_ = m.stop()
			}
		})
	}
	wg.Wait()
}

// kill SIGKILLs the child and waits for it to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

func (s *failoverSection) print(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Kafka failover (kfake, %d partitions, two proxy processes in one group, static members, %d msgs/s published):\n", s.partitions, s.rate)
	if s.missing != "" {
		fmt.Fprintln(w, "  "+s.missing)
		return
	}
	fmt.Fprintf(w, "  session_timeout %s, heartbeat_interval %s, rebalance_timeout %s, seenset.lease %s\n",
		s.session, s.heartbeat, s.rebalance, s.lease)
	const head = "  %-36s %9s %9s %9s %9s %9s   %-22s %s\n"
	fmt.Fprintf(w, head, "", "pause", "partition", "others", "resumed", "member", "target", "")
	fmt.Fprintf(w, head, "", "(no msg)", "stall", "stall", "after", "exit", "", "")
	for _, r := range s.rows {
		name := fmt.Sprintf("(%s) %s", r.kind.letter(), r.kind.label())
		if r.err != nil {
			fmt.Fprintf(w, "  %-36s error: %v\n", name, r.err)
			continue
		}
		resumed, exit := "-", "-"
		ok := r.steady
		var target string
		switch r.kind {
		case failoverTerm, failoverKill:
			// The moved partitions within the target, the others never
			// stopped.
			ok = ok && r.stall <= r.target && r.others <= stallGap
			target = fmt.Sprintf("stall ≤ %s, others ≤ %s", secs(r.target), secs(stallGap))
		case failoverBurst:
			resumed = secs(r.resumed)
			ok = ok && r.resumed <= r.target
			target = fmt.Sprintf("resumed ≤ %s", secs(r.target))
		case failoverLoop:
			resumed = secs(r.resumed)
			ok = ok && r.others <= stallGap && r.resumed <= r.target
			target = fmt.Sprintf("others ≤ %s, resumed ≤ %s", secs(stallGap), secs(r.target))
		}
		if r.exit > 0 {
			exit = secs(r.exit)
		}
		verdict := "MISS"
		if ok {
			verdict = "ok"
		}
		if !r.steady {
			verdict += " (not steady at the end of the window)"
		}
		if r.kills > 0 {
			verdict += fmt.Sprintf(" [%d kills]", r.kills)
		}
		fmt.Fprintf(w, head, name, secs(r.pause), secs(r.stall), secs(r.others), resumed, exit, target, verdict)
	}
	fmt.Fprintln(w, "  pause: the longest time no message reached the app, from the last arrival before the signal;")
	fmt.Fprintln(w, "  partition stall: the longest time one partition delivered nothing;")
	fmt.Fprintln(w, "  others stall: the same over the partitions the never-signalled member held before the first signal")
	fmt.Fprintf(w, "  (a publish interval when they never stopped); resumed after (c), (d): from the last kill to the end of\n")
	fmt.Fprintf(w, "  the last stall over %s of any partition; steady: every partition then flowed for %s. The kills of\n", stallGap, steadyFor)
	fmt.Fprintln(w, "  (c) and (d) restart the member at once with its instance id; their pause and stall span the kills.")
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
