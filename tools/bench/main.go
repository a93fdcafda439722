// Command bench answers "what does the sidecar cost me?": it measures
// dedupe-proxy against the bare alternatives on one machine in one run and
// prints one table (make bench). It is a development tool, not part of the
// product: nothing here ships in the dedupe-proxy binary or image.
//
// Per broker (the local RabbitMQ, an in-process kfake Kafka with six
// partitions, and a type: redis source in mode list and in mode stream
// on a second private redis-server, redisbroker.go) it runs these rows,
// each on its own fresh queue, topic, list or stream, consumer group and
// Redis prefix:
//
//	(a) bare consumer   consume + ack, no forward: the broker's limit
//	(b) bare forwarder  consume → POST to a no-op app → ack, same prefetch
//	                    and concurrency, keep-alive pool sized to the
//	                    workers, no dedupe: what users write by hand
//	(c) dedupe-proxy    the real binary (make build) with the Redis
//	                    seen-set (-seenset memory: the in-process one),
//	                    0% duplicates
//	(d) dedupe-proxy    the same with 50% duplicates (at the fixed rate
//	                    each duplicate goes right behind its original)
//	(e) dedupe-proxy    Kafka only: ordering key, 0% duplicates, against
//	                    the bare partition-order forwarder
//	(c0)                with -baseline <binary>: (c) with that build,
//	                    right after (c), for a before/after in one run
//
// The Kafka rows consume in partition order; -kafka-ordering key runs
// different record keys of a partition concurrently (up to
// -max-in-flight), which pays off with a slow app (-app-delay).
//
// Every row's consumer is a child process — the bare ones are hidden
// sub-commands of this binary (bench bare-consumer, bench
// bare-forwarder) — so CPU (utime+stime from /proc/<pid>/stat) and peak
// RSS (VmHWM) are read the same way for every row. Redis is a private
// redis-server on a free port started here, so INFO commandstats deltas
// belong to one row and the shared Redis is never touched.
//
// Each row first drains a pre-published backlog (-n messages) for msgs/s,
// CPU and Redis commands per message, then publishes at a fixed rate
// (-rate, the same for every row) for the publish→app latency: the
// publish time travels in the body and the no-op app reads it.
//
// Under the table it shows where the machine's CPU went during each
// drain (the consumer, Redis, RabbitMQ, this process, everything else),
// then the project's targets with their verdicts (ok or MISS).
//
// Then the webhook rows (webhook.go): requests/s and latency to the 2xx
// of the proxy's webhook source in enqueue mode against a bare handler
// that verifies and publishes with confirms; -only webhook runs them
// alone.
//
// Then the Kafka slow-app section (slow.go): keyless records drained by
// two proxies into an app that hangs 1% of messages for 12 s and answers
// 5% with 500, once per ordering mode; -only slow runs it alone.
//
// Then the Kafka failover section (failover.go): how long partitions
// stall when one of two proxies is stopped, killed, killed in a burst or
// crash-looping;
// -only failover runs it alone, -only rows and -only webhook skip it.
//
// Machines are shared and noisy: compare the ratios printed under the
// table, which come from one run, not absolute numbers across runs. A
// missed target is reported, never an exit status; the exit status is 1
// only when a row could not be measured.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// options are the flags of the benchmark itself.
type options struct {
	proxy      string
	baseline   string
	n          int
	rate       int
	paced      time.Duration
	bodyBytes  int
	prefetch   int
	workers    int
	partitions int
	kafkaBatch int
	ordering   string
	inFlight   int
	// The slow-app section: backlog, hang, and the bound on one drain.
	slowN       int
	slowHang    time.Duration
	slowTimeout time.Duration
	// rows: the letters of the rows to run ("" all), e.g. "c,e".
	rows       string
	seenset    string
	appDelay   time.Duration
	amqpURL    string
	redisBin   string
	brokers    string
	profileDir string
	profileFor time.Duration
	timeout    time.Duration
	verbose    bool
	// only picks parts of the benchmark, comma-separated: "" (all),
	// "rows", "webhook", "failover", "slow", "instructions"; with rows,
	// instructions joins each row's instruction count into the table.
	only string
	// The webhook rows: burst size and concurrent senders.
	whN       int
	whSenders int
	whRate    int
	// The Kafka failover section: publish rate and the proxies' group
	// timing and lease (0: the proxy's defaults).
	foRate      int
	foWhich     string
	foWindow    time.Duration
	keep        bool
	foSession   time.Duration
	foHeartbeat time.Duration
	foRebalance time.Duration
	foLease     time.Duration
	// -only instructions: the two backlog sizes counted, and the bound
	// on one drain under valgrind.
	instrSizes   [2]int
	instrTimeout time.Duration
	instrRuns    int
}

