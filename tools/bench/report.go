package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// report is everything printed: the machine, one table, the ratios.
type report struct {
	o        options
	machine  []string
	sections []*section
	failover *failoverSection
	slow     *slowSection
	webhook  *webhookSection
	profiles []string
	instr    []*instrSection
}

// machine describes where the numbers come from.
func (b *bench) machine(ctx context.Context) []string {
	cpu := "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if info, err := os.ReadFile("/proc/meminfo"); err == nil {
		for l := range strings.SplitSeq(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				var kb float64
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%f", &kb); err == nil {
					mem = fmt.Sprintf(", %.1f GiB RAM", kb/(1<<20))
				}
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	load, _ := os.ReadFile("/proc/loadavg")
	proxyVersion := "?"
	if out, err := exec.CommandContext(ctx, b.o.proxy, "version").Output(); err == nil {
		proxyVersion = strings.TrimSpace(strings.TrimPrefix(string(out), "dedupe-proxy "))
	}
	rabbit := "RabbitMQ not used"
	if b.rabbit != nil {
		rabbit = "RabbitMQ " + b.rabbit.version + " (durable classic queue, persistent messages)"
	}
	lines := []string{
		fmt.Sprintf("%s, %d cores%s, Linux %s", cpu, runtime.NumCPU(), mem, strings.TrimSpace(string(kernel))),
		fmt.Sprintf("%s; dedupe-proxy %s; %s; Redis %s (private, on %s)",
			runtime.Version(), proxyVersion, rabbit, b.redis.version, b.redis.addr),
		fmt.Sprintf("kfake %s in this process, %d partitions; franz-go %s for the bare Kafka rows",
			moduleVersion("github.com/twmb/franz-go/pkg/kfake"), b.o.partitions, moduleVersion("github.com/twmb/franz-go")),
		fmt.Sprintf("load average at start: %s (everything — brokers, Redis, app, consumer — shares these cores)",
			strings.Join(strings.Fields(string(load))[:3], " ")),
		fmt.Sprintf("backlog %d messages of %d bytes; latency phase %d msgs/s for %s; RabbitMQ prefetch %d, %d workers; Kafka: bare rows in partition order, proxy ordering %s, batch_size %d, commits every 500 or 1s",
			b.o.n, b.o.bodyBytes, b.o.rate, b.o.paced, b.o.prefetch, b.o.workers, kafkaOrdering(b.o), b.o.kafkaBatch),
		fmt.Sprintf("proxy seen-set: %s; app: %s", seensetDesc(b.o.seenset), appDesc(b.o.appDelay)),
	}
	if b.brokerRedis != nil {
		lines = append(lines, fmt.Sprintf("Redis rows: the broker is a second private redis-server (%s, on %s), %d workers", b.brokerRedis.version, b.brokerRedis.addr, b.o.workers))
	}
	return lines
}

func kafkaOrdering(o options) string {
	if o.ordering == "key" {
		return fmt.Sprintf("key (max_in_flight %d)", o.inFlight)
	}
	return o.ordering
}

func seensetDesc(backend string) string {
	if backend == "memory" {
		return "memory (in the proxy process; Redis columns empty)"
	}
	return "Redis (the private redis-server)"
}

func appDesc(delay time.Duration) string {
	if delay > 0 {
		return fmt.Sprintf("takes %s per request", delay)
	}
	return "no-op"
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				if m.Replace != nil {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return "?"
}

func (r *report) failed() bool {
	for _, s := range r.sections {
		for _, row := range s.rows {
			if row.err != nil {
				return true
			}
		}
	}
	if r.webhook != nil && r.webhook.failed() {
		return true
	}
	if r.slow != nil && r.slow.failed() {
		return true
	}
	for _, s := range r.instr {
		for _, row := range s.rows {
			if row.err != nil {
				return true
			}
		}
	}
	if r.failover != nil {
		for _, row := range r.failover.rows {
			if row.err != nil {
				return true
			}
		}
	}
	return false
}

func (r *report) print(w io.Writer) {
	fmt.Fprintln(w, "dedupe-proxy benchmark — one run, one machine")
	for _, m := range r.machine {
		fmt.Fprintln(w, "  "+m)
	}
	if len(r.sections) > 0 {
		r.printTable(w)
	}
	r.printCPU(w)
	r.printPhases(w)
	for _, s := range r.sections {
		if s.missing != "" || len(s.rows) < 2 {
			continue
		}
		r.printRatios(w, s)
	}
	printInstructions(w, r.instr)
	if r.webhook != nil {
		r.webhook.print(w, r.o)
	}
	if r.slow != nil {
		r.slow.print(w)
	}
	if r.failover != nil {
		r.failover.print(w)
	}
	if len(r.profiles) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Profiles (extra runs of (c), not in the table; allocations = allocs minus allocs-base):")
		for _, p := range r.profiles {
			fmt.Fprintln(w, "  "+p)
		}
		fmt.Fprintln(w, "  view: go tool pprof -top <cpu>; go tool pprof -sample_index=alloc_space -base <allocs-base> -top <allocs>")
	}
}

