// Command demo shows dedupe-proxy end to end: it starts the demo app and
// two proxy replicas (the real binary), publishes BabelQueue envelopes
// with duplicates — some published concurrently with their original, some
// right after, some after the original was processed — and prints what
// reached the app (make demo). It is a tool for trying the proxy, not part
// of the product.
//
// It runs on the local RabbitMQ and Redis when both answer, and otherwise
// says so in one line and runs the same demo on embedded parts: an
// in-process Kafka (kfake) as the broker and an in-process Redis-protocol
// server (miniredis) as the seen-set, both reached by the two proxy
// processes over TCP. -broker and -seenset choose explicitly. The
// embedded parts live here, in the demo tool, never in the proxy binary.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	mrand "math/rand/v2"

	"github.com/dedupe-proxy/dedupe-proxy/tools/internal/proxymetrics"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	proxy    string
	messages int
	dupRatio float64
	replicas int
	amqpURL  string
	redis    string
	delay    time.Duration
	broker   string
	seenset  string
	webhook  bool
}

func run() error {
	var o options
	flag.StringVar(&o.proxy, "proxy", "bin/dedupe-proxy", "the dedupe-proxy binary (make build)")
	flag.IntVar(&o.messages, "messages", 1000, "messages to publish")
	flag.Float64Var(&o.dupRatio, "duplicates", 0.3, "fraction of messages that are duplicates")
	flag.IntVar(&o.replicas, "replicas", 2, "proxy replicas consuming the same queue or topic")
	flag.StringVar(&o.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	flag.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address")
	flag.DurationVar(&o.delay, "app-delay", time.Millisecond, "time the demo app takes per request")
	flag.StringVar(&o.broker, "broker", "auto", "rabbitmq (at -amqp), kafka (in-process), redis (a list at -redis), or auto: rabbitmq if it answers, else in-process Kafka and Redis")
	flag.StringVar(&o.seenset, "seenset", "auto", "redis (at -redis), embedded (in-process), or auto: redis if it answers, else in-process")
	flag.BoolVar(&o.webhook, "webhook", false, "send signed webhooks (standard-webhooks) to the proxies' webhook source, enqueued to RabbitMQ and consumed back by their rabbitmq source")
	flag.Parse()

	if _, err := os.Stat(o.proxy); err != nil {
		return fmt.Errorf("proxy binary %s not found: run make build (make demo does it)", o.proxy)
	}
	if o.webhook {
		return runWebhook(o)
	}
	c, err := choose(o.broker, o.seenset,
		fallback{what: "RabbitMQ at " + amqpHost(o.amqpURL), probe: func() error { return probeTCP(amqpHost(o.amqpURL)) }},
		fallback{what: "Redis at " + o.redis, probe: func() error { return probeRedis(o.redis) }})
	if err != nil {
		return err
	}
	if c.note != "" {
		fmt.Println(c.note)
	}
	ctx := context.Background()
	id := randHex(4)

	var store *seenStore
	switch c.seenset {
	case seensetRedis:
		store, err = openRedis(ctx, o.redis, "dedupe-demo:"+id+":")
	default:
		store, err = openEmbeddedRedis("dedupe-demo:" + id + ":")
	}
	if err != nil {
		return err
	}
	defer store.close()

	var br demoBroker
	switch c.broker {
	case brokerRabbitMQ:
		br, err = openRabbit(o.amqpURL, "dedupe-demo-"+id)
	case brokerRedis:
		br, err = openRedisBroker(o.redis, "dedupe-demo-"+id)
	default:
		br, err = openKafka("dedupe-demo-"+id, o.replicas)
	}
	if err != nil {
		return err
	}
	defer br.close()

	app, appAddr, stopApp, err := startApp(o.delay)
	if err != nil {
		return err
	}
	defer stopApp()

	dir, err := os.MkdirTemp("", "dedupe-demo-")
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf(`consumer: demo
log: {level: warn, format: text}
app:
  url: http://%s
seenset:
  ttl: 1h
  redis:
    addrs: ["%s"]
    prefix: "%s"
delivery:
  busy_delay: 100ms
sources:
  - name: orders
    path: /orders
%s`, appAddr, store.addr, store.prefix, br.source())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}

	fmt.Printf("dedupe-proxy demo\n  broker: %s\n  seen-set: %s, prefix %s\n  app %s, %d proxy replicas\n  logs and config in %s (kept only if the demo fails)\n",
		br.describe(), store.describe, store.prefix, appAddr, o.replicas, dir)
	var proxies fleet
	defer func() { proxies.stop() }()
	for i := range o.replicas {
		p, err := startReplica(o.proxy, cfgPath, dir, i)
		if err != nil {
			return err
		}
		proxies = append(proxies, p)
	}
	if err := proxies.waitReady(30 * time.Second); err != nil {
		return err
	}

	plan := makePlan(o.messages, o.dupRatio)
	fmt.Printf("  publishing %d envelopes: %d unique keys, %d duplicates (%d concurrent with the original, %d right after, %d after it was processed)\n",
		o.messages, plan.unique, o.messages-plan.unique, len(plan.concurrent), plan.soon, len(plan.later))

	start := time.Now()
	settled := proxies.settled
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs <- br.publish(plan.main) }()
	go func() { defer wg.Done(); errs <- br.publish(plan.concurrent) }()
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
	}
	wave1 := float64(len(plan.main) + len(plan.concurrent))
	if err := waitFor(settled, wave1, 120*time.Second); err != nil {
		return err
	}
	if err := br.publish(plan.later); err != nil {
		return err
	}
	if err := waitFor(settled, float64(o.messages), 120*time.Second); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fwd, dup, dead := settled()
	if err := proxies.stopClean(); err != nil {
		return err
	}
	st := app.Stats()

	fmt.Printf("\n  %-28s %s\n", "broker", br.describe())
	fmt.Printf("  %-28s %s\n", "seen-set", store.describe)
	fmt.Printf("  %-28s %8d\n", "published", o.messages)
	fmt.Printf("  %-28s %8d\n", "unique keys", plan.unique)
	fmt.Printf("  %-28s %8.0f\n", "forwarded to the app", fwd)
	fmt.Printf("  %-28s %8.0f\n", "skipped as duplicates", dup)
	fmt.Printf("  %-28s %8.0f\n", "dead-lettered", dead)
	fmt.Printf("  %-28s %8d\n", "app effects", st.Requests)
	fmt.Printf("  %-28s %8d\n", "duplicate effects", st.DuplicateEffects)
	fmt.Printf("  %-28s %8.1f\n", "seconds", secs)
	fmt.Printf("  %-28s %8.0f\n", "messages/s", float64(o.messages)/secs)
	if st.DuplicateEffects != 0 || st.Keys != plan.unique || st.Requests != plan.unique {
		return fmt.Errorf("FAIL: want %d effects on %d keys and 0 duplicate effects", plan.unique, plan.unique)
	}
	fmt.Println("\n  OK: every key effected exactly once; the proxies shut down cleanly (exit 0).")
	_ = os.RemoveAll(dir)
	return nil
}

