package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// rowKind is one of the four rows of a broker.
type rowKind int

const (
	bareConsumer rowKind = iota
	bareForwarder
	proxyUnique
	proxyHalfDup
	// proxyKeyOrder is Kafka only: the proxy with ordering key, 0%
	// duplicates, compared with the bare partition-order forwarder.
	proxyKeyOrder
	// proxyBaseline is (c) again with another proxy binary (-baseline),
	// run right after (c): a before/after of the same row in one run.
	proxyBaseline
)

var rowKinds = []rowKind{bareConsumer, bareForwarder, proxyUnique, proxyHalfDup}

// kindsFor are the rows of one broker, in the order they run: Kafka adds
// the key-ordering row, -baseline its row right after (c).
func (b *bench) kindsFor(br broker) []rowKind {
	out := []rowKind{bareConsumer, bareForwarder, proxyUnique}
	if b.o.baseline != "" {
		out = append(out, proxyBaseline)
	}
	out = append(out, proxyHalfDup)
	if _, ok := br.(*kafkaBroker); ok {
		out = append(out, proxyKeyOrder)
	}
	if b.o.rows == "" {
		return out
	}
	want := strings.Split(b.o.rows, ",")
	return slices.DeleteFunc(out, func(k rowKind) bool { return !slices.Contains(want, k.letter()) })
}

func (k rowKind) letter() string {
	if k == proxyBaseline {
		return "c0"
	}
	return string(rune('a' + int(k)))
}

func (k rowKind) label() string {
	switch k {
	case bareConsumer:
		return "bare consumer (consume+ack)"
	case bareForwarder:
		return "bare forwarder (POST, no dedupe)"
	case proxyUnique:
		return "dedupe-proxy, 0% duplicates"
	case proxyKeyOrder:
		return "dedupe-proxy, ordering: key, 0% dups"
	case proxyBaseline:
		return "-baseline binary, 0% duplicates"
	}
	return "dedupe-proxy, 50% duplicates"
}

func (k rowKind) isProxy() bool {
	return k == proxyUnique || k == proxyHalfDup || k == proxyKeyOrder || k == proxyBaseline
}

// broker is a message system the rows run against.
type broker interface {
	name() string  // for the table: "RabbitMQ", "Kafka (kfake)"
	short() string // for queue, topic and file names
	// serverPID is the broker server's process, for its CPU time; 0 when
	// it is not a separate local process.
	serverPID() int
	// newDest creates one row's fresh queue or topic.
	newDest(ctx context.Context, id string) (dest, error)
}

// dest is one row's queue or topic (and consumer group).
type dest interface {
	// publish publishes n messages, key(i) and a body, as fast as the
	// broker takes them, and returns once it holds every one.
	publish(ctx context.Context, n int, key func(int) string, body func(ts int64, key string) []byte) error
	// pacer starts a publisher for the latency phase.
	pacer(ctx context.Context) (pacer, error)
	// proxySource is the YAML of sources[0] from "type:" on, indented by
	// four spaces.
	proxySource() string
	// bareArgs are the arguments of the bare child processes.
	bareArgs() []string
	// inflightBound is what the proxy's in-flight gauge must never exceed.
	inflightBound() int
	// setOrdering sets the Kafka ordering of this destination's proxy
	// ("" keeps -kafka-ordering); RabbitMQ ignores it.
	setOrdering(string)
	cleanup()
}

type pacer interface {
	send(key string, body []byte) error
	// close waits until the broker holds every message sent.
	close() error
}