// joinInstructions puts each instruction count beside its row in the
// table (the same broker and row letter), when both parts ran.
func (r *report) joinInstructions() {
	for _, is := range r.instr {
		for _, ir := range is.rows {
			if ir.err != nil || ir.perMsg <= 0 {
				continue
			}
			for _, s := range r.sections {
				if s.broker != is.broker {
					continue
				}
				if x := s.rowOf(ir.kind); x != nil {
					x.instrPerMsg = ir.perMsg
				}
			}
		}
	}
}

// printTable prints the rows of every broker, every source with the same
// columns, then what each Redis row cost its Redis servers per message.
func (r *report) printTable(w io.Writer) {
	fmt.Fprintln(w)
	const head = "%-42s %9s %7s %9s %7s %12s %7s %8s %8s\n"
	fmt.Fprintf(w, head, "", "msgs/s", "× bare", "price of", "Redis", "instructions", "peak", "p50", "p99")
	fmt.Fprintf(w, head, "", "", "(b)", "dedupe s", "rt/msg", "per msg", "RSS", "latency", "latency")
	fmt.Fprintf(w, head, "", "", "", "/100k", "", "", "MiB", "", "")
	for _, s := range r.sections {
		fmt.Fprintln(w, s.broker)
		if s.missing != "" {
			for _, k := range rowKinds {
				fmt.Fprintf(w, "  (%s) %-37s %s\n", k.letter(), k.label(), s.missing)
			}
			continue
		}
		bare := s.rowOf(bareForwarder)
		for _, row := range s.rows {
			name := fmt.Sprintf("  (%s) %s", row.kind.letter(), row.kind.label())
			if row.err != nil && row.rate == 0 {
				fmt.Fprintf(w, "%-42s error: %v\n", name, row.err)
				continue
			}
			ratio, trips, price, instr := "—", "—", "—", "—"
			if bare != nil && bare.rate > 0 && row.rate > 0 {
				ratio = fmt.Sprintf("%.2f", row.rate/bare.rate)
			}
			if row.hasRedis {
				trips = fmt.Sprintf("%.2f", row.tripsPerMsg)
			}
			if p, ok := priceOfDedupe(row, bare); ok {
				price = fmt.Sprintf("%.2f", p)
			}
			if row.instrPerMsg > 0 {
				instr = thousands(row.instrPerMsg)
			}
			p50, p99 := ms(row.p50), ms(row.p99)
			if row.latWhat == "publish→consume" {
				p50, p99 = p50+"*", p99+"*"
			}
			fmt.Fprintf(w, "%-42s %9s %7s %9s %7s %12s %7.1f %8s %8s\n", name, thousands(row.rate), ratio, price,
				trips, instr, row.rssMiB, p50, p99)
			if row.err != nil {
				fmt.Fprintf(w, "      error after measuring: %v\n", row.err)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  msgs/s: drain of the pre-published backlog, from the first settled message to the last; × bare: the")
	fmt.Fprintln(w, "  ratio to the bare forwarder (b) of the same broker in this run.")
	fmt.Fprintln(w, "  price of dedupe: the consumer's CPU above the bare forwarder's (b) plus the seen-set Redis's, per")
	fmt.Fprintln(w, "  100k messages over the drain (/proc/<pid>/stat utime+stime; INFO used_cpu_*).")
	fmt.Fprintln(w, "  Redis rt/msg: network round trips (INFO total_reads_processed) of the seen-set Redis per message")
	fmt.Fprintln(w, "  during the drain (the broker Redis of the Redis rows: below).")
	fmt.Fprintln(w, "  instructions per msg: from the instructions section (callgrind) when it ran in this invocation")
	fmt.Fprintln(w, "  (-only rows,instructions), \"—\" otherwise or for rows it does not count ((b), (c) and (c0) only).")
	fmt.Fprintln(w, "  peak RSS: the consumer's VmHWM. latency: publish→app at the fixed rate, publish time carried in the")
	fmt.Fprintln(w, "  body; * (a) has no app: publish→consume.")
	fmt.Fprintln(w, "  (e): Kafka ordering key (different record keys of a partition overlap, max_in_flight), 0% duplicates.")
	r.printRedisCost(w)
}

// printRedisCost prints what each row cost Redis per message during the
// drain: the seen-set's commands and scripts, and for the Redis sources
// the broker Redis's round trips, commands and scripts, by command.
func (r *report) printRedisCost(w io.Writer) {
	some := false
	for _, s := range r.sections {
		for _, x := range s.rows {
			some = some || x.hasRedis || x.broker != nil
		}
	}
	if !some {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Redis per message during the drain (INFO commandstats; commands inside Lua scripts counted):")
	const head = "%-42s %8s %8s %8s %8s %8s  %s\n"
	fmt.Fprintf(w, head, "", "seen-set", "seen-set", "broker", "broker", "broker", "broker Redis commands per message")
	fmt.Fprintf(w, head, "", "cmd/msg", "scripts", "rt/msg", "cmd/msg", "scripts", "")
	for _, s := range r.sections {
		if s.missing != "" {
			continue
		}
		fmt.Fprintln(w, s.broker)
		for _, x := range s.rows {
			if x.rate == 0 || !x.hasRedis && x.broker == nil {
				continue
			}
			sc, ss, bt, bc, bs, top := "—", "—", "—", "—", "—", ""
			if x.hasRedis {
				sc, ss = fmt.Sprintf("%.2f", x.cmdsPerMsg), fmt.Sprintf("%.2f", x.scriptsMsg)
			}
			if c := x.broker; c != nil {
				bt, bc, bs, top = fmt.Sprintf("%.2f", c.trips), fmt.Sprintf("%.2f", c.cmds), fmt.Sprintf("%.2f", c.scripts), c.top()
			}
			fmt.Fprintf(w, head, fmt.Sprintf("  (%s) %s", x.kind.letter(), x.kind.label()), sc, ss, bt, bc, bs, top)
		}
	}
	fmt.Fprintln(w, "  broker: the Redis sources' broker redis-server (every row, bare ones too), from just before the")
	fmt.Fprintln(w, "  consumer started to the end of the drain; the fixed-rate phase is not in it.")
}

// priceOfDedupe is what dedupe costs per 100k messages: the proxy's CPU
// above the bare forwarder's, plus the seen-set Redis server's CPU.
func priceOfDedupe(x, bare *row) (float64, bool) {
	if x == nil || bare == nil || !x.kind.isProxy() || x.rate == 0 || bare.rate == 0 {
		return 0, false
	}
	return x.cpuPer100k - bare.cpuPer100k + x.cpuRedis, true
}

// printPhases says where a proxy row's time went at the fixed rate: the
// claim is the one seen-set round trip between publish and app (the
// commit comes after the app answered), and GC pauses stop every worker.
func (r *report) printPhases(w io.Writer) {
	var any bool
	for _, s := range r.sections {
		for _, x := range s.rows {
			any = any || x.phase != nil
		}
	}
	if !any {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Proxy rows at the fixed rate (%d msgs/s for %s), from the proxy's own histograms:\n", r.o.rate, r.o.paced)
	const head = "%-42s %9s %9s %9s %9s %9s %9s %9s\n"
	fmt.Fprintf(w, head, "", "claim", "claims", "claims", "forward", "commit", "GC", "GC pause")
	fmt.Fprintf(w, head, "", "mean", "> 1 ms", "> 5 ms", "mean", "mean", "cycles", "total")
	for _, s := range r.sections {
		fmt.Fprintln(w, s.broker)
		for _, x := range s.rows {
			pt := x.phase
			if pt == nil {
				continue
			}
			fmt.Fprintf(w, "%-42s %9s %8.1f%% %8.1f%% %9s %9s %9.0f %9s\n", fmt.Sprintf("  (%s) %s", x.kind.letter(), x.kind.label()),
				ms(pt.claimMean), 100*pt.claimsOver1ms, 100*pt.claimsOver5, ms(pt.forwardMean), ms(pt.commitMean), pt.gcCycles, ms(pt.gcPause))
		}
	}
	fmt.Fprintln(w, "During the drain (full load), from the same histograms; the commit wait is the crash window:")
	for _, s := range r.sections {
		for _, x := range s.rows {
			if pt := x.drainPhase; pt != nil {
				fmt.Fprintf(w, "%-42s %9s %8.1f%% %8.1f%% %9s %9s %9.0f %9s\n", fmt.Sprintf("  %s (%s)", s.broker, x.kind.letter()),
					ms(pt.claimMean), 100*pt.claimsOver1ms, 100*pt.claimsOver5, ms(pt.forwardMean), ms(pt.commitMean), pt.gcCycles, ms(pt.gcPause))
			}
		}
	}
	fmt.Fprintln(w, "  claim: the seen-set wait before the forward (a batch claim counts once); commit: after the app's 2xx,")
	fmt.Fprintln(w, "  so not in publish→app; claims > 1 ms: from the histogram's buckets; GC: cycles and stop-the-world")
	fmt.Fprintln(w, "  pause summed over the phase.")
}

// printCPU says where the machine's CPU went during each drain: on a
// small machine every process competes for the same cores, so the
// consumer's CPU per message and Redis's decide the throughput.
func (r *report) printCPU(w io.Writer) {
	measured := false
	for _, s := range r.sections {
		measured = measured || len(s.rows) > 0
	}
	if !measured {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU during the drain, seconds per 100k messages, by process:")
	const head = "%-42s %9s %9s %9s %9s %9s %9s\n"
	fmt.Fprintf(w, head, "", "consumer", "Redis", "broker", "bench", "other", "machine")
	fmt.Fprintf(w, head, "", "", "server", "server", "process", "processes", "busy")
	for _, s := range r.sections {
		if s.missing != "" {
			continue
		}
		fmt.Fprintln(w, s.broker)
		for _, row := range s.rows {
			if row.rate == 0 {
				continue
			}
			redis := "-"
			if row.hasRedis {
				redis = fmt.Sprintf("%.2f", row.cpuRedis)
			}
			busy := fmt.Sprintf("%.0f%%", row.busyPct)
			if row.drainTime < time.Second {
				// A few 10 ms ticks: only the order of magnitude holds.
				busy = "(short)"
			}
			rabbit := "-"
			if row.cpuBroker > 0 {
				rabbit = fmt.Sprintf("%.2f", row.cpuBroker)
			}
			fmt.Fprintf(w, "%-42s %9.2f %9s %9s %9.2f %9.2f %9s\n", fmt.Sprintf("  (%s) %s", row.kind.letter(), row.kind.label()),
				row.cpuPer100k, redis, rabbit, row.cpuSelf, row.cpuRest, busy)
		}
	}
	fmt.Fprintln(w, "  broker server: RabbitMQ, or the broker redis-server for Redis rows; bench process: the no-op app,")
	fmt.Fprintln(w, "  publisher and pollers (and kfake for Kafka rows); other processes:")
	fmt.Fprintln(w, "  anything else on the machine, i.e. noise (±0.5 is clock-tick rounding); machine busy: share of all")
	fmt.Fprintln(w, "  cores not idle — below 100% the row was bound by latency, not CPU. (short): a drain under 1 s,")
	fmt.Fprintln(w, "  measured in a few 10 ms clock ticks, so only its order of magnitude holds.")
}

// rowOf is the section's row of kind k, nil when it did not run.
func (s *section) rowOf(k rowKind) *row {
	for _, x := range s.rows {
		if x.kind == k {
			return x
		}
	}
	return nil
}

// Project targets, all within one run. Throughput: the proxy drains a
// backlog at least this share of the bare forwarder's rate.
const (
	targetRabbitRatio = 0.90
	targetKafkaRatio  = 0.85 // partition order
	targetKeyRatio    = 1.00 // ordering: key vs the bare partition-order forwarder
	targetPrice       = 1.2  // CPU-s per 100k messages: the proxy's above (b)'s, plus the seen-set Redis's
	targetTrips       = 0.2  // seen-set round trips per forwarded message at full load
	targetRedisCmds   = 2.0  // Redis commands per forwarded message
	targetAddedP50    = 300 * time.Microsecond
	targetAddedP99    = time.Millisecond
	// targetKeyVsPartition: key order is the default only while it costs
	// at most 5% against partition order with a no-op app.
	targetKeyVsPartition = 0.95
)

func (r *report) printRatios(w io.Writer, s *section) {
	a, bf, c, d := s.rowOf(bareConsumer), s.rowOf(bareForwarder), s.rowOf(proxyUnique), s.rowOf(proxyHalfDup)
	e, base := s.rowOf(proxyKeyOrder), s.rowOf(proxyBaseline)
	kafka := e != nil || strings.HasPrefix(s.broker, "Kafka")
	fmt.Fprintf(w, "\n%s — the project's targets, ratios from this run (a report, not a gate):\n", s.broker)
	line := func(what, value, target string, ok, known bool) {
		mark := "-"
		if known {
			mark = "MISS"
			if ok {
				mark = "ok"
			}
		}
		fmt.Fprintf(w, "  %-56s %10s   %-14s %s\n", what, value, target, mark)
	}
	usable := func(rs ...*row) bool {
		for _, x := range rs {
			if x == nil || x.rate == 0 {
				return false
			}
		}
		return true
	}
	if usable(c, bf) {
		v, t, what := c.rate/bf.rate, targetRabbitRatio, "(c)/(b) throughput, proxy vs bare forwarder"
		if kafka {
			t, what = targetKafkaRatio, "(c)/(b) throughput, partition order, proxy vs bare"
		}
		line(what, fmt.Sprintf("%.2f", v), fmt.Sprintf("≥ %.2f", t), v >= t, true)
	}
	if usable(e, bf) {
		v := e.rate / bf.rate
		line("(e)/(b) throughput, ordering key vs bare partition order", fmt.Sprintf("%.2f", v),
			fmt.Sprintf("≥ %.2f", targetKeyRatio), v >= targetKeyRatio, true)
	}
	if usable(e, c) {
		v := e.rate / c.rate
		line("(e)/(c) throughput, ordering key vs partition, no-op app", fmt.Sprintf("%.2f", v),
			fmt.Sprintf("≥ %.2f", targetKeyVsPartition), v >= targetKeyVsPartition, true)
	}
	if usable(c, bf) && c.cpuRedis > 0 {
		// Everything shares the machine's cores, so a drain's rate
		// follows the CPU all processes spend per message. Even a proxy
		// costing exactly what the bare forwarder costs would add the
		// Redis server's work: this is the best (c)/(b) that leaves.
		total := bf.cpuPer100k + bf.cpuBroker + bf.cpuSelf
		v := total / (total + c.cpuRedis)
		line("  ceiling here: (b)'s CPU / ((b)'s + Redis server's)", fmt.Sprintf("%.2f", v), "", false, false)
		if tc := c.cpuPer100k + c.cpuBroker + c.cpuSelf + c.cpuRedis; tc > 0 {
			line("  (b)/(c) CPU per message, all processes", fmt.Sprintf("%.2f", total/tc), "", false, false)
		}
	}
	if usable(bf, a) {
		line("(b)/(a) throughput, forwarding vs consuming only", fmt.Sprintf("%.2f", bf.rate/a.rate), "", false, false)
	}
	if price, ok := priceOfDedupe(c, bf); ok && c.hasRedis {
		line("price of dedupe, CPU-s per 100k: (c)−(b) consumer + Redis", fmt.Sprintf("%.2f", price),
			fmt.Sprintf("≤ %.1f", targetPrice), price <= targetPrice, true)
		line(fmt.Sprintf("  of it: proxy above (b) %.2f, seen-set Redis %.2f", c.cpuPer100k-bf.cpuPer100k, c.cpuRedis), "", "", false, false)
		if bp, ok := priceOfDedupe(base, bf); ok {
			line("  the same with -baseline, (c0)", fmt.Sprintf("%.2f", bp), "", false, false)
		}
	}
	if usable(c, bf) && bf.cpuPer100k > 0 {
		line("  proxy CPU per message, (c) / bare forwarder (b)", fmt.Sprintf("%.2f×", c.cpuPer100k/bf.cpuPer100k), "", false, false)
	}
	if usable(c) && c.hasRedis {
		line("Redis round trips per forwarded message, (c) drain", fmt.Sprintf("%.2f", c.tripsPerMsg),
			fmt.Sprintf("≤ %.1f", targetTrips), c.tripsPerMsg <= targetTrips, true)
		if usable(base) && base.hasRedis {
			line("  the same with -baseline, (c0)", fmt.Sprintf("%.2f", base.tripsPerMsg), "", false, false)
		}
		if c.latN > 0 {
			line("  at the fixed rate, (c)", fmt.Sprintf("%.2f", c.tripsPaced), "", false, false)
		}
		line("Redis commands per forwarded message, (c) drain", fmt.Sprintf("%.2f", c.cmdsPerMsg),
			fmt.Sprintf("≤ %.0f", targetRedisCmds), c.cmdsPerMsg <= targetRedisCmds+0.005, true)
		line("Redis scripts (EVAL/EVALSHA/FCALL) per message, (c) drain", fmt.Sprintf("%.2f", c.scriptsMsg),
			"= 0", c.scriptsMsg == 0, true)
		if usable(base) {
			line("(c)/(c0) throughput, this binary vs -baseline", fmt.Sprintf("%.2f", c.rate/base.rate), "", false, false)
		}
	}
	if usable(c, d) && d.skipRate > 0 {
		v := d.skipRate / c.rate
		line(fmt.Sprintf("(d) duplicate skips/s (%s) vs (c) forwards/s", thousands(d.skipRate)), fmt.Sprintf("%.2f×", v), "≥ 2×", v >= 2, true)
	} else if usable(c, d) {
		line("(d) duplicate skip speed vs (c)", "n/a", "≥ 2×", false, false)
	}
	if usable(d) && !kafka {
		// Every key is held by this one replica: a duplicate that finds
		// its original in flight waits for it here.
		line(fmt.Sprintf("(d) messages requeued (busy keys met and waited for here: %d)", d.busyEvents), fmt.Sprintf("%d", d.requeued), "= 0", d.requeued == 0, true)
	}
	if c != nil && bf != nil && c.latN > 0 && bf.latN > 0 {
		p50, p99 := c.p50-bf.p50, c.p99-bf.p99
		line(fmt.Sprintf("latency added at %d msgs/s, p50 (c)−(b)", r.o.rate), signedMs(p50), "≤ "+ms(targetAddedP50), p50 <= targetAddedP50, true)
		line(fmt.Sprintf("latency added at %d msgs/s, p99 (c)−(b)", r.o.rate), signedMs(p99), "≤ "+ms(targetAddedP99), p99 <= targetAddedP99, true)
		if e != nil && e.latN > 0 {
			line("  ordering key, p50 / p99 (e)−(b)", signedMs(e.p50-bf.p50)+" / "+signedMs(e.p99-bf.p99), "", false, false)
		}
	}
	var peak float64
	for _, x := range []*row{c, d, e} {
		if x != nil {
			peak = max(peak, x.rssMiB)
		}
	}
	if peak > 0 {
		line("proxy peak RSS, (c), (d), (e)", fmt.Sprintf("%.1f MiB", peak), "< 40 MiB", peak < 40, true)
	}
	for _, x := range []*row{c, d, e} {
		if x != nil && x.rate > 0 {
			line(fmt.Sprintf("(%s) proxy in-flight, highest sampled (bound %d)", x.kind.letter(), x.bound), fmt.Sprintf("%.0f", x.inflightMax),
				fmt.Sprintf("≤ %d", x.bound), x.inflightMax <= float64(x.bound), true)
		}
	}
	for _, x := range s.rows {
		if x.appWant > 0 {
			ok := x.appGot == x.appWant
			line(fmt.Sprintf("(%s) requests the app received", x.kind.letter()), fmt.Sprintf("%d", x.appGot),
				fmt.Sprintf("= %d", x.appWant), ok, true)
		}
	}
}

// signedMs is a latency difference in ms with its sign.
func signedMs(d time.Duration) string {
	return fmt.Sprintf("%+.2fms", float64(d)/float64(time.Millisecond))
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
