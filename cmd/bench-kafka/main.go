// Command bench-kafka measures the Kafka source: messages per second
// through dedupe-proxy against a bare kafka-go consumer that forwards to
// the same no-op HTTP app and commits in batches — same machine, same
// run, same in-process Kafka (franz-go's kfake), same backlog — and prints
// one table.
//
//	go run ./cmd/bench-kafka                 # 50,000 messages, 6 partitions
//	go run ./cmd/bench-kafka -n 200000 -redis ""   # memory store only
//	go run ./cmd/bench-kafka -n 20000 -app-delay 2ms  # a slow app: ordering key pays off
//
// Rows, each draining the whole backlog with its own consumer group:
//
//	bare kafka-go   ConsumerGroup, one goroutine per partition reading with a
//	                partition Reader, POST each message to the app, commit
//	                every -commit-every messages per partition: what a user
//	                writes by hand, without dedupe
//	dedupe-proxy    the daemon in-process, ordering partition and key, with
//	                the memory seen-set and with Redis (-redis, a fresh key
//	                prefix per row, deleted afterwards)
//
// msg/s is measured from the app's first request to its last, so group
// join time is left out. CPU µs/msg is this process's user+system time for
// the row (kfake, the app and the consumer together, the same for every
// row) divided by the messages: steadier than msg/s on a busy machine.
// Shared machines are noisy: compare rows of one run, not numbers across
// runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-kafka:", err)
		os.Exit(1)
	}
}

type flags struct {
	n           int
	size        int
	partitions  int
	keys        int
	commitEvery int
	maxInFlight int
	redisAddr   string
	timeout     time.Duration
	appDelay    time.Duration
	only        string
	cpuprofile  string
}

func run() error {
	var f flags
	flag.IntVar(&f.n, "n", 50000, "messages in the backlog")
	flag.IntVar(&f.size, "size", 200, "bytes per message value (a JSON envelope padded to this size)")
	flag.IntVar(&f.partitions, "partitions", 6, "partitions of the topic")
	flag.IntVar(&f.keys, "keys", 1000, "distinct record keys (ordering: key runs different keys concurrently)")
	flag.IntVar(&f.commitEvery, "commit-every", 500, "commit every N messages per partition (bare consumer and proxy)")
	flag.IntVar(&f.maxInFlight, "max-in-flight", 64, "proxy max_in_flight per partition for ordering: key")
	flag.StringVar(&f.redisAddr, "redis", "127.0.0.1:6379", "Redis for the Redis rows; empty skips them")
	flag.DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up on a row after this long")
	flag.DurationVar(&f.appDelay, "app-delay", 0, "how long the app takes per request (0: a no-op app); a slow app is where ordering: key pays off")
	flag.StringVar(&f.only, "only", "", "run only the proxy rows whose \"store/ordering\" contains this (the bare row always runs)")
	flag.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the proxy rows to this file")
	flag.Parse()

	app, err := startApp(f.appDelay)
	if err != nil {
		return err
	}
	defer app.close()

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(f.partitions), "bench"))
	if err != nil {
		return fmt.Errorf("kfake: %w", err)
	}
	addrs := kc.ListenAddrs() // hangs after Close
	defer kc.Close()

	fmt.Fprintf(os.Stderr, "producing %d messages of %d B to %d partitions...\n", f.n, f.size, f.partitions)
	if err := produce(addrs, f); err != nil {
		return err
	}

	type row struct {
		name, store, ordering string
		res                   result
		err                   error
	}
	var rows []row
	add := func(name, store, ordering string, fn func() (result, error)) {
		fmt.Fprintf(os.Stderr, "running %s / %s / %s...\n", name, store, ordering)
		app.reset()
		cpu0 := cpuTime()
		res, err := fn()
		res.cpu = cpuTime() - cpu0
		rows = append(rows, row{name, store, ordering, res, err})
	}
	add("bare kafka-go (POST, commit in batches)", "-", "partition", func() (result, error) {
		return runBare(addrs, app, f)
	})
	if f.cpuprofile != "" {
		pf, err := os.Create(f.cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
	}
	stores := []string{"memory"}
	if f.redisAddr != "" {
		stores = append(stores, "redis")
	}
	for _, store := range stores {
		for _, ordering := range []string{"partition", "key"} {
			if !strings.Contains(store+"/"+ordering, f.only) {
				continue
			}
			add("dedupe-proxy", store, ordering, func() (result, error) {
				return runProxy(addrs, app, f, store, ordering)
			})
		}
	}

	if f.cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	bare := rows[0].res.rate()
	appDesc := "no-op HTTP app"
	if f.appDelay > 0 {
		appDesc = fmt.Sprintf("HTTP app taking %s per request", f.appDelay)
	}
	fmt.Printf("\nKafka source benchmark: %d messages × %d B, %d partitions, %d record keys, kfake in-process, %s on loopback, GOMAXPROCS=%d\n\n",
		f.n, f.size, f.partitions, f.keys, appDesc, runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "consumer\tseen-set\tordering\tmsg/s\tvs bare\tCPU µs/msg\tapp requests\tcommitted\t")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\tfailed: %v\t\t\t\t\t\n", r.name, r.store, r.ordering, r.err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.2f\t%.1f\t%d\t%d\t\n", r.name, r.store, r.ordering, r.res.rate(), r.res.rate()/bare,
			float64(r.res.cpu.Microseconds())/float64(f.n), r.res.requests, r.res.committed)
	}
	_ = tw.Flush()
	fmt.Printf("\nproxy: commit_every %d, commit_interval 1s, max_in_flight %d (key), app.max_conns 64; bare: one goroutine per partition, commit every %d\n",
		f.commitEvery, f.maxInFlight, f.commitEvery)
	for _, r := range rows {
		if r.err != nil {
			return errors.New("a row failed")
		}
	}
	return nil
}

