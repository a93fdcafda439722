package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The hidden sub-commands that are the bare rows' child processes.
const (
	cmdBareConsumer  = "bare-consumer"
	cmdBareForwarder = "bare-forwarder"
)

type bareOptions struct {
	listen   string
	app      string // bare-forwarder: POST here
	broker   string
	amqpURL  string
	queue    string
	prefetch int
	workers  int
	brokers  string
	topic    string
	group    string
	every    int
	interval time.Duration
	// redisAddr and redisMode: the Redis rows' server and list|stream
	// (queue is the list or stream, group the stream's group).
	redisAddr string
	redisMode string
}

// bareStatus is what a bare child's /stats answers.
type bareStatus struct {
	Settled int64 `json:"settled"`
}

// bareStats counts settled messages and, while asked to, records the
// publish→consume latency (the bare consumer has no app to do it).
type bareStats struct {
	settled atomic.Int64
	rec     atomic.Bool
	mu      sync.Mutex
	lat     []int64
}

func (s *bareStats) done(body []byte) {
	s.settled.Add(1)
	if !s.rec.Load() {
		return
	}
	if ts := publishTime(body); ts > 0 {
		d := time.Now().UnixNano() - ts
		s.mu.Lock()
		s.lat = append(s.lat, d)
		s.mu.Unlock()
	}
}

func (s *bareStats) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(bareStatus{Settled: s.settled.Load()})
	})
	mux.HandleFunc("POST /latency/start", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		s.lat = nil
		s.mu.Unlock()
		s.rec.Store(true)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /latency", func(w http.ResponseWriter, _ *http.Request) {
		s.rec.Store(false)
		s.mu.Lock()
		lat := s.lat
		s.lat = nil
		s.mu.Unlock()
		if lat == nil {
			lat = []int64{}
		}
		_ = json.NewEncoder(w).Encode(lat)
	})
	return mux
}

// forwarder is the hand-written forward step: POST the body, drain the
// answer, keep-alive pool sized to the workers, no dedupe.
type forwarder struct {
	url string
	c   *http.Client
}

func newForwarder(url string, conns int) *forwarder {
	return &forwarder{url: url, c: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     90 * time.Second,
		},
	}}
}