// row is one measured line of the table.
type row struct {
	kind rowKind
	err  error

	drained     int64 // messages in the timed window [t0, t2]
	drainTime   time.Duration
	rate        float64 // msgs/s
	cpuPer100k  float64 // CPU seconds of the consumer process per 100k messages
	cpuRedis    float64 // the same for the private redis-server
	redisCPU    float64 // Redis INFO used_cpu_sys+used_cpu_user per 100k messages (µs resolution)
	cpuSelf     float64 // the same for this process (the app, the publisher, kfake)
	cpuBroker   float64 // the same for the RabbitMQ server (0 for kfake, which is in this process)
	cpuRest     float64 // the same for every other process on the machine: noise
	busyPct     float64 // share of all cores busy during the drain
	rssMiB      float64 // VmHWM
	hasRedis    bool
	tripsPerMsg float64 // Redis reads processed (network round trips) per message, drain
	cmdsPerMsg  float64 // INFO commandstats calls per message, drain, scripts' inner calls included
	scriptsMsg  float64 // EVAL/EVALSHA per message, drain
	tripsPaced  float64 // round trips per message in the paced (steady) phase
	// Redis rows: what the drain cost the broker Redis (the second
	// private redis-server), per message, for every row (bare ones too).
	broker *brokerRedisCost
	// instrPerMsg joins the instructions section's count of this row's
	// consumer when it ran in the same invocation (0: not counted).
	instrPerMsg float64
	latN        int
	p50, p99    time.Duration
	latWhat     string  // "publish→app" or "publish→consume"
	skipRate    float64 // (d): duplicates skipped per second once only duplicates were left
	inflightMax float64 // proxy: the highest in-flight gauge seen
	requeued    int64   // proxy: messages given back to the broker (result requeued), drain and paced phase
	busyEvents  int64   // proxy: claims that found the key busy (waited here or requeued)
	bound       int
	appGot      int64 // requests the app received (forwarding rows)
	appWant     int64
	// proxy, at the fixed rate: where the time went.
	phase *phaseTimes
	// proxy, during the drain (full load): the claim and commit waits;
	// the commit's is the crash window (the app acted, the key is not
	// done yet).
	drainPhase *phaseTimes
}

// phaseTimes are the proxy's own timings over the paced phase, from its
// histograms and the Go runtime's GC summary.
type phaseTimes struct {
	claims, commits, forwards  float64       // counts
	claimMean, commitMean      time.Duration // seen-set round trip as the pipeline waits for it
	forwardMean                time.Duration // POST → answer read
	claimsOver1ms, claimsOver5 float64       // share of claims slower than 1 ms and 5 ms
	gcCycles                   float64
	gcPause                    time.Duration // stop-the-world total
	msgs                       int
}

var phaseMetrics = []string{"dedupe_proxy_seenset_duration_seconds", "dedupe_proxy_forward_duration_seconds_sum",
	"dedupe_proxy_forward_duration_seconds_count", "go_gc_duration_seconds_sum", "go_gc_duration_seconds_count"}

func newPhaseTimes(a, z map[string]float64, msgs int) *phaseTimes {
	d := func(k string) float64 { return z[k] - a[k] }
	sec := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	pt := &phaseTimes{msgs: msgs}
	pt.claims = d(`dedupe_proxy_seenset_duration_seconds_count{op="claim"}`)
	pt.commits = d(`dedupe_proxy_seenset_duration_seconds_count{op="commit"}`)
	if pt.claims > 0 {
		pt.claimMean = sec(d(`dedupe_proxy_seenset_duration_seconds_sum{op="claim"}`) / pt.claims)
		pt.claimsOver1ms = 1 - d(`dedupe_proxy_seenset_duration_seconds_bucket{op="claim",le="0.001"}`)/pt.claims
		pt.claimsOver5 = 1 - d(`dedupe_proxy_seenset_duration_seconds_bucket{op="claim",le="0.005"}`)/pt.claims
	}
	if pt.commits > 0 {
		pt.commitMean = sec(d(`dedupe_proxy_seenset_duration_seconds_sum{op="commit"}`) / pt.commits)
	}
	for k := range z {
		if strings.HasPrefix(k, "dedupe_proxy_forward_duration_seconds_count") {
			pt.forwards += d(k)
			pt.forwardMean += sec(d(strings.Replace(k, "_count", "_sum", 1)))
		}
	}
	if pt.forwards > 0 {
		pt.forwardMean = time.Duration(float64(pt.forwardMean) / pt.forwards)
	}
	pt.gcCycles = d("go_gc_duration_seconds_count")
	pt.gcPause = sec(d("go_gc_duration_seconds_sum"))
	return pt
}

type bench struct {
	o      options
	log    *slog.Logger
	runID  string
	dir    string
	redis  *redisServer
	app    *app
	rabbit *rabbitBroker
	kafka  *kafkaBroker
	// brokerRedis is the Redis rows' broker server; redisList and
	// redisStream are its two modes.
	brokerRedis            *redisServer
	redisList, redisStream *redisBroker
	// measured are the brokers whose rows ran, for the profiling runs.
	measured []broker
	// keepDir keeps the configs and child logs for a failed run.
	keepDir bool
}