// plan is the publish schedule. Every message carries its key in meta.id.
type plan struct {
	unique     int
	main       [][]byte // originals, with "soon" duplicates shortly after their original
	concurrent [][]byte // duplicates published by a second publisher at the same time
	later      [][]byte // duplicates published after wave one was processed
	soon       int
}

func makePlan(n int, ratio float64) plan {
	dups := int(float64(n) * ratio)
	p := plan{unique: n - dups}
	keys := make([]string, p.unique)
	run := randHex(3)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%s-%05d", run, i)
	}
	nConc, nLater := dups/3, dups/3
	p.soon = dups - nConc - nLater
	soonAfter := map[int]int{}
	for range p.soon {
		soonAfter[mrand.IntN(p.unique)]++
	}
	for i, k := range keys {
		p.main = append(p.main, envelope(k, i))
		for range soonAfter[i] {
			p.main = append(p.main, envelope(k, i))
		}
	}
	// Same order as main, so both publishers hit each key at about the
	// same moment.
	step := max(p.unique/max(nConc, 1), 1)
	for i := 0; len(p.concurrent) < nConc; i = (i + step) % p.unique {
		p.concurrent = append(p.concurrent, envelope(keys[i], i))
	}
	for range nLater {
		i := mrand.IntN(p.unique)
		p.later = append(p.later, envelope(keys[i], i))
	}
	return p
}

func envelope(key string, n int) []byte {
	b, _ := json.Marshal(map[string]any{
		"job":      "urn:babel:orders:created",
		"trace_id": randHex(8),
		"data":     map[string]any{"order_id": n, "amount_cents": 1000 + n},
		"meta":     map[string]any{"id": key, "schema_version": 1, "lang": "go", "created_at": time.Now().UnixMilli()},
		"attempts": 0,
	})
	return b
}

func waitFor(settled func() (float64, float64, float64), want float64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := time.Time{}
	for {
		f, d, x := settled()
		if f+d+x >= want {
			fmt.Printf("  … %4.0f/%.0f settled (forwarded %.0f, duplicates skipped %.0f)\n", f+d+x, want, f, d)
			return nil
		}
		if time.Since(last) > time.Second {
			fmt.Printf("  … %4.0f/%.0f settled (forwarded %.0f, duplicates skipped %.0f)\n", f+d+x, want, f, d)
			last = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %.0f of %.0f messages settled after %s", f+d+x, want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replica is one proxy process.
type replica struct {
	n       int
	cmd     *exec.Cmd
	admin   string
	logPath string
	done    chan struct{}
	exitErr error
	once    sync.Once
}

func startReplica(bin, cfg, dir string, n int, env ...string) (*replica, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	admin := l.Addr().String()
	l.Close()
	logPath := filepath.Join(dir, fmt.Sprintf("proxy-%d.log", n))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--config", cfg)
	cmd.Env = append(append(os.Environ(), "DEDUPE_PROXY_ADMIN_LISTEN="+admin), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	r := &replica{n: n, cmd: cmd, admin: admin, logPath: logPath, done: make(chan struct{})}
	go func() { r.exitErr = cmd.Wait(); logf.Close(); close(r.done) }()
	return r, nil
}

func (r *replica) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			out, _ := os.ReadFile(r.logPath)
			return fmt.Errorf("proxy %d exited: %v\n%s", r.n, r.exitErr, out)
		default:
		}
		resp, err := http.Get("http://" + r.admin + "/readyz?deps=1")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("proxy %d not ready after %s (log: %s)", r.n, timeout, r.logPath)
}

// results scrapes dedupe_proxy_messages_total from the replica's /metrics.
func (r *replica) results() (fwd, dup, dead float64) {
	return proxymetrics.Results(http.DefaultClient, r.admin)
}

func (r *replica) stop() {
	r.once.Do(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(40 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.done
			r.exitErr = errors.New("did not stop within 40s of SIGTERM")
		}
	})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redactURL hides the password of a URL. Replacing the password's text
// would hit the user name first when both are the same (guest:guest).
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}
