package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// appMode is how the app behaves in a stretch of the run.
type appMode int32

const (
	appNormal  appMode = iota
	appFailing         // answers 500 to a share of requests
	appSlow            // a share of requests outlasts app.timeout
	appDown            // its health URL fails
)

func (m appMode) String() string {
	return [...]string{"normal", "answers 500 to 40%", "slow: 25% take 1.5s", "health check failing"}[m]
}

// slowDelay outlasts the app.timeout of the run's config (1s), so these
// requests count as slow without being abandoned.
const slowDelay = 1500 * time.Millisecond

// testApp is the app behind the proxy: it answers 204 after a few
// milliseconds, as an app writing to a database would, unless its mode
// says otherwise.
type testApp struct {
	mode                       atomic.Int32
	requests, failed, slow, ok atomic.Int64
	srv                        *http.Server
	addr                       string
}

func startTestApp() (*testApp, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("app listener: %w", err)
	}
	a := &testApp{addr: ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if appMode(a.mode.Load()) == appDown {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a.requests.Add(1)
		mode := appMode(a.mode.Load())
		switch {
		case mode == appFailing && mrand.IntN(100) < 40:
			a.failed.Add(1)
			http.Error(w, "upstream error", http.StatusInternalServerError)
			return
		case mode == appSlow && mrand.IntN(100) < 25:
			a.slow.Add(1)
			time.Sleep(slowDelay)
		default:
			// 2-20 ms, most near the low end.
			time.Sleep(2*time.Millisecond + time.Duration(mrand.ExpFloat64()*float64(4*time.Millisecond))%(18*time.Millisecond))
		}
		a.ok.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *testApp) close() { _ = a.srv.Close() }

// recent keeps the last bodies published, from which duplicates are
// drawn: a producer's retry or a redelivery sends the same bytes again.
type recent struct {
	mu     sync.Mutex
	ids    []string
	bodies [][]byte
}

func (r *recent) add(id string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
	r.bodies = append(r.bodies, body)
	if len(r.ids) > 300 {
		r.ids, r.bodies = r.ids[100:], r.bodies[100:]
	}
}

func (r *recent) pick() (string, []byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ids) == 0 {
		return "", nil, false
	}
	i := mrand.IntN(len(r.ids))
	return r.ids[i], r.bodies[i], true
}

func envelope(job, id string, n int, amount int) []byte {
	b, _ := json.Marshal(map[string]any{
		"job":      job,
		"trace_id": randHex(8),
		"data":     map[string]any{"n": n, "amount_cents": amount},
		"meta":     map[string]any{"id": id, "schema_version": 1, "lang": "go", "created_at": time.Now().UnixMilli()},
		"attempts": 0,
	})
	return b
}

// counts is what the traffic sent, for the progress lines and summary.
type counts struct {
	published, duplicates, reused atomic.Int64
	listPushed, listDuplicates    atomic.Int64
	hooksSent, hookRedeliveries   atomic.Int64
	hooksBadSig, hooksUnsigned    atomic.Int64
	hookNon2xx                    atomic.Int64
}

// every runs f at rate per second until ctx ends.
func every(ctx context.Context, perSecond float64, f func() error) error {
	t := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := f(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}

// publishRabbit publishes envelopes to the orders queue: 15% are a
// recent body again, and every 600th (one in 20 s) reuses a recent id with another
// amount (a producer bug the key-reuse panel shows).
func publishRabbit(ctx context.Context, conn *amqp.Connection, queue string, c *counts) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq channel: %w", err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("rabbitmq confirm mode: %w", err)
	}
	var sent recent
	n := 0
	return every(ctx, 30, func() error {
		n++
		var id string
		var body []byte
		switch {
		case n%600 == 0:
			var ok bool
			if id, _, ok = sent.pick(); !ok {
				return nil
			}
			body = envelope("urn:babel:orders:created", id, n, 999999)
			c.reused.Add(1)
		case mrand.IntN(100) < 15:
			var ok bool
			if id, body, ok = sent.pick(); !ok {
				return nil
			}
			c.duplicates.Add(1)
		default:
			id = "ord_" + randHex(6)
			body = envelope("urn:babel:orders:created", id, n, 1000+n)
			sent.add(id, body)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: id, Body: body,
		})
		if err != nil {
			return fmt.Errorf("publish to RabbitMQ queue %s: %w", queue, err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish to RabbitMQ queue %s not confirmed: %v", queue, err)
		}
		c.published.Add(1)
		return nil
	})
}

// pushList RPUSHes envelopes to the payments list (BabelQueue's Redis
// binding), 10% of them a recent body again.
func pushList(ctx context.Context, rdb *redis.Client, queue string, c *counts) error {
	var sent recent
	n := 0
	return every(ctx, 15, func() error {
		n++
		body := []byte(nil)
		if mrand.IntN(100) < 10 {
			if _, b, ok := sent.pick(); ok {
				body = b
				c.listDuplicates.Add(1)
			}
		}
		if body == nil {
			id := "pay_" + randHex(6)
			body = envelope("urn:babel:payments:captured", id, n, 500+n)
			sent.add(id, body)
		}
		if err := rdb.RPush(ctx, queue, body).Err(); err != nil {
			return fmt.Errorf("RPUSH to Redis list %s: %w", queue, err)
		}
		c.listPushed.Add(1)
		return nil
	})
}

// sendWebhooks plays a Standard Webhooks sender: signed events, 20% of
// them redelivered, every 25th request signed with a wrong secret and
// every 60th without a signature.
func sendWebhooks(ctx context.Context, url string, secret []byte, c *counts) error {
	client := &http.Client{Timeout: 10 * time.Second}
	var sent recent
	n := 0
	return every(ctx, 5, func() error {
		n++
		key := secret
		signed := true
		var id string
		var body []byte
		switch {
		case n%60 == 0:
			signed = false
			c.hooksUnsigned.Add(1)
		case n%25 == 0:
			key = []byte("not-the-secret")
			c.hooksBadSig.Add(1)
		case mrand.IntN(100) < 20:
			var ok bool
			if id, body, ok = sent.pick(); ok {
				c.hookRedeliveries.Add(1)
			}
		}
		if body == nil {
			id = "msg_" + randHex(8)
			body = envelope("urn:babel:shipping:updated", id, n, 0)
			sent.add(id, body)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if signed {
			ts := strconv.FormatInt(time.Now().Unix(), 10)
			m := hmac.New(sha256.New, key)
			m.Write([]byte(id + "." + ts + "."))
			m.Write(body)
			req.Header.Set("webhook-id", id)
			req.Header.Set("webhook-timestamp", ts)
			req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("webhook request to %s: %w", url, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.hooksSent.Add(1)
		if resp.StatusCode/100 != 2 {
			c.hookNon2xx.Add(1)
		}
		return nil
	})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