// runs says whether -only asks for part: every part when -only is
// empty, so that the table has its instructions column (without
// valgrind the section says so and the column shows "—").
func (o options) runs(part string) bool {
	if o.only == "" {
		return true
	}
	return slices.Contains(strings.Split(o.only, ","), part)
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case cmdBareConsumer, cmdBareForwarder:
			// Hidden: the bare rows' child processes.
			return runBare(args[0], args[1:], stderr)
		case cmdBareWebhook:
			return runBareWebhook(args[1:], stderr)
		}
	}
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.proxy, "proxy", "bin/dedupe-proxy", "the dedupe-proxy binary (make build)")
	fs.StringVar(&o.baseline, "baseline", "", "another dedupe-proxy binary (e.g. an older build): run (c) with it too, right after (c), and compare")
	fs.IntVar(&o.n, "n", 50000, "backlog messages drained per row (msgs/s, CPU, Redis per message)")
	fs.IntVar(&o.rate, "rate", 1000, "publish rate of the latency phase, msgs/s, the same for every row")
	fs.DurationVar(&o.paced, "paced", 5*time.Second, "duration of the latency phase")
	fs.IntVar(&o.bodyBytes, "body", 256, "message body size in bytes (a JSON envelope)")
	fs.IntVar(&o.prefetch, "prefetch", 100, "RabbitMQ prefetch, bare and proxy alike")
	fs.IntVar(&o.workers, "workers", 32, "RabbitMQ and Redis concurrent workers (and app connection pool), bare and proxy alike")
	fs.IntVar(&o.partitions, "partitions", 6, "Kafka partitions per topic")
	fs.IntVar(&o.kafkaBatch, "kafka-batch", 32, "the proxy's Kafka batch_size (1: claim one message at a time)")
	fs.StringVar(&o.ordering, "kafka-ordering", "partition", "the proxy's Kafka ordering: partition or key")
	fs.IntVar(&o.inFlight, "max-in-flight", 64, "the proxy's Kafka max_in_flight (ordering key)")
	fs.StringVar(&o.rows, "rows", "", "the rows to run, by letter, comma-separated (e.g. c,e: Kafka partition against key order); empty: all")
	fs.StringVar(&o.seenset, "seenset", "redis", "the proxy's seen-set: redis (the private redis-server) or memory")
	fs.DurationVar(&o.appDelay, "app-delay", 0, "time the app takes per request (0: a no-op app)")
	fs.StringVar(&o.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	fs.StringVar(&o.redisBin, "redis-server", "redis-server", "redis-server binary for the private seen-set Redis")
	fs.StringVar(&o.brokers, "brokers", "rabbitmq,kafka,redis", "brokers to measure, comma-separated")
	fs.StringVar(&o.profileDir, "profile", "", "if set, run (c) once more per broker with pprof on and write CPU and alloc profiles here (not part of the table)")
	fs.DurationVar(&o.profileFor, "profile-time", 4*time.Second, "CPU profile duration of the -profile runs")
	fs.DurationVar(&o.timeout, "row-timeout", 90*time.Second, "give up on a row's drain after this long")
	fs.BoolVar(&o.verbose, "v", false, "log progress to stderr")
	fs.StringVar(&o.only, "only", "", "run these parts only, comma-separated: rows (the table), webhook (the webhook rows), failover (the Kafka failover section), slow (the Kafka slow-app section), instructions (instructions per message under callgrind; with rows, joined into the table)")
	fs.IntVar(&o.slowN, "slow-n", 2000, "slow-app section: keyless records drained per ordering mode")
	fs.DurationVar(&o.slowHang, "slow-hang", 12*time.Second, "slow-app section: how long the 1% of messages that hang make the app wait")
	fs.DurationVar(&o.slowTimeout, "slow-timeout", 5*time.Minute, "slow-app section: give up on one drain after this long")
	instrN := fs.String("instr-n", "1000,3000", "-only instructions: the two backlog sizes drained under callgrind; per message = the difference of the counts / the difference of the sizes")
	fs.DurationVar(&o.instrTimeout, "instr-timeout", 10*time.Minute, "-only instructions: give up on one drain under valgrind after this long")
	fs.IntVar(&o.instrRuns, "instr-runs", 2, "-only instructions: drains of each size per row; the lowest count is kept")
	fs.IntVar(&o.whN, "webhook-n", 10000, "webhook rows: requests in the burst")
	fs.IntVar(&o.whSenders, "webhook-senders", 32, "webhook rows: concurrent senders in the burst")
	fs.IntVar(&o.whRate, "webhook-rate", 0, "webhook rows: the fixed rate after the burst, req/s (0: half the bare handler's req/s)")
	fs.StringVar(&o.foWhich, "failover", "abcd", "failover section: the scenarios to run, (a) SIGTERM, (b) SIGKILL, (c) a burst of SIGKILLs, (d) a member crash-looping")
	fs.DurationVar(&o.foWindow, "failover-window", 0, "failover section: the longest wait after the last signal for every partition to flow (0: session_timeout + rebalance_timeout + 5s)")
	fs.BoolVar(&o.keep, "keep", false, "keep the configs and child logs (their directory is printed to stderr)")
	fs.IntVar(&o.foRate, "failover-rate", 500, "failover section: publish rate, msgs/s")
	fs.DurationVar(&o.foSession, "session-timeout", 0, "failover section: the proxies' kafka session_timeout (0: the proxy's default)")
	fs.DurationVar(&o.foHeartbeat, "heartbeat-interval", 0, "failover section: the proxies' kafka heartbeat_interval (0: the proxy's default)")
	fs.DurationVar(&o.foRebalance, "rebalance-timeout", 0, "failover section: the proxies' kafka rebalance_timeout (0: the proxy's default)")
	fs.DurationVar(&o.foLease, "lease", 0, "failover section: the proxies' seenset.lease (0: the proxy's default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if o.n < 2 || o.rate < 1 || o.paced <= 0 || o.bodyBytes < 64 || o.prefetch < 1 || o.workers < 1 || o.partitions < 1 || o.kafkaBatch < 1 {
		fmt.Fprintln(stderr, "bench: -n ≥ 2, -rate ≥ 1, -paced > 0, -body ≥ 64, -prefetch, -workers, -partitions and -kafka-batch ≥ 1")
		return 2
	}
	if o.ordering != "partition" && o.ordering != "key" || o.seenset != "redis" && o.seenset != "memory" || o.inFlight < 1 || o.appDelay < 0 {
		fmt.Fprintln(stderr, "bench: -kafka-ordering partition|key, -seenset redis|memory, -max-in-flight ≥ 1, -app-delay ≥ 0")
		return 2
	}
	badPart := false
	for p := range strings.SplitSeq(o.only, ",") {
		badPart = badPart || o.only != "" && !slices.Contains([]string{"rows", "webhook", "failover", "slow", "instructions"}, p)
	}
	if badPart || o.foRate < 1 || o.whN < 1 || o.whSenders < 1 || o.whRate < 0 || o.slowN < 1 {
		fmt.Fprintln(stderr, "bench: -only rows|webhook|failover|slow|instructions, -failover-rate, -webhook-n, -webhook-senders, -slow-n ≥ 1")
		return 2
	}
	if _, err := fmt.Sscanf(*instrN, "%d,%d", &o.instrSizes[0], &o.instrSizes[1]); err != nil || o.instrSizes[0] < 1 || o.instrSizes[1] <= o.instrSizes[0] {
		fmt.Fprintf(stderr, "bench: -instr-n %q: want two sizes, the smaller first, e.g. 1000,3000\n", *instrN)
		return 2
	}
	if o.instrRuns < 1 {
		fmt.Fprintf(stderr, "bench: -instr-runs %d: want at least 1\n", o.instrRuns)
		return 2
	}
	o.n -= o.n % 2 // (d) is exactly half duplicates
	if _, err := os.Stat(o.proxy); err != nil {
		fmt.Fprintf(stderr, "bench: proxy binary %s not found: run make build (make bench does it)\n", o.proxy)
		return 2
	}
	if _, err := os.Stat(o.baseline); o.baseline != "" && err != nil {
		fmt.Fprintf(stderr, "bench: -baseline binary %s not found\n", o.baseline)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	b, err := newBench(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	defer b.close()
	if o.keep {
		b.keepDir = true
		fmt.Fprintf(stderr, "bench: configs and logs in %s\n", b.dir)
	}

	rep := &report{o: o, machine: b.machine(ctx)}
	brokers := strings.Split(o.brokers, ",")
	if !o.runs("rows") {
		brokers = nil
	}
	for _, name := range brokers {
		name = strings.TrimSpace(name)
		if ctx.Err() != nil {
			break
		}
		switch name {
		case "rabbitmq":
			rep.sections = append(rep.sections, b.measure(ctx, b.rabbit))
		case "kafka":
			rep.sections = append(rep.sections, b.measureKafka(ctx))
		case "redis":
			rep.sections = append(rep.sections, b.measure(ctx, b.redisList), b.measure(ctx, b.redisStream))
		case "":
		default:
			fmt.Fprintf(stderr, "bench: unknown broker %q (rabbitmq, kafka, redis)\n", name)
			return 2
		}
	}
	if o.runs("instructions") {
		for _, name := range strings.Split(o.brokers, ",") {
			if ctx.Err() != nil {
				break
			}
			brs, missing := b.brokersNamed(strings.TrimSpace(name))
			if brs == nil {
				rep.instr = append(rep.instr, &instrSection{broker: name, sizes: o.instrSizes, missing: missing})
			}
			for _, br := range brs {
				rep.instr = append(rep.instr, b.measureInstructions(ctx, br))
			}
		}
		rep.joinInstructions()
	}
	if o.runs("webhook") && slices.Contains(strings.Split(o.brokers, ","), "rabbitmq") && ctx.Err() == nil {
		rep.webhook = b.measureWebhook(ctx)
	}
	if o.runs("slow") && slices.Contains(strings.Split(o.brokers, ","), "kafka") && ctx.Err() == nil {
		rep.slow = b.measureSlow(ctx)
	}
	if o.runs("failover") && slices.Contains(strings.Split(o.brokers, ","), "kafka") && ctx.Err() == nil {
		rep.failover = b.measureFailover(ctx)
	}
	if o.profileDir != "" && ctx.Err() == nil {
		rep.profiles = b.profileAll(ctx)
	}
	rep.print(stdout)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted")
		return 1
	}
	if rep.failed() {
		b.keepDir = true
		fmt.Fprintf(stderr, "bench: a row could not be measured; configs and logs kept in %s\n", b.dir)
		return 1
	}
	return 0
}
