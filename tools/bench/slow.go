package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The slow-app section: what one slow request costs its neighbours on
// Kafka, in each ordering mode. A backlog of -slow-n keyless records
// (the dedupe key is the body's meta.id) on -partitions partitions is
// drained by two proxy processes in one group into an app that, on the
// first attempt of a message, answers 5% with 500 and lets 1% hang for
// -slow-hang (longer than the proxies' app.timeout of 5s) before it
// answers 200. Which messages do that is fixed by a hash of their id, so
// both modes meet the same ones. The figure is msgs/s from the first
// request at the app to the last message's 2xx.

// slowRow is one ordering mode's drain.
type slowRow struct {
	ordering string
	err      error
	n        int
	took     time.Duration
	done     int // distinct ids answered 2xx
	doubles  int // ids answered 2xx more than once
	hung     int
	failed   int
}

type slowSection struct {
	missing    string
	n          int
	hang       time.Duration
	partitions int
	rows       []*slowRow
}

func (b *bench) measureSlow(ctx context.Context) *slowSection {
	s := &slowSection{n: b.o.slowN, hang: b.o.slowHang, partitions: b.o.partitions}
	if why := b.startKafka(ctx); why != "" {
		s.missing = why
		return s
	}
	for _, ord := range []string{"partition", "key"} {
		if ctx.Err() != nil {
			break
		}
		r := b.runSlow(ctx, ord)
		if r.err != nil {
			b.log.Warn("slow-app row failed", "ordering", ord, "err", r.err)
		}
		s.rows = append(s.rows, r)
	}
	return s
}

// slowApp answers by the message's id (Idempotency-Key): on its first
// attempt one in a hundred hangs for hang and then succeeds, five in a
// hundred get a 500; every other request a 200 at once.
type slowApp struct {
	url  string
	srv  *http.Server
	hang time.Duration
	stop chan struct{}

	mu     sync.Mutex
	ok     map[string]int
	first  time.Time
	last   time.Time
	hung   int
	failed int
}

