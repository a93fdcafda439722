package main

// The webhook rows: what it costs a webhook sender to be answered by
// dedupe-proxy's webhook source (enqueue mode, RabbitMQ) instead of a
// hand-written handler that verifies and publishes.
//
//	(w1) bare handler   net/http, verifies the Standard Webhooks signature,
//	                    publishes to the queue with publisher confirms
//	                    (persistent, message_id = webhook-id), answers 204
//	                    once confirmed: a hidden sub-command of this binary
//	                    (bench bare-webhook), one channel like the proxy
//	(w2) dedupe-proxy   the real binary, a webhook source with profile
//	                    standard-webhooks, mode enqueue, target RabbitMQ;
//	                    claims and commits each event key in the private
//	                    Redis
//
// Each row first takes a burst of -webhook-n requests from
// -webhook-senders concurrent senders, as fast as they are answered
// (requests/s, and the latency to the 2xx under that load), then a fixed
// rate of half the bare handler's requests/s (the same rate for both rows)
// for -paced: the latency to the 2xx "at half load". Every request is a
// new event, signed ahead of time, so signing costs neither row. At the
// end the queue must hold exactly one message per 2xx.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	cmdBareWebhook = "bare-webhook"
	// webhookSecretEnv carries the signing secret to both handlers.
	webhookSecretEnv = "BENCH_WEBHOOK_SECRET"
	// Targets: the proxy answers at least this share of the bare
	// handler's requests/s, and its p99 at half load stays under this.
	targetWebhookRatio = 0.90
	targetWebhookP99   = 25 * time.Millisecond
)

// webhookSection is the webhook rows and the half-load rate they shared.
type webhookSection struct {
	rows     []*whRow
	halfRate int
	missing  string
}

type whRow struct {
	name       string
	proxy      bool
	err        error
	sent       int64 // requests answered 2xx, burst and paced
	failed     int64 // requests answered otherwise (or not at all)
	rps        float64
	burstP50   time.Duration
	burstP99   time.Duration
	halfP50    time.Duration
	halfP99    time.Duration
	halfN      int
	cpuPer100k float64 // the handler process, during the burst
	redisCmds  float64 // per request, during the burst
	stored     int     // messages in the queue at the end
}

// measureWebhook runs the two webhook rows against RabbitMQ.
func (b *bench) measureWebhook(ctx context.Context) *webhookSection {
	s := &webhookSection{}
	if b.rabbit == nil {
		s.missing = "not measured: needs RabbitMQ (-brokers rabbitmq)"
		return s
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("bench-"+b.runID+"-signing-key-32b"))
	bare := b.webhookRow(ctx, false, secret, b.o.whRate)
	s.rows = append(s.rows, bare)
	s.halfRate = b.o.whRate
	if s.halfRate == 0 && bare.rps > 0 {
		s.halfRate = max(int(bare.rps/2), 1)
	}
	if ctx.Err() == nil {
		s.rows = append(s.rows, b.webhookRow(ctx, true, secret, s.halfRate))
	}
	return s
}