func (f *forwarder) post(ctx context.Context, body []byte, contentType string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := f.c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// runBare is `bench bare-consumer|bare-forwarder`: consume until SIGTERM.
func runBare(mode string, args []string, stderr io.Writer) int {
	var o bareOptions
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "stats address")
	fs.StringVar(&o.app, "app", "", "app URL (bare-forwarder)")
	fs.StringVar(&o.broker, "broker", "rabbitmq", "rabbitmq, kafka or redis")
	fs.StringVar(&o.amqpURL, "amqp", "", "RabbitMQ URL")
	fs.StringVar(&o.queue, "queue", "", "RabbitMQ queue, Redis list or stream")
	fs.IntVar(&o.prefetch, "prefetch", 100, "RabbitMQ prefetch")
	fs.IntVar(&o.workers, "workers", 32, "RabbitMQ and Redis workers")
	fs.StringVar(&o.brokers, "brokers", "", "Kafka broker host:port")
	fs.StringVar(&o.topic, "topic", "", "Kafka topic")
	fs.StringVar(&o.group, "group", "", "Kafka or Redis stream consumer group")
	fs.StringVar(&o.redisAddr, "redis", "", "Redis host:port")
	fs.StringVar(&o.redisMode, "redis-mode", "list", "Redis: list or stream")
	fs.IntVar(&o.every, "commit-every", 500, "Kafka: commit once a partition finished this many")
	fs.DurationVar(&o.interval, "commit-interval", time.Second, "Kafka: commit at least this often")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var fwd *forwarder
	if mode == cmdBareForwarder {
		if o.app == "" {
			fmt.Fprintln(stderr, "bare-forwarder: -app is required")
			return 2
		}
		fwd = newForwarder(o.app, o.workers)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	st := &bareStats{}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", mode, err)
		return 1
	}
	srv := &http.Server{Handler: st.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	switch o.broker {
	case "rabbitmq":
		err = bareRabbit(ctx, o, st, fwd)
	case "kafka":
		err = bareKafka(ctx, o, st, fwd)
	case "redis":
		err = bareRedis(ctx, o, st, fwd)
	default:
		err = fmt.Errorf("unknown broker %q", o.broker)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", mode, err)
		return 1
	}
	return 0
}

// bareRabbit is the consumer users write by hand: manual acks, prefetch,
// a fixed pool of workers.
func bareRabbit(ctx context.Context, o bareOptions, st *bareStats, fwd *forwarder) error {
	conn, err := amqp.Dial(o.amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(o.prefetch, 0, false); err != nil {
		return err
	}
	const tag = "bench-bare"
	deliveries, err := ch.Consume(o.queue, tag, false, false, false, false, nil)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() {
			for d := range deliveries {
				if fwd != nil {
					if err := fwd.post(ctx, d.Body, d.ContentType); err != nil {
						_ = d.Nack(false, true)
						continue
					}
				}
				if err := d.Ack(false); err == nil {
					st.done(d.Body)
				}
			}
		})
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	select {
	case <-ctx.Done():
		_ = ch.Cancel(tag, false)
		wg.Wait()
		return nil
	case e := <-closed:
		return fmt.Errorf("connection closed: %v", e)
	}
}

// bareKafka is a consumer-group member with one goroutine per partition
// handling its messages in order, and batched commits: every
// commit-every finished messages or every commit-interval, and on
// revoke. It is franz-go's goroutine-per-partition example with marked
// commits, on one client like the proxy, with the same fetch settings.
func bareKafka(ctx context.Context, o bareOptions, st *bareStats, fwd *forwarder) error {
	var (
		mu      sync.Mutex
		workers = map[int32]*bareWorker{}
		kick    = make(chan struct{}, 1)
	)
	stop := func(parts map[string][]int32) {
		mu.Lock()
		var ws []*bareWorker
		for _, ids := range parts {
			for _, id := range ids {
				if w := workers[id]; w != nil {
					ws = append(ws, w)
					delete(workers, id)
				}
			}
		}
		mu.Unlock()
		for _, w := range ws {
			close(w.quit)
		}
		for _, w := range ws {
			<-w.done
		}
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(o.brokers),
		kgo.ConsumerGroup(o.group),
		kgo.ConsumeTopics(o.topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.HeartbeatInterval(time.Second),
		kgo.SessionTimeout(10*time.Second),
		kgo.RebalanceTimeout(30*time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.FetchMaxBytes(1<<20),
		kgo.FetchMaxPartitionBytes(256<<10),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(o.interval),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, added map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, ids := range added {
				for _, id := range ids {
					w := &bareWorker{recs: make(chan []*kgo.Record, 4), quit: make(chan struct{}), done: make(chan struct{})}
					workers[id] = w
					go w.run(ctx, cl, o, st, fwd, kick)
				}
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, gone map[string][]int32) {
			stop(gone)
			_ = cl.CommitMarkedOffsets(ctx)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, gone map[string][]int32) { stop(gone) }),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
				_ = cl.CommitMarkedOffsets(ctx)
			}
		}
	}()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			cl.AllowRebalance()
			return nil
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			mu.Lock()
			w := workers[p.Partition]
			mu.Unlock()
			if w != nil && len(p.Records) > 0 {
				select {
				case w.recs <- p.Records:
				case <-ctx.Done():
				}
			}
		})
		cl.AllowRebalance()
	}
}

type bareWorker struct {
	recs chan []*kgo.Record
	quit chan struct{}
	done chan struct{}
}

func (w *bareWorker) run(ctx context.Context, cl *kgo.Client, o bareOptions, st *bareStats, fwd *forwarder, kick chan struct{}) {
	defer close(w.done)
	finished := 0
	for {
		select {
		case <-w.quit:
			return
		case <-ctx.Done():
			return
		case rs := <-w.recs:
			for _, r := range rs {
				for fwd != nil {
					if err := fwd.post(ctx, r.Value, ""); err == nil || ctx.Err() != nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if ctx.Err() != nil {
					return
				}
				cl.MarkCommitRecords(r)
				st.done(r.Value)
				if finished++; finished >= o.every {
					finished = 0
					select {
					case kick <- struct{}{}:
					default:
					}
				}
			}
		}
	}
}