func newBench(ctx context.Context, o options, stderr io.Writer) (*bench, error) {
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	b := &bench{
		o:     o,
		log:   slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		runID: randHex(3),
	}
	dir, err := os.MkdirTemp("", "dedupe-bench-")
	if err != nil {
		return nil, err
	}
	b.dir = dir
	if b.redis, err = startRedis(ctx, o.redisBin, dir); err != nil {
		b.close()
		return nil, err
	}
	if b.app, err = startApp(o.appDelay); err != nil {
		b.close()
		return nil, err
	}
	if slices.Contains(strings.Split(o.brokers, ","), "rabbitmq") {
		if b.rabbit, err = newRabbitBroker(o); err != nil {
			b.close()
			return nil, err
		}
	}
	if slices.Contains(strings.Split(o.brokers, ","), "redis") {
		if b.brokerRedis, err = startBrokerRedis(ctx, o, dir); err != nil {
			b.close()
			return nil, fmt.Errorf("broker Redis: %w", err)
		}
		b.redisList, b.redisStream = newRedisBroker(o, b.brokerRedis, "list"), newRedisBroker(o, b.brokerRedis, "stream")
	}
	b.log.Info("bench ready", "run", b.runID, "redis", b.redis.addr, "app", b.app.url, "dir", dir)
	return b, nil
}

func (b *bench) close() {
	if b.rabbit != nil {
		b.rabbit.close()
	}
	if b.kafka != nil {
		b.kafka.close()
	}
	if b.brokerRedis != nil {
		b.redisList.close()
		b.redisStream.close()
		b.brokerRedis.stop()
	}
	if b.app != nil {
		b.app.close()
	}
	if b.redis != nil {
		b.redis.stop()
	}
	if b.dir != "" && !b.keepDir {
		_ = os.RemoveAll(b.dir)
	}
}

// section is one broker's four rows.
type section struct {
	broker string
	rows   []*row
	// missing, when set, says why the rows were not measured.
	missing string
}

func (b *bench) measure(ctx context.Context, br broker) *section {
	s := &section{broker: br.name()}
	b.measured = append(b.measured, br)
	for _, k := range b.kindsFor(br) {
		if ctx.Err() != nil {
			break
		}
		r := b.runRow(ctx, br, k, "")
		if r.err != nil {
			b.log.Warn("row failed", "broker", br.short(), "row", k.letter(), "err", r.err)
		}
		s.rows = append(s.rows, r)
	}
	return s
}

