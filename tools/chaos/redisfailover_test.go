//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The Redis failover suite (make redis-failover): two real proxies on one
// RabbitMQ queue keep their seen-set on a Redis Cluster (3 masters, 1
// replica each) or a Sentinel group (master, 2 replicas, 3 sentinels);
// mid-run the master holding part of the keys is SIGKILLed and a replica
// promoted. Redis replicates asynchronously, so the writes the replica
// had not received when its master died are gone: a done mark lost so is
// a message that a later duplicate brings to the app again. On loopback a
// replica lags well under a millisecond, so the suite first cuts the
// replicas off the doomed master for failoverLag (the master drops their
// links and refuses them PSYNC), as a network blip or a busy replica
// would, and only then kills the master. It snapshots the master's keys
// just before the kill (writes paused) and the replica's just after, and
// traces each double effect to a key whose write the failover lost; one
// it cannot trace fails the run. Then the same with
// seenset.redis.wait_replicas: 1, which must leave no double at all.
//
// The app's faults are off, but on a shared machine the app itself can
// stall (its fsync) for longer than app.timeout. The proxy waits for such
// a request with the key held (the slow lines counted per row); a proxy
// that let go of it would overlap it with a second request, a double no
// lost write explains.

const (
	failoverMessages = 10000
	failoverLag      = time.Second
	failoverPrefix   = "fo:"
	// The stored key of a message key: prefix, consumer, key space.
	failoverKeyPrefix = failoverPrefix + "failover:payments:"
)

type failoverResult struct {
	setup, wait                string
	messages, unique           int
	lost, naive, honouring     int
	traced, lostWrites         int
	failovers                  int
	events                     proxyEvents
	failoverSecs, drainMsgsSec float64
}

const failoverAppTimeout = 2 * time.Second

// redisLogLine is a line a server logged about its role or its
// replication links (not its banner, nor a cut-off replica's retries).
var redisLogLine = regexp.MustCompile(`^\d+:[MSC] .*(MASTER MODE|REPLICAOF|Connection with|secondary replication ID|Full resync|Partial resynchronization accepted|Synchronization with replica|Starting BGSAVE|Discarding previously cached)`)

// topology is what differs between Cluster and Sentinel.
type topology interface {
	name() string
	yaml() string // the seenset.redis addrs / master_name lines
	// victim is the master to kill (holding key's slot for Cluster) and
	// the replicas that may take over.
	victim(ctx context.Context, key string) (*testutil.RedisNode, []*testutil.RedisNode, error)
	// promoted waits until a replica replaced victim and returns it.
	promoted(ctx context.Context, victim *testutil.RedisNode, key string) (*testutil.RedisNode, error)
	healthy() error
	readOnly() bool // replicas answer reads only after READONLY (Cluster)
	// failovers counts the promotions the nodes or sentinels logged: 1
	// is the suite's; more is a failover nobody caused on purpose, whose
	// lost writes no snapshot covers.
	failovers() int
	// restart brings the killed victim back once promoted replaced it.
	restart(victim, promoted *testutil.RedisNode) error
}

type clusterTopo struct{ c *testutil.RedisCluster }