// webhookRow measures one handler. halfRate 0: take half of this row's
// own requests/s (the bare row, which sets the rate for both).
func (b *bench) webhookRow(ctx context.Context, proxy bool, secret string, halfRate int) *whRow {
	r := &whRow{name: "(w1) bare handler (verify + publish, confirms)", proxy: proxy}
	letter := "w1"
	if proxy {
		r.name, letter = "(w2) dedupe-proxy webhook source, enqueue", "w2"
	}
	id := fmt.Sprintf("bench-%s-webhook-%s", b.runID, letter)
	d, err := b.rabbit.newDest(ctx, id)
	if err != nil {
		r.err = fmt.Errorf("declare queue: %w", err)
		return r
	}
	defer d.cleanup()
	queue := d.(*rabbitDest).queue

	hookAddr, err := freeAddr()
	if err != nil {
		r.err = err
		return r
	}
	env := []string{webhookSecretEnv + "=" + secret}
	logPath := filepath.Join(b.dir, id+".log")
	var c *child
	if proxy {
		// Not :=, which would declare an err of this block and leave a
		// failed startChild below unseen (and c nil).
		var admin string
		admin, err = freeAddr()
		if err != nil {
			r.err = err
			return r
		}
		cfg := fmt.Sprintf(`consumer: bench
shutdown_timeout: 10s
log: {level: warn, format: json}
admin: {listen: "%s"}
app: {url: "%s"}
seenset:
  backend: redis
  ttl: 1h
  redis:
    addrs: ["%s"]
    prefix: "%s:"
sources:
  - name: hooks
    type: webhook
    webhook:
      listen: "%s"
      path: /hook
      profile: standard-webhooks
      secrets: ["env:%s"]
      mode: enqueue
      max_concurrent: 256
      target:
        broker: rabbitmq
        rabbitmq: {url: "%s", exchange: "", routing_key: "%s"}
`, admin, b.app.url, b.redis.addr, id, hookAddr, webhookSecretEnv, b.o.amqpURL, queue)
		cfgPath := filepath.Join(b.dir, id+".yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			r.err = err
			return r
		}
		c, err = startChild(ctx, b.o.proxy, []string{"run", "--config", cfgPath}, env, admin, logPath, true)
	} else {
		self, err2 := os.Executable()
		if err2 != nil {
			r.err = err2
			return r
		}
		c, err = startChild(ctx, self, []string{cmdBareWebhook, "-listen", hookAddr, "-amqp", b.o.amqpURL, "-queue", queue}, env, hookAddr, logPath, false)
	}
	if err != nil {
		r.err = err
		return r
	}
	// The stop below reports the child's exit; this one covers the
	// early returns.
	defer func() { _ = c.stop() }()

	senders := b.o.whSenders
	// An idle pool as large as the handler's concurrency: at a fixed
	// rate a slow moment piles requests up, and a smaller pool would
	// close and redial connections then, measuring TCP setup instead of
	// the handler.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: nil, MaxIdleConns: 512, MaxIdleConnsPerHost: 512, DisableCompression: true,
	}}
	defer hc.CloseIdleConnections()
	url := "http://" + hookAddr + "/hook"
	sign := newSigner(secret)
	seq := 0
	next := func(n int) []*signedHook {
		hs := make([]*signedHook, n)
		for i := range hs {
			hs[i] = sign.hook(fmt.Sprintf("%s-%d", id, seq), b.body(0, id))
			seq++
		}
		return hs
	}

	// Ready once a request is answered 2xx; it and a short warm-up fill
	// the connection pools.
	deadline := time.Now().Add(b.o.timeout)
	for {
		if err := c.exited(); err != nil {
			r.err = err
			return r
		}
		if _, status := send(ctx, hc, url, next(1)[0]); is2xx(status) {
			r.sent++
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			r.err = fmt.Errorf("the webhook handler never answered 2xx (log: %s)", c.logPath)
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	warm := burst(ctx, hc, url, next(4*senders), senders)
	r.sent += warm.ok
	r.failed += warm.failed

	// The burst.
	hooks := next(b.o.whN)
	redis0, err := b.redis.snapshot(ctx)
	if err != nil {
		r.err = err
		return r
	}
	cpu0, err := cpuTime(c.pid)
	if err != nil {
		r.err = err
		return r
	}
	res := burst(ctx, hc, url, hooks, senders)
	cpu1, err := cpuTime(c.pid)
	if err != nil {
		r.err = err
		return r
	}
	redis1, err := b.redis.snapshot(ctx)
	if err != nil {
		r.err = err
		return r
	}
	r.sent += res.ok
	r.failed += res.failed
	if res.ok > 0 && res.took > 0 {
		r.rps = float64(res.ok) / res.took.Seconds()
		r.cpuPer100k = (cpu1 - cpu0).Seconds() / float64(res.ok) * 1e5
		r.burstP50, r.burstP99 = percentile(res.lat, 0.50), percentile(res.lat, 0.99)
		if proxy {
			r.redisCmds = float64(redis1.sub(redis0).cmds) / float64(res.ok)
		}
	}
	if res.failed > 0 {
		r.err = fmt.Errorf("%d of %d burst requests were not answered 2xx (by status, 0 = no answer: %v; log: %s)", res.failed, len(hooks), res.statuses, c.logPath)
	}

	// Half load, at a fixed rate.
	if halfRate == 0 && r.rps > 0 {
		halfRate = max(int(r.rps/2), 1)
	}
	if halfRate > 0 && ctx.Err() == nil {
		total := max(int(float64(halfRate)*b.o.paced.Seconds()), 1)
		pr := paced(ctx, hc, url, next(total), halfRate)
		r.sent += pr.ok
		r.failed += pr.failed
		r.halfN = len(pr.lat)
		r.halfP50, r.halfP99 = percentile(pr.lat, 0.50), percentile(pr.lat, 0.99)
		if pr.failed > 0 && r.err == nil {
			r.err = fmt.Errorf("%d of %d requests at half load were not answered 2xx (by status, 0 = no answer: %v; log: %s)", pr.failed, total, pr.statuses, c.logPath)
		}
	}

	// Every 2xx is a message in the queue, and nothing else is.
	for end := time.Now().Add(3 * time.Second); ; {
		r.stored, err = b.rabbit.queueDepth(queue)
		if err != nil || int64(r.stored) == r.sent || time.Now().After(end) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil && r.err == nil {
		r.err = err
	}
	if err := c.stop(); err != nil && r.err == nil {
		r.err = err
	}
	return r
}

// queueDepth is the number of ready messages in queue.
func (r *rabbitBroker) queueDepth(queue string) (int, error) {
	ch, err := r.conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

// signedHook is one request, signed ahead of time.
type signedHook struct {
	id, ts, sig string
	body        []byte
}

type signer struct {
	key []byte
}

func newSigner(secret string) *signer {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	return &signer{key: key}
}

// hook signs body the Standard Webhooks way: v1, base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>".
func (s *signer) hook(id string, body []byte) *signedHook {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return &signedHook{id: id, ts: ts, sig: "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)), body: body}
}

// send POSTs one hook and reports the time to its answer and its status
// (0: no answer).
func send(ctx context.Context, hc *http.Client, url string, h *signedHook) (time.Duration, int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(h.body))
	if err != nil {
		return 0, 0
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Webhook-Id"] = []string{h.id}
	req.Header["Webhook-Timestamp"] = []string{h.ts}
	req.Header["Webhook-Signature"] = []string{h.sig}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), resp.StatusCode
}

func is2xx(status int) bool { return status >= 200 && status <= 299 }

type loadResult struct {
	ok, failed int64
	took       time.Duration
	lat        []time.Duration
	statuses   map[int]int // of the failed ones; 0: no answer
}

func (l *loadResult) add(d time.Duration, status int) {
	if is2xx(status) {
		l.ok++
		l.lat = append(l.lat, d)
		return
	}
	l.failed++
	if l.statuses == nil {
		l.statuses = map[int]int{}
	}
	l.statuses[status]++
}

// burst sends hooks from senders concurrent senders, each sending its
// next as soon as the last was answered.
func burst(ctx context.Context, hc *http.Client, url string, hooks []*signedHook, senders int) loadResult {
	res := loadResult{lat: make([]time.Duration, 0, len(hooks))}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for range senders {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(hooks)) {
					return
				}
				d, status := send(ctx, hc, url, hooks[i])
				mu.Lock()
				res.add(d, status)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	return res
}

// paced sends hooks at rate per second, each on its own goroutine, so a
// slow answer delays no other request.
func paced(ctx context.Context, hc *http.Client, url string, hooks []*signedHook, rate int) loadResult {
	var res loadResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i, h := range hooks {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			d, status := send(ctx, hc, url, h)
			mu.Lock()
			defer mu.Unlock()
			res.add(d, status)
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	return res
}

func (s *webhookSection) failed() bool {
	for _, r := range s.rows {
		if r.err != nil && r.rps == 0 {
			return true
		}
	}
	return false
}

func (s *webhookSection) print(w io.Writer, o options) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Webhooks, enqueue mode to RabbitMQ (Standard Webhooks signatures, %d-byte bodies, every request a new event):\n", o.bodyBytes)
	if s.missing != "" {
		fmt.Fprintln(w, "  "+s.missing)
		return
	}
	const head = "%-50s %9s %9s %9s %9s %9s %8s %10s\n"
	fmt.Fprintf(w, head, "", "req/s", "burst", "burst", "half-load", "half-load", "Redis", "CPU s per")
	fmt.Fprintf(w, head, "", "", "p50", "p99", "p50", "p99", "cmd/req", "100k req")
	for _, r := range s.rows {
		if r.rps == 0 {
			fmt.Fprintf(w, "  %-48s error: %v\n", r.name, r.err)
			continue
		}
		cmds := "-"
		if r.proxy {
			cmds = fmt.Sprintf("%.2f", r.redisCmds)
		}
		fmt.Fprintf(w, "  %-48s %9s %9s %9s %9s %9s %8s %10.2f\n", r.name, thousands(r.rps), ms(r.burstP50), ms(r.burstP99),
			ms(r.halfP50), ms(r.halfP99), cmds, r.cpuPer100k)
		if r.err != nil {
			fmt.Fprintf(w, "      error after measuring: %v\n", r.err)
		}
	}
	fmt.Fprintf(w, "  req/s: a burst of %d requests from %d concurrent senders; latency: request sent → 2xx read.\n", o.whN, o.whSenders)
	if o.whRate > 0 {
		fmt.Fprintf(w, "  fixed rate: %d req/s (-webhook-rate, the same for both rows) for %s; the half-load columns are at this rate.\n", s.halfRate, o.paced)
	} else {
		fmt.Fprintf(w, "  half load: %d req/s (half the bare handler's req/s, the same for both rows) for %s.\n", s.halfRate, o.paced)
	}
	fmt.Fprintln(w, "  CPU: the handler process only, during the burst (the senders run in this process).")
	if len(s.rows) < 2 {
		return
	}
	bare, px := s.rows[0], s.rows[1]
	fmt.Fprintln(w, "Webhooks — the project's targets (a report, not a gate):")
	line := func(what, value, target string, ok bool) {
		mark := "MISS"
		if ok {
			mark = "ok"
		}
		fmt.Fprintf(w, "  %-56s %10s   %-14s %s\n", what, value, target, mark)
	}
	if bare.rps > 0 && px.rps > 0 {
		v := px.rps / bare.rps
		line("(w2)/(w1) requests/s, proxy vs bare handler", fmt.Sprintf("%.2f", v), fmt.Sprintf("≥ %.2f", targetWebhookRatio), v >= targetWebhookRatio)
	}
	if px.halfN > 0 {
		line(fmt.Sprintf("(w2) p99 to the 2xx at half load (%d req/s)", s.halfRate), ms(px.halfP99), "< "+ms(targetWebhookP99), px.halfP99 < targetWebhookP99)
	}
	for _, r := range s.rows {
		if r.sent > 0 {
			line(fmt.Sprintf("(%s) messages in the queue vs 2xx answers", r.name[1:3]), strconv.Itoa(r.stored), fmt.Sprintf("= %d", r.sent), int64(r.stored) == r.sent)
		}
	}
}

// runBareWebhook is `bench bare-webhook`: the handler users would write
// by hand, until SIGTERM.
func runBareWebhook(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(cmdBareWebhook, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	amqpURL := fs.String("amqp", "", "RabbitMQ URL")
	queue := fs.String("queue", "", "queue to publish to")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(os.Getenv(webhookSecretEnv), "whsec_"))
	if err != nil || len(key) == 0 {
		fmt.Fprintf(stderr, "%s: %s must hold a whsec_ secret\n", cmdBareWebhook, webhookSecretEnv)
		return 2
	}
	conn, err := amqp.Dial(*amqpURL)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmdBareWebhook, err)
		return 1
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmdBareWebhook, err)
		return 1
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		if !verifyStandard(key, id, ts, r.Header.Get("webhook-signature"), body) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(r.Context(), "", *queue, false, false, amqp.Publishing{
			ContentType:  r.Header.Get("Content-Type"),
			DeliveryMode: amqp.Persistent,
			MessageId:    id,
			Body:         body,
		})
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if ok, err := dc.WaitContext(r.Context()); err != nil || !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmdBareWebhook, err)
		return 1
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "%s: %v\n", cmdBareWebhook, err)
		return 1
	}
	return 0
}

// verifyStandard checks a Standard Webhooks signature header (space-
// separated "v1,<base64>") over "<id>.<ts>.<body>", constant-time, and
// the timestamp against a 5-minute tolerance.
func verifyStandard(key []byte, id, ts, header string, body []byte) bool {
	if id == "" || ts == "" {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := m.Sum(nil)
	for sig := range strings.FieldsSeq(header) {
		v, ok := strings.CutPrefix(sig, "v1,")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(v)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}