// runRow measures one row. With profileDir set it is a profiling run: the
// proxy serves pprof, a CPU profile and two heap snapshots are written,
// and no paced phase runs.
func (b *bench) runRow(ctx context.Context, br broker, k rowKind, profileDir string) *row {
	r := &row{kind: k, hasRedis: k.isProxy() && b.o.seenset == "redis"}
	id := fmt.Sprintf("bench-%s-%s-%s", b.runID, br.short(), k.letter())
	if profileDir != "" {
		id += "-prof"
	}
	n := b.o.n
	half := n / 2
	key := func(i int) string {
		if k == proxyHalfDup && i >= half {
			i -= half // the second half repeats the first half's keys
		}
		return id + "-" + strconv.Itoa(i)
	}
	d, err := br.newDest(ctx, id)
	if err != nil {
		r.err = fmt.Errorf("create queue/topic: %w", err)
		return r
	}
	defer d.cleanup()
	if k == proxyKeyOrder {
		d.setOrdering("key")
	}
	r.bound = d.inflightBound()

	pubStart := time.Now()
	if err := d.publish(ctx, n, key, b.body); err != nil {
		r.err = fmt.Errorf("publish backlog: %w", err)
		return r
	}
	b.log.Info("backlog published", "row", id, "messages", n, "took", time.Since(pubStart).Round(time.Millisecond))

	b.app.reset()
	if k == proxyHalfDup {
		b.app.markAt(int64(half))
	}
	redis0, err := b.redis.snapshot(ctx)
	if err != nil {
		r.err = err
		return r
	}
	rb, _ := br.(*redisBroker)
	var broker0 redisStats
	if rb != nil {
		if broker0, err = rb.server.snapshot(ctx); err != nil {
			r.err = fmt.Errorf("broker Redis: %w", err)
			return r
		}
	}
	c, err := b.startChild(ctx, br, d, k, id, profileDir != "")
	if err != nil {
		r.err = err
		return r
	}
	// The stop below reports the child's exit; this one covers the
	// early returns.
	defer func() { _ = c.stop() }()

	// t0: the first settled message; the window excludes start-up and,
	// for Kafka, the group join.
	deadline := time.Now().Add(b.o.timeout)
	first, err := c.waitFirst(ctx, deadline)
	if err != nil {
		r.err = err
		return r
	}
	var drainTimes0 map[string]float64
	if c.proxy {
		drainTimes0, _ = c.scrape(ctx, phaseMetrics...)
	}
	cpu0, err := b.cpuSnapshot(c.pid, br.serverPID())
	if err != nil {
		r.err = err
		return r
	}
	var prof *profiler
	if profileDir != "" {
		prof = startProfile(ctx, c.admin, b.o.profileFor)
	}
	samples, err := c.drain(ctx, int64(n), deadline, first)
	if err != nil {
		r.err = fmt.Errorf("drain: %w (log: %s)", err, c.logPath)
		return r
	}
	last := samples[len(samples)-1]
	if drainTimes0 != nil {
		if t, err := c.scrape(ctx, phaseMetrics...); err == nil {
			r.drainPhase = newPhaseTimes(drainTimes0, t, n)
		}
	}
	cpu2, err := b.cpuSnapshot(c.pid, br.serverPID())
	if err != nil {
		r.err = err
		return r
	}
	redis2, err := b.redis.snapshot(ctx)
	if err != nil {
		r.err = err
		return r
	}
	if rb != nil {
		broker2, err := rb.server.snapshot(ctx)
		if err != nil {
			r.err = fmt.Errorf("broker Redis: %w", err)
			return r
		}
		r.broker = newBrokerRedisCost(broker2, broker0, n)
	}
	r.drained = last.settled - first.settled
	r.drainTime = last.t.Sub(first.t)
	if r.drained > 0 && r.drainTime > 0 {
		r.rate = float64(r.drained) / r.drainTime.Seconds()
		per100k := func(d time.Duration) float64 { return d.Seconds() / float64(r.drained) * 1e5 }
		r.cpuPer100k = per100k(cpu2.consumer - cpu0.consumer)
		r.cpuRedis = per100k(cpu2.redis - cpu0.redis)
		r.cpuSelf = per100k(cpu2.self - cpu0.self)
		busy := cpu2.busy - cpu0.busy
		r.cpuBroker = per100k(cpu2.broker - cpu0.broker)
		// Interrupt time (loopback TCP) is charged to the process a tick
		// interrupted, so it is inside the per-process figures already.
		r.cpuRest = per100k(busy - (cpu2.consumer - cpu0.consumer) - (cpu2.redis - cpu0.redis) -
			(cpu2.self - cpu0.self) - (cpu2.broker - cpu0.broker))
		r.busyPct = 100 * busy.Seconds() / (cpu2.wall.Sub(cpu0.wall).Seconds() * float64(runtime.NumCPU()))
	}
	if r.hasRedis {
		dr := redis2.sub(redis0)
		r.tripsPerMsg = float64(dr.trips) / float64(n)
		r.cmdsPerMsg = float64(dr.cmds) / float64(n)
		r.scriptsMsg = float64(dr.scripts) / float64(n)
		r.redisCPU = dr.cpu.Seconds() / float64(n) * 1e5
	}
	for _, s := range samples {
		r.inflightMax = max(r.inflightMax, s.inflight)
	}
	if k == proxyHalfDup {
		r.skipRate = skipRate(samples, b.app.markTime(), int64(n))
	}
	b.log.Info("drained", "row", id, "messages", r.drained, "took", r.drainTime.Round(time.Millisecond), "msgs/s", int(r.rate))

	if prof != nil {
		if err := prof.finish(ctx, profileDir, br.short()); err != nil {
			r.err = fmt.Errorf("profile: %w", err)
		}
	} else if err := b.paced(ctx, r, d, c, id); err != nil {
		r.err = fmt.Errorf("latency phase: %w", err)
		return r
	}
	if c.proxy {
		if s, err := c.poll(ctx); err == nil {
			r.requeued, r.busyEvents = s.requeued, s.busy
		}
	}
	if r.rssMiB, err = peakRSS(c.pid); err != nil {
		r.err = err
		return r
	}
	if err := c.stop(); err != nil {
		r.err = err
	}
	if k != bareConsumer {
		r.appGot = b.app.count()
	}
	return r
}