func (c clusterTopo) name() string { return "Cluster 3×(1+1)" }
func (c clusterTopo) yaml() string {
	return fmt.Sprintf("    addrs: [%s]\n", quoteAll(c.c.Addrs()))
}
func (c clusterTopo) victim(ctx context.Context, key string) (*testutil.RedisNode, []*testutil.RedisNode, error) {
	m, err := c.c.MasterOf(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	r, err := c.c.ReplicaOf(ctx, m)
	if err != nil {
		return nil, nil, err
	}
	return m, []*testutil.RedisNode{r}, nil
}
func (c clusterTopo) promoted(ctx context.Context, victim *testutil.RedisNode, key string) (*testutil.RedisNode, error) {
	for {
		if m, err := c.c.MasterOf(ctx, key); err == nil && m != victim {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
func (c clusterTopo) healthy() error { return c.c.WaitHealthy(60 * time.Second) }
func (c clusterTopo) readOnly() bool { return true }

// failovers: the masters that vote log each election they grant a vote
// in (the winner's own log may be cut short: a replica refused its sync
// logs every retry); one election per winner and epoch.
func (c clusterTopo) failovers() int {
	elections := map[string]bool{}
	for _, node := range c.c.Nodes() {
		for _, m := range clusterVote.FindAllStringSubmatch(node.Output(), -1) {
			elections[m[1]] = true
		}
	}
	return len(elections)
}

var clusterVote = regexp.MustCompile(`Failover auth granted to (\S+ for epoch \d+)`)

// restart: a Cluster node comes back from its nodes.conf as a replica of
// whoever took its slots.
func (c clusterTopo) restart(victim, _ *testutil.RedisNode) error { return victim.Restart() }

type sentinelTopo struct{ s *testutil.RedisSentinel }

func (s sentinelTopo) name() string { return "Sentinel 1+2, 3 sentinels" }
func (s sentinelTopo) yaml() string {
	return fmt.Sprintf("    addrs: [%s]\n    master_name: %s\n", quoteAll(s.s.SentinelAddrs()), s.s.MasterName)
}
func (s sentinelTopo) victim(ctx context.Context, _ string) (*testutil.RedisNode, []*testutil.RedisNode, error) {
	m, err := s.s.Master(ctx)
	if err != nil {
		return nil, nil, err
	}
	var rs []*testutil.RedisNode
	for _, n := range s.s.Servers {
		if n != m {
			rs = append(rs, n)
		}
	}
	return m, rs, nil
}
func (s sentinelTopo) promoted(ctx context.Context, victim *testutil.RedisNode, _ string) (*testutil.RedisNode, error) {
	for {
		if m, err := s.s.Master(ctx); err == nil && m != victim {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
func (s sentinelTopo) healthy() error { return s.s.WaitHealthy(60 * time.Second) }
func (s sentinelTopo) readOnly() bool { return false }

// failovers: each sentinel logs every switch it learns of; the most any
// of them logged.
func (s sentinelTopo) failovers() int {
	n := 0
	for _, sn := range s.s.Sentinels {
		n = max(n, strings.Count(sn.Output(), "+switch-master"))
	}
	return n
}

// restart brings the old master back as a replica of the promoted one. A
// node without persistence that came back as an empty master would
// accept claims and commits until the sentinels demote it, and lose them
// then: keys acted on again that no snapshot before the kill could show.
// Deployments must restart it as a replica (or give it persistence).
func (s sentinelTopo) restart(victim, promoted *testutil.RedisNode) error {
	return victim.RestartAsReplicaOf(promoted.Addr())
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = `"` + s + `"`
	}
	return strings.Join(q, ", ")
}

func TestRedisFailover(t *testing.T) {
	var results []failoverResult
	for _, setup := range failoverSetups() {
		for _, wait := range []int{0, 1} {
			name := fmt.Sprintf("%s/wait%d", setup, wait)
			t.Run(name, func(t *testing.T) {
				var topo topology
				if setup == "cluster" {
					topo = clusterTopo{testutil.StartRedisCluster(t, testutil.RedisClusterOptions{NodeTimeout: time.Second})}
				} else {
					// 2 s, not 1 s: on two loaded cores the sentinels once
					// marked the master they had just promoted down after
					// 1 s and failed over a second time, discarding the
					// writes it had taken (about 1 run in 19). That is a
					// real hazard of a down-after that short, and
					// docs/redis.md says so; this suite measures one
					// failover.
					topo = sentinelTopo{testutil.StartRedisSentinel(t, testutil.RedisSentinelOptions{DownAfter: 2 * time.Second})}
				}
				results = append(results, runFailover(t, topo, wait))
			})
		}
	}
	fmt.Println()
	fmt.Printf("Redis failover under load: %d messages (30%% duplicates), two proxies, RabbitMQ; replicas cut off from the master for %v before it is SIGKILLed\n\n", failoverMessages, failoverLag)
	fmt.Println("Honouring app: the recorded requests replayed through an app that acts once per Idempotency-Key. Timeout lines: slow (no answer within app.timeout, waited for) / abandoned (none within app.max_request_time) / no answer (connection lost or cut short, key kept).")
	fmt.Println()
	fmt.Println("| setup | wait_replicas | messages | unique keys | lost | keys effected ≥2× (naive app) | of them traced to a write the failover lost | keys effected ≥2× (honouring app) | writes lost by the failover | failovers | timeout lines slow / abandoned / no answer | lease lost | commit_failed | seconds to promotion | msgs/s (drain, healthy) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %d | %d | %.1f | %.0f |\n",
			r.setup, r.wait, r.messages, r.unique, r.lost, r.naive, r.traced, r.honouring, r.lostWrites, r.failovers,
			r.events.timeouts(), r.events.leaseLost, r.events.commitFailed, r.failoverSecs, r.drainMsgsSec)
	}
}

func runFailover(t *testing.T, topo topology, wait int) failoverResult {
	res := failoverResult{setup: topo.name(), wait: fmt.Sprint(wait)}
	r := testutil.NewRabbit(t)
	env := &rabbitEnv{rabbit: r, relay: testutil.NewRelay(t, "127.0.0.1:5672"), queue: r.Queue("dptest.failover.", nil)}
	app := newEffectApp(t, time.Second, 0)
	// No app faults: every double effect here must come from Redis.
	app.setFaults(false)
	dir := t.TempDir()
	logDir := filepath.Join(dir, "logs")
	_ = os.MkdirAll(logDir, 0o755)
	if os.Getenv("CHAOS_KEEP_LOGS") != "" {
		logDir, _ = os.MkdirTemp("", "dedupe-failover-logs-")
		t.Logf("proxy logs in %s", logDir)
	}
	bin := proxyBinary(t)
	var procs []*proc
	for n := range 2 {
		cfgPath := filepath.Join(dir, fmt.Sprintf("config-%d.yaml", n))
		cfg := fmt.Sprintf(`consumer: failover
shutdown_timeout: 10s
log: {level: info, format: json}
app:
  url: %s
  timeout: %v
seenset:
  lease: 5s
  redis:
%s    prefix: "%s"
    dial_timeout: 500ms
    read_timeout: 1s
    write_timeout: 1s
    wait_replicas: %d
    wait_timeout: 200ms
delivery:
  max_attempts: 20
  backoff_initial: 50ms
  backoff_max: 1s
  busy_delay: 200ms
  commit_attempts: 30
%s`, app.url(n), failoverAppTimeout, topo.yaml(), failoverPrefix, wait, env.sourceYAML())
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, &proc{bin: bin, cfg: cfgPath, logDir: logDir, n: n})
	}
	for _, p := range procs {
		p.start(t)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, p := range procs {
		if !waitUntil(ctx, 100*time.Millisecond, p.ready) {
			t.Fatalf("proxy %d never became ready; logs in %s", p.n, logDir)
		}
	}

	pl := makePlan(failoverMessages, 0.3)
	res.messages, res.unique = failoverMessages, len(pl.unique)
	// The main stream paced over 10 s, each concurrent duplicate in the
	// chunk of its original; the later duplicates after the failover.
	index := map[string]int{}
	for i, k := range pl.unique {
		index[k] = i
	}
	var bodies [][]byte
	seen := map[string]bool{}
	for _, b := range pl.main {
		bodies = append(bodies, b)
		var env struct{ Meta struct{ ID string } }
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		if k := env.Meta.ID; !seen[k] {
			seen[k] = true
			if d, ok := pl.concurrent[index[k]]; ok {
				bodies = append(bodies, d)
			}
		}
	}
	pubDone, stopPub := make(chan struct{}), make(chan struct{})
	pub := env.publisher(t, false)
	go func() {
		defer close(pubDone)
		for i := 0; i < len(bodies); i += 100 {
			select {
			case <-stopPub:
				return
			case <-time.After(100 * time.Millisecond):
			}
			pub(bodies[i:min(i+100, len(bodies))])
		}
	}()
	// A failed run must not leave the publisher going.
	t.Cleanup(func() { close(stopPub); <-pubDone })

	if !waitUntil(ctx, 50*time.Millisecond, func() bool { return effectedShare(app, pl.unique) >= 0.35 }) {
		t.Fatal("the run never got going")
	}
	lost, promotedIn := killMaster(t, ctx, topo, failoverKeyPrefix+pl.unique[0])
	res.lostWrites, res.failoverSecs = len(lost), promotedIn.Seconds()

	<-pubDone
	if !waitUntil(ctx, 100*time.Millisecond, func() bool { return effectedShare(app, pl.unique) == 1 }) {
		t.Errorf("not every key was effected before the deadline")
	}
	// Duplicates of keys processed before and around the failover.
	env.publisher(t, false)(pl.later)
	drain(t, ctx, env, procs)

	counts, honouring, byMsg := app.counts(), app.honouring(), app.effectsOf()
	planned := map[string]bool{}
	var doubles []string
	for _, k := range pl.unique {
		planned[k] = true
		switch c := counts[k]; {
		case c == 0:
			res.lost++
		case c > 1:
			res.naive++
			doubles = append(doubles, k)
		}
		if honouring[k] > 1 {
			res.honouring++
		}
	}
	for _, es := range byMsg {
		for _, e := range es {
			if !planned[e.key] {
				t.Errorf("the app saw Idempotency-Key %q for message %q: an honouring app could not dedupe it", e.key, e.id)
			}
		}
	}
	var untraced []string
	for _, k := range doubles {
		if lost[failoverKeyPrefix+k] {
			res.traced++
		} else {
			untraced = append(untraced, k)
		}
	}
	res.events = countEvents(logDir)
	res.failovers = topo.failovers()

	// Throughput with the group healthy again (the killed node back as a
	// replica): a fresh backlog drained by both proxies.
	if err := topo.healthy(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		p.start(t)
	}
	for _, p := range procs {
		if !waitUntil(ctx, 100*time.Millisecond, p.ready) {
			t.Fatalf("proxy %d never became ready again; logs in %s", p.n, logDir)
		}
	}
	bench := makePlan(failoverMessages, 0.3)
	var backlog [][]byte
	backlog = append(backlog, bench.main...)
	for _, d := range bench.concurrent {
		backlog = append(backlog, d)
	}
	backlog = append(backlog, bench.later...)
	start := time.Now()
	env.publisher(t, false)(backlog)
	waitUntil(ctx, 20*time.Millisecond, func() bool { return effectedShare(app, bench.unique) == 1 && env.pending(t) == 0 })
	res.drainMsgsSec = float64(len(backlog)) / time.Since(start).Seconds()
	drain(t, ctx, env, procs)

	t.Logf("%+v", res)
	if res.lost != 0 {
		t.Errorf("LOST %d keys", res.lost)
	}
	if res.honouring != 0 {
		t.Errorf("honouring app: %d keys effected twice, want 0", res.honouring)
	}
	if len(untraced) > 0 {
		// The failover may only cause the doubles its lost writes
		// explain. Any other (the app's requests and the proxies' lines
		// for the first few, and the sentinels' view of the failovers,
		// are logged to trace it) fails the run.
		sort.Strings(untraced)
		t.Errorf("%d keys effected twice at the naive app that no write lost by the failover explains: %v", len(untraced), untraced[:min(10, len(untraced))])
		if res.failovers > 1 {
			t.Errorf("there were %d failovers, not the suite's one: a later one (a master taken for down, as a freshly promoted one can be when it answers the sentinels' or peers' pings late) discards the writes made on the master it demotes, and the suite has no snapshot of those; the logs below show when", res.failovers)
		}
		for _, k := range untraced[:min(3, len(untraced))] {
			for _, e := range byMsg[k] {
				t.Logf("  %s: %v", k, e)
			}
			for _, l := range keyLines(logDir, k, 12) {
				t.Logf("  %s", l)
			}
		}
		if st, ok := topo.(sentinelTopo); ok {
			for _, sn := range st.s.Sentinels {
				for _, l := range strings.Split(sn.Output(), "\n") {
					if strings.Contains(l, "switch-master") || strings.Contains(l, "+sdown master") || strings.Contains(l, "+odown") {
						t.Logf("sentinel %s: %s", sn.Addr(), l)
					}
				}
			}
			for _, n := range st.s.Servers {
				for _, l := range strings.Split(n.Output(), "\n") {
					if redisLogLine.MatchString(l) {
						t.Logf("server %s: %s", n.Addr(), l)
					}
				}
			}
		}
	}
	if wait > 0 && res.naive > 0 {
		t.Errorf("wait_replicas %d: %d keys effected twice at the naive app, want 0", wait, res.naive)
	}
	return res
}

// killMaster cuts the victim's replicas off for failoverLag, pauses the
// victim's writes, snapshots its keys, SIGKILLs it, snapshots what the
// replicas hold, waits for one to be promoted and restarts the victim
// (it rejoins as a replica). It returns the stored keys whose write the
// promoted replica lacks, and how long the promotion took.
func killMaster(t *testing.T, ctx context.Context, topo topology, key string) (map[string]bool, time.Duration) {
	victim, replicas, err := topo.victim(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	vc := redis.NewClient(&redis.Options{Addr: victim.Addr()})
	defer vc.Close()
	// Cut the replicas off: the master refuses them the replication
	// commands (the proxies never use them) and drops their links, so
	// they fall behind by every write of the next failoverLag.
	if err := vc.Do(ctx, "ACL", "SETUSER", "default", "-psync", "-sync").Err(); err != nil {
		t.Fatal(err)
	}
	if err := vc.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(failoverLag)
	if err := vc.Do(ctx, "CLIENT", "PAUSE", 10000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, ctx, vc)
	victim.Kill()
	killed := time.Now()
	after := map[*testutil.RedisNode]map[string]string{}
	for _, r := range replicas {
		o := &redis.Options{Addr: r.Addr()}
		if topo.readOnly() {
			// A Cluster replica answers reads on connections that said
			// READONLY.
			o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
		}
		rc := redis.NewClient(o)
		after[r] = snapshot(t, ctx, rc)
		_ = rc.Close()
	}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	promoted, err := topo.promoted(pctx, victim, key)
	if err != nil {
		t.Fatalf("no replica promoted within 60s of the kill: %v", err)
	}
	took := time.Since(killed)
	if err := topo.restart(victim, promoted); err != nil {
		t.Fatal(err)
	}
	lost := map[string]bool{}
	kept := after[promoted]
	for k, v := range before {
		if w, ok := kept[k]; !ok || (strings.HasPrefix(v, "done:") && !strings.HasPrefix(w, "done:")) {
			lost[k] = true
		}
	}
	t.Logf("%s: killed %s with %d keys; %s promoted after %v holding %d of them; %d writes lost",
		topo.name(), victim.Addr(), len(before), promoted.Addr(), took.Round(10*time.Millisecond), len(before)-len(lost), len(lost))
	return lost, took
}

// snapshot reads every key under the failover prefix with its value.
func snapshot(t *testing.T, ctx context.Context, c *redis.Client) map[string]string {
	var keys []string
	iter := c.Scan(ctx, 0, failoverPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var errs int
	for i := 0; i < len(keys); i += 500 {
		chunk := keys[i:min(i+500, len(keys))]
		pipe := c.Pipeline()
		cmds := make([]*redis.StringCmd, len(chunk))
		for j, k := range chunk {
			cmds[j] = pipe.Get(ctx, k)
		}
		_, _ = pipe.Exec(ctx)
		for j, k := range chunk {
			v, err := cmds[j].Result()
			switch {
			case err == nil:
				out[k] = v
			case err != redis.Nil:
				errs++
				if errs == 1 {
					t.Logf("snapshot of %s: GET %s: %v", c.Options().Addr, k, err)
				}
			}
		}
	}
	if errs > 0 {
		t.Fatalf("snapshot of %s: %d of %d GETs failed", c.Options().Addr, errs, len(keys))
	}
	return out
}

// drain waits until the queue is empty, stops the proxies gracefully and
// runs them again until nothing is left.
func drain(t *testing.T, ctx context.Context, env *rabbitEnv, procs []*proc) {
	for round := 0; ; round++ {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		waitUntil(wctx, 200*time.Millisecond, func() bool { return env.pending(t) == 0 })
		cancel()
		for _, p := range procs {
			if code := p.term(t); code != 0 {
				t.Errorf("proxy %d exited %d after SIGTERM", p.n, code)
			}
		}
		left := env.pending(t)
		if left == 0 {
			return
		}
		if round == 4 {
			t.Errorf("%d messages never settled", left)
			return
		}
		for _, p := range procs {
			p.start(t)
		}
	}
}

// failoverSetups: FAILOVER_SETUPS=cluster (or sentinel) runs one only.
func failoverSetups() []string {
	if s := os.Getenv("FAILOVER_SETUPS"); s != "" {
		return strings.Split(s, ",")
	}
	return []string{"cluster", "sentinel"}
}