type result struct {
	cpu       time.Duration // user+system CPU of this process for the row (kfake, app and consumer together)
	elapsed   time.Duration // first app request → last
	requests  int64
	committed int64
}

func (r result) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.requests-1) / r.elapsed.Seconds()
}

// app is the no-op app: it reads the body and answers 200.
type app struct {
	srv   *http.Server
	url   string
	count atomic.Int64
	first atomic.Int64 // unix nanos of the first request since reset
	last  atomic.Int64
}

func startApp(delay time.Duration) (*app, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &app{url: "http://" + ln.Addr().String()}
	a.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if delay > 0 {
			time.Sleep(delay)
		}
		now := time.Now().UnixNano()
		a.first.CompareAndSwap(0, now)
		a.count.Add(1)
		a.last.Store(now)
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *app) reset() { a.count.Store(0); a.first.Store(0); a.last.Store(0) }

func (a *app) close() { _ = a.srv.Close() }

// wait returns once the app saw n requests.
func (a *app) wait(n int, timeout time.Duration) (result, error) {
	deadline := time.Now().Add(timeout)
	for a.count.Load() < int64(n) {
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("only %d of %d requests after %s", a.count.Load(), n, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return result{elapsed: time.Duration(a.last.Load() - a.first.Load()), requests: a.count.Load()}, nil
}

func produce(addrs []string, f flags) error {
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{
		Addr:         kafkago.TCP(addrs...),
		Topic:        "bench",
		Balancer:     &kafkago.RoundRobin{},
		RequiredAcks: kafkago.RequireAll,
		BatchSize:    1000,
		BatchTimeout: 2 * time.Millisecond,
		Transport:    tr,
	}
	defer w.Close()
	const chunk = 5000
	for i := 0; i < f.n; i += chunk {
		var msgs []kafkago.Message
		for j := i; j < min(i+chunk, f.n); j++ {
			msgs = append(msgs, kafkago.Message{Key: fmt.Appendf(nil, "customer-%d", j%f.keys), Value: envelope(j, f.size)})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := w.WriteMessages(ctx, msgs...)
		cancel()
		if err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

func envelope(i, size int) []byte {
	b := fmt.Appendf(nil, `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":%d,"note":"`, i)
	tail := fmt.Appendf(nil, `"},"meta":{"id":"bench-%08d","schema_version":1,"lang":"go"},"attempts":0}`, i)
	if pad := size - len(b) - len(tail); pad > 0 {
		b = append(b, strings.Repeat("x", pad)...)
	}
	return append(b, tail...)
}

var groupSeq atomic.Int64

func group(name string) string {
	return fmt.Sprintf("bench-%s-%d-%d", name, time.Now().UnixNano(), groupSeq.Add(1))
}

// runBare is the hand-written baseline: no seen-set, no retries, no
// dead letters; each partition forwards in order and commits every
// commitEvery messages, and once more when its generation ends.
func runBare(addrs []string, a *app, f flags) (result, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	id := group("bare")
	cg, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID: id, Brokers: addrs, Topics: []string{"bench"}, StartOffset: kafkago.FirstOffset,
		HeartbeatInterval: time.Second, SessionTimeout: 10 * time.Second, Timeout: 5 * time.Second,
	})
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	gen, err := cg.Next(ctx)
	if err != nil {
		_ = cg.Close()
		return result{}, err
	}
	var forwardErr atomic.Value
	for topic, as := range gen.Assignments {
		for _, pa := range as {
			gen.Start(func(ctx context.Context) {
				r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: addrs, Topic: topic, Partition: pa.ID, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 250 * time.Millisecond})
				defer r.Close()
				_ = r.SetOffset(pa.Offset)
				next, since := int64(-1), 0
				commit := func() {
					if since > 0 {
						_ = gen.CommitOffsets(map[string]map[int]int64{topic: {pa.ID: next}})
						since = 0
					}
				}
				defer commit()
				for {
					m, err := r.FetchMessage(ctx)
					if err != nil {
						if ctx.Err() != nil {
							return
						}
						continue
					}
					resp, err := client.Post(a.url+"/", "application/json", strings.NewReader(string(m.Value)))
					if err != nil {
						forwardErr.Store(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					next, since = m.Offset+1, since+1
					if since >= f.commitEvery {
						commit()
					}
				}
			})
		}
	}
	res, werr := a.wait(f.n, f.timeout)
	_ = cg.Close() // ends the generation: final commits, leave
	if e, ok := forwardErr.Load().(error); ok {
		return result{}, e
	}
	if werr != nil {
		return result{}, werr
	}
	res.committed = committed(addrs, id, f.partitions)
	return res, nil
}

// runProxy runs the real daemon in-process against the backlog.
func runProxy(addrs []string, a *app, f flags, store, ordering string) (result, error) {
	cfg := config.Default()
	cfg.Consumer = "bench-" + store + "-" + ordering
	cfg.Admin.Listen = ""
	cfg.App.URL = a.url
	cfg.App.MaxConns = 64
	cfg.SeenSet.Backend = store
	prefix := fmt.Sprintf("bench-kafka:%d:", time.Now().UnixNano())
	cfg.SeenSet.Redis.Addrs = []string{f.redisAddr}
	cfg.SeenSet.Redis.Prefix = prefix
	src := config.DefaultSource()
	src.Name = "bench"
	src.Type = "kafka"
	src.Kafka.Brokers = addrs
	src.Kafka.Topics = []string{"bench"}
	src.Kafka.Group = group("proxy")
	src.Kafka.Ordering = ordering
	src.Kafka.MaxInFlight = f.maxInFlight
	src.Kafka.CommitEvery = f.commitEvery
	cfg.Sources = []config.Source{src}
	if err := cfg.Validate(); err != nil {
		return result{}, err
	}
	if store == "redis" {
		defer deleteKeys(f.redisAddr, prefix)
	}
	d, err := daemon.New(&cfg, daemon.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	res, werr := a.wait(f.n, f.timeout)
	if werr == nil {
		// Let the interval commit catch up before stopping (not timed).
		deadline := time.Now().Add(10 * time.Second)
		for committed(addrs, src.Kafka.Group, f.partitions) < int64(f.n) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	cancel()
	if err := <-done; err != nil && werr == nil {
		werr = err
	}
	if werr != nil {
		return result{}, werr
	}
	res.committed = committed(addrs, src.Kafka.Group, f.partitions)
	return res, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var committedMu sync.Mutex

// committed sums the group's committed offsets.
func committed(addrs []string, group string, partitions int) int64 {
	committedMu.Lock()
	defer committedMu.Unlock()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(addrs...), Transport: tr, Timeout: 5 * time.Second}
	parts := make([]int, partitions)
	for i := range parts {
		parts[i] = i
	}
	resp, err := cl.OffsetFetch(context.Background(), &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{"bench": parts}})
	if err != nil {
		return -1
	}
	var n int64
	for _, p := range resp.Topics["bench"] {
		n += max(p.CommittedOffset, 0)
	}
	return n
}

func deleteKeys(addr, prefix string) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			c.Del(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		c.Del(ctx, batch...)
	}
}