// paced publishes at a fixed rate and measures publish→app latency (for
// the bare consumer: publish→consume, which it records itself), and the
// Redis round trips per message at a steady pace.
func (b *bench) paced(ctx context.Context, r *row, d dest, c *child, id string) error {
	total := int(float64(b.o.rate) * b.o.paced.Seconds())
	if total < 1 {
		total = 1
	}
	key := func(j int) string {
		if r.kind == proxyHalfDup && j%2 == 1 {
			// A duplicate published right behind its original: it
			// usually arrives while this replica is still forwarding
			// the original, which is what a busy key held here looks
			// like (the backlog's duplicates come long after theirs).
			return id + "-p" + strconv.Itoa(j-1)
		}
		return id + "-p" + strconv.Itoa(j)
	}
	p, err := d.pacer(ctx)
	if err != nil {
		return err
	}
	if r.kind == bareConsumer {
		if err := c.latencyStart(ctx); err != nil {
			_ = p.close()
			return err
		}
	} else {
		b.app.record(true)
	}
	redis0, err := b.redis.snapshot(ctx)
	if err != nil {
		_ = p.close()
		return err
	}
	var times0 map[string]float64
	if c.proxy {
		times0, _ = c.scrape(ctx, phaseMetrics...)
	}
	start := time.Now()
	interval := time.Second / time.Duration(b.o.rate)
	for j := range total {
		at := j
		if r.kind == proxyHalfDup {
			at -= j % 2 // the duplicate goes right behind its original
		}
		if wait := time.Until(start.Add(time.Duration(at) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		k := key(j)
		if err := p.send(k, b.body(time.Now().UnixNano(), k)); err != nil {
			_ = p.close()
			return err
		}
		if ctx.Err() != nil {
			_ = p.close()
			return ctx.Err()
		}
	}
	if err := p.close(); err != nil {
		return err
	}
	if behind := time.Since(start) - b.o.paced; behind > b.o.paced/10 {
		b.log.Warn("the publisher could not keep the pace", "row", id, "late", behind.Round(time.Millisecond))
	}
	want := int64(b.o.n + total)
	if _, err := c.drain(ctx, want, time.Now().Add(30*time.Second), sample{}); err != nil {
		return err
	}
	redis1, err := b.redis.snapshot(ctx)
	if err != nil {
		return err
	}
	if r.hasRedis {
		r.tripsPaced = float64(redis1.sub(redis0).trips) / float64(total)
	}
	if times0 != nil {
		if times1, err := c.scrape(ctx, phaseMetrics...); err == nil {
			r.phase = newPhaseTimes(times0, times1, total)
		}
	}
	var lat []time.Duration
	if r.kind == bareConsumer {
		r.latWhat = "publish→consume"
		if lat, err = c.latency(ctx); err != nil {
			return err
		}
	} else {
		r.latWhat = "publish→app"
		lat = b.app.record(false)
	}
	r.latN = len(lat)
	r.p50, r.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	switch r.kind {
	case bareForwarder, proxyUnique, proxyKeyOrder, proxyBaseline:
		r.appWant = int64(b.o.n + total)
	case proxyHalfDup:
		r.appWant = int64(b.o.n/2 + (total+1)/2)
	}
	return nil
}

// cpuSnap is the CPU time used so far by the processes of one row.
type cpuSnap struct {
	consumer, redis, self, broker, busy time.Duration
	wall                                time.Time
}

func (b *bench) cpuSnapshot(pid, brokerPID int) (cpuSnap, error) {
	s := cpuSnap{wall: time.Now()}
	var errs [5]error
	s.busy, errs[0] = machineBusy()
	s.consumer, errs[1] = cpuTime(pid)
	s.redis, errs[2] = cpuTime(b.redis.cmd.Process.Pid)
	s.self, errs[3] = cpuTime(os.Getpid())
	if brokerPID > 0 {
		s.broker, errs[4] = cpuTime(brokerPID)
	}
	return s, errors.Join(errs[:]...)
}

// skipRate is the settle rate after the app received the last original
// of (d): from then on only duplicates are left.
func skipRate(samples []sample, lastForward time.Time, n int64) float64 {
	if lastForward.IsZero() {
		return 0
	}
	end := samples[len(samples)-1]
	for _, s := range samples {
		if !s.t.Before(lastForward) {
			if dt := end.t.Sub(s.t); dt > 0 && end.settled > s.settled {
				return float64(n-s.settled) / dt.Seconds()
			}
			break
		}
	}
	return 0
}

// body is the message: a JSON envelope whose key is meta.id (the proxy's
// default rule) and whose first field is the publish time, where the
// no-op app reads it without parsing JSON.
func (b *bench) body(ts int64, key string) []byte {
	buf := make([]byte, 0, b.o.bodyBytes+len(key))
	buf = append(buf, `{"ts":`...)
	buf = strconv.AppendInt(buf, ts, 10)
	buf = append(buf, `,"meta":{"id":"`...)
	buf = append(buf, key...)
	buf = append(buf, `"},"job":"urn:bench:orders:created","data":"`...)
	for len(buf) < b.o.bodyBytes-2 {
		buf = append(buf, 'x')
	}
	return append(buf, `"}`...)
}

// startChild starts the row's consumer process.
func (b *bench) startChild(ctx context.Context, br broker, d dest, k rowKind, id string, pprof bool) (*child, error) {
	bin, args, admin, err := b.childCommand(br, d, k, id, pprof)
	if err != nil {
		return nil, err
	}
	return startChild(ctx, bin, args, nil, admin, filepath.Join(b.dir, id+".log"), k.isProxy())
}

// childCommand is the row's consumer command line (writing the proxy's
// config) and the admin address it serves its progress on.
func (b *bench) childCommand(_ broker, d dest, k rowKind, id string, pprof bool) (bin string, args []string, admin string, err error) {
	admin, err = freeAddr()
	if err != nil {
		return "", nil, "", err
	}
	if !k.isProxy() {
		self, err := os.Executable()
		if err != nil {
			return "", nil, "", err
		}
		mode := cmdBareConsumer
		args := []string{"-listen", admin}
		if k == bareForwarder {
			mode = cmdBareForwarder
			args = append(args, "-app", b.app.url+"/bench")
		}
		args = append(append([]string{mode}, args...), d.bareArgs()...)
		return self, args, admin, nil
	}
	cfg := fmt.Sprintf(`consumer: bench
shutdown_timeout: 10s
log: {level: warn, format: json}
admin: {listen: "%s", pprof: %t}
app:
  url: "%s"
  max_conns: %d
seenset:
  backend: %s
  ttl: 1h
  redis:
    addrs: ["%s"]
    prefix: "%s:"
sources:
  - name: bench
    path: /bench
%s`, admin, pprof, b.app.url, b.o.workers, b.o.seenset, b.redis.addr, id, d.proxySource())
	cfgPath := filepath.Join(b.dir, id+".yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return "", nil, "", err
	}
	bin = b.o.proxy
	if k == proxyBaseline {
		bin = b.o.baseline
	}
	return bin, []string{"run", "--config", cfgPath}, admin, nil
}

// profileAll runs (c) once more per measured broker with pprof on.
func (b *bench) profileAll(ctx context.Context) []string {
	if err := os.MkdirAll(b.o.profileDir, 0o755); err != nil {
		return []string{"profile: " + err.Error()}
	}
	var out []string
	for _, br := range b.measured {
		r := b.runRow(ctx, br, proxyUnique, b.o.profileDir)
		if r.err != nil {
			out = append(out, fmt.Sprintf("%s: profile run failed: %v", br.name(), r.err))
			continue
		}
		out = append(out, fmt.Sprintf("%s (c) profiled at %.0f msgs/s: %s", br.name(), r.rate,
			filepath.Join(b.o.profileDir, br.short()+"-{cpu,allocs-base,allocs}.pprof")))
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