func startSlowApp(hang time.Duration) (*slowApp, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &slowApp{url: "http://" + ln.Addr().String(), hang: hang, stop: make(chan struct{}), ok: map[string]int{}}
	a.srv = &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *slowApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.Header.Get("Idempotency-Key")
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	bucket := h.Sum32() % 100
	first := r.Header.Get("X-Dedupe-Attempt") == "1"
	a.mu.Lock()
	if a.first.IsZero() {
		a.first = time.Now()
	}
	a.mu.Unlock()
	switch {
	case first && bucket == 0:
		a.mu.Lock()
		a.hung++
		a.mu.Unlock()
		select {
		case <-time.After(a.hang):
		case <-a.stop:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
	case first && bucket <= 5:
		a.mu.Lock()
		a.failed++
		a.mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	a.mu.Lock()
	a.ok[id]++
	a.last = time.Now()
	a.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (a *slowApp) done() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ok)
}

func (a *slowApp) close() {
	close(a.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
}

func (b *bench) runSlow(ctx context.Context, ordering string) *slowRow {
	r := &slowRow{ordering: ordering, n: b.o.slowN}
	id := fmt.Sprintf("bench-%s-slow-%s", b.runID, ordering)
	dd, err := b.kafka.newDest(ctx, id)
	if err != nil {
		r.err = fmt.Errorf("create topic: %w", err)
		return r
	}
	d := dd.(*kafkaDest)
	defer d.cleanup()
	w, err := d.producer()
	if err != nil {
		r.err = err
		return r
	}
	recs := make([]*kgo.Record, 0, r.n)
	for i := range r.n {
		// Keyless: the producer spreads them over the partitions.
		recs = append(recs, &kgo.Record{Value: b.body(nowNanos(), id+"-"+strconv.Itoa(i))})
	}
	err = w.ProduceSync(ctx, recs...).FirstErr()
	w.Close()
	if err != nil {
		r.err = fmt.Errorf("publish: %w", err)
		return r
	}
	app, err := startSlowApp(b.o.slowHang)
	if err != nil {
		r.err = err
		return r
	}
	defer app.close()
	var members []*child
	defer func() {
		var wg sync.WaitGroup
		for _, m := range members {
			wg.Go(func() { _ = m.stop() })
		}
		wg.Wait()
	}()
	for i := range 2 {
		m, err := b.startSlowProxy(ctx, d, app.url, id, i, ordering)
		if err != nil {
			r.err = err
			return r
		}
		members = append(members, m)
	}
	deadline := time.Now().Add(b.o.slowTimeout)
	for app.done() < r.n && time.Now().Before(deadline) && ctx.Err() == nil {
		for _, m := range members {
			if err := m.exited(); err != nil {
				r.err = err
				return r
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	app.mu.Lock()
	defer app.mu.Unlock()
	r.done, r.hung, r.failed = len(app.ok), app.hung, app.failed
	for _, n := range app.ok {
		if n > 1 {
			r.doubles++
		}
	}
	end := app.last
	if r.done < r.n {
		end = time.Now()
	}
	if !app.first.IsZero() {
		r.took = end.Sub(app.first)
	}
	b.log.Info("slow-app drain", "ordering", ordering, "done", r.done, "of", r.n, "took", r.took.Round(time.Millisecond))
	return r
}

func (b *bench) startSlowProxy(ctx context.Context, d *kafkaDest, appURL, id string, i int, ordering string) (*child, error) {
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-m%d", id, i)
	cfg := fmt.Sprintf(`consumer: bench
shutdown_timeout: 10s
log: {level: warn, format: json}
admin: {listen: "%s"}
app:
  url: "%s"
  timeout: 5s
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
    type: kafka
    kafka:
      brokers: ["%s"]
      topics: ["%s"]
      group: "%s"
      ordering: %s
      max_in_flight: %d
      batch_size: %d
`, admin, appURL, b.o.inFlight, b.o.seenset, b.redis.addr, id, b.kafka.addr, d.topic, d.group(), ordering, b.o.inFlight, b.o.kafkaBatch)
	cfgPath := filepath.Join(b.dir, name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	return startChild(ctx, b.o.proxy, []string{"run", "--config", cfgPath}, []string{"POD_NAME=" + name}, admin, filepath.Join(b.dir, name+".log"), true)
}

func (s *slowSection) print(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Kafka slow app (kfake, %d partitions, %d keyless records, two proxy processes in one group; on its first\n", s.partitions, s.n)
	fmt.Fprintf(w, "attempt 1%% of messages hang %s (app.timeout 5s) and 5%% get a 500, chosen by a hash of the id):\n", s.hang)
	if s.missing != "" {
		fmt.Fprintln(w, "  "+s.missing)
		return
	}
	const head = "  %-20s %9s %9s %9s %7s %7s %8s\n"
	fmt.Fprintf(w, head, "ordering", "msgs/s", "took", "done", "hung", "500s", "doubles")
	for _, r := range s.rows {
		if r.err != nil {
			fmt.Fprintf(w, "  %-20s error: %v\n", r.ordering, r.err)
			continue
		}
		rate := 0.0
		if r.took > 0 {
			rate = float64(r.done) / r.took.Seconds()
		}
		took := secs(r.took)
		if r.done < r.n {
			took += " (cut)"
		}
		fmt.Fprintf(w, head, r.ordering, thousands(rate), took, fmt.Sprintf("%d/%d", r.done, r.n), strconv.Itoa(r.hung), strconv.Itoa(r.failed), strconv.Itoa(r.doubles))
	}
	fmt.Fprintln(w, "  msgs/s: messages answered 2xx per second, from the first request at the app to the last 2xx (or to")
	fmt.Fprintln(w, "  -slow-timeout: \"(cut)\"); doubles: ids the app answered 2xx more than once (must be 0).")
}

func (s *slowSection) failed() bool {
	for _, r := range s.rows {
		if r.err != nil {
			return true
		}
	}
	return false
}
