package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mrand "math/rand/v2"
)

// runWebhook is make demo-webhook: a sender delivers signed events
// (Standard Webhooks) to the replicas' webhook listeners, round robin as
// a load balancer would, with redeliveries — some at the same moment as
// the original, some right after its 2xx, some after everything was
// processed — and retries every non-2xx as senders do. The replicas
// enqueue each event to RabbitMQ and consume it back through their
// rabbitmq source to the demo app, which counts effects.
func runWebhook(o options) error {
	c, err := choose(brokerRabbitMQ, o.seenset,
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
	if c.seenset == seensetRedis {
		store, err = openRedis(ctx, o.redis, "dedupe-demo:"+id+":")
	} else {
		store, err = openEmbeddedRedis("dedupe-demo:" + id + ":")
	}
	if err != nil {
		return err
	}
	defer store.close()
	br, err := openRabbit(o.amqpURL, "dedupe-demo-webhook-"+id)
	if err != nil {
		return err
	}
	defer br.close()

	app, appAddr, stopApp, err := startApp(o.delay)
	if err != nil {
		return err
	}
	defer stopApp()

	dir, err := os.MkdirTemp("", "dedupe-demo-webhook-")
	if err != nil {
		return err
	}
	secret := make([]byte, 24)
	_, _ = rand.Read(secret)
	cfgPath := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf(`consumer: demo
log: {level: warn, format: text}
app:
  url: http://%s
seenset:
  # Standard Webhooks senders retry for about 76 hours.
  ttl: 80h
  redis:
    addrs: ["%s"]
    prefix: "%s"
delivery:
  busy_delay: 100ms
sources:
  - name: orders
    path: /orders
%s  - name: hooks
    type: webhook
    webhook:
      profile: standard-webhooks
      secrets: ["env:DEMO_WEBHOOK_SECRET"]
      mode: enqueue
      target:
        broker: rabbitmq
        rabbitmq:
          url: %s
          routing_key: %s
`, appAddr, store.addr, store.prefix, br.source(), br.url, br.queue)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	fmt.Printf("dedupe-proxy webhook demo\n  sender → %d proxies' webhook listeners → RabbitMQ queue %s → their rabbitmq source → app %s\n  seen-set: %s, prefix %s\n  logs and config in %s (kept only if the demo fails)\n",
		o.replicas, br.queue, appAddr, store.describe, store.prefix, dir)

	var proxies fleet
	var hooks []string
	defer func() { proxies.stop() }()
	for i := range o.replicas {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		hook := l.Addr().String()
		l.Close()
		p, err := startReplica(o.proxy, cfgPath, dir, i, "DEDUPE_PROXY_SOURCES_1_WEBHOOK_LISTEN="+hook,
			"DEMO_WEBHOOK_SECRET=whsec_"+base64.StdEncoding.EncodeToString(secret))
		if err != nil {
			return err
		}
		proxies = append(proxies, p)
		hooks = append(hooks, hook)
	}
	if err := proxies.waitReady(30 * time.Second); err != nil {
		return err
	}

	s := &sender{secret: secret, hooks: hooks, client: &http.Client{Timeout: 30 * time.Second}}
	dups := int(float64(o.messages) * o.dupRatio)
	unique := o.messages - dups
	run := randHex(3)
	events := make([]string, unique)
	for i := range events {
		events[i] = fmt.Sprintf("msg_%s_%05d", run, i)
	}
	nConc, nLater := dups/3, dups/3
	nSoon := dups - nConc - nLater
	concurrent, soon := map[int]int{}, map[int]int{}
	for range nConc {
		concurrent[mrand.IntN(unique)]++
	}
	for range nSoon {
		soon[mrand.IntN(unique)]++
	}
	fmt.Printf("  sending %d webhooks: %d events, %d redeliveries (%d concurrent with the original, %d right after its 2xx, %d after all were processed)\n",
		o.messages, unique, dups, nConc, nSoon, nLater)

	start := time.Now()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, ev := range events {
		body := envelope(ev, i)
		for range concurrent[i] {
			wg.Add(1)
			go func() { defer wg.Done(); s.deliver(ev, body) }()
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.deliver(ev, body)
			for range soon[i] {
				s.deliver(ev, body)
			}
		}()
	}
	wg.Wait()
	if err := s.failed(); err != nil {
		return err
	}
	settled := proxies.settled
	enqueued := func() float64 {
		var n float64
		for _, p := range proxies {
			n += p.metric("dedupe_proxy_webhook_accepted_total{", `how="enqueued"`)
		}
		return n
	}
	if err := waitFor(settled, enqueued(), 120*time.Second); err != nil {
		return err
	}
	for range nLater {
		i := mrand.IntN(unique)
		s.deliver(events[i], envelope(events[i], i))
	}
	if err := s.failed(); err != nil {
		return err
	}
	if err := waitFor(settled, enqueued(), 120*time.Second); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fwd, dup, dead := settled()
	var whDup, stored float64
	for _, p := range proxies {
		whDup += p.metric("dedupe_proxy_webhook_duplicates_total{", "")
	}
	stored = enqueued()
	if err := proxies.stopClean(); err != nil {
		return err
	}
	st := app.Stats()
	fmt.Printf("\n  %-32s %8d\n", "webhooks sent (2xx each)", s.ok.Load())
	fmt.Printf("  %-32s %8d\n", "events", unique)
	fmt.Printf("  %-32s %8d\n", "retried after 409 or 503", s.retried.Load())
	fmt.Printf("  %-32s %8.0f\n", "enqueued to RabbitMQ", stored)
	fmt.Printf("  %-32s %8.0f\n", "answered 2xx as duplicates", whDup)
	fmt.Printf("  %-32s %8.0f\n", "forwarded to the app", fwd)
	fmt.Printf("  %-32s %8.0f\n", "skipped as duplicates (queue)", dup)
	fmt.Printf("  %-32s %8.0f\n", "dead-lettered", dead)
	fmt.Printf("  %-32s %8d\n", "app effects", st.Requests)
	fmt.Printf("  %-32s %8.1f\n", "seconds", secs)
	fmt.Printf("  %-32s %8.0f\n", "webhooks/s", float64(o.messages)/secs)
	if st.DuplicateEffects != 0 || st.Keys != unique || st.Requests != unique || s.ok.Load() != int64(o.messages) {
		return fmt.Errorf("FAIL: want %d effects on %d events, a 2xx for each of %d webhooks; duplicate effects %d", unique, unique, o.messages, st.DuplicateEffects)
	}
	fmt.Println("\n  OK: every webhook answered 2xx, every event effected once; the proxies shut down cleanly (exit 0).")
	fmt.Printf("  duplicate effects %d\n", st.DuplicateEffects)
	_ = os.RemoveAll(dir)
	return nil
}

// sender plays a webhook sender: it signs each delivery and retries it
// until a 2xx, as Standard Webhooks senders do (here without the wait).
type sender struct {
	secret  []byte
	hooks   []string
	client  *http.Client
	next    atomic.Uint64
	ok      atomic.Int64
	retried atomic.Int64
	mu      sync.Mutex
	err     error
}

func (s *sender) deliver(id string, body []byte) {
	for attempt := range 200 {
		hook := s.hooks[s.next.Add(1)%uint64(len(s.hooks))]
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		m := hmac.New(sha256.New, s.secret)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		req, _ := http.NewRequest(http.MethodPost, "http://"+hook+"/webhook", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
		resp, err := s.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				s.ok.Add(1)
				return
			}
			if resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusServiceUnavailable {
				s.fail(fmt.Errorf("webhook %s answered %d", id, resp.StatusCode))
				return
			}
		}
		if attempt > 0 || err == nil {
			s.retried.Add(1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.fail(fmt.Errorf("webhook %s never answered 2xx", id))
}

func (s *sender) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func (s *sender) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// metric sums the series of one metric family (prefix up to "{") whose
// line contains match, from the replica's /metrics.
func (r *replica) metric(prefix, match string) float64 {
	resp, err := http.Get("http://" + r.admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, match) {
			continue
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		n += v
	}
	return n
}
