package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/claim"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/statelog"
)

// Event is one verified webhook on its way to the broker.
type Event struct {
	// Key is the event key without the consumer and key space.
	Key         string
	Body        []byte
	ContentType string
	// Headers are the request's headers the app may need (lower-case
	// names), without the signature, credentials and framing.
	Headers map[string]string
	Source  string
}

// Sink stores an event durably: Publish returns nil only once the broker
// has it (a publisher confirm, acks=all).
type Sink interface {
	Publish(ctx context.Context, e Event) error
	// Ready is nil while the sink can publish.
	Ready() error
	Close() error
}

// Forwarder sends one request to the app; *forward.Client implements it.
type Forwarder interface {
	Do(ctx context.Context, r forward.Request) forward.Result
}

// Options configure a Handler.
type Options struct {
	Name string
	// Prefix namespaces stored keys: "<consumer>:<KeySpaceSegment(key
	// space)>:", apart from every broker source's.
	Prefix   string
	Profile  string
	Verifier *Verifier
	// Keys are the source's key rules; they take the event key when
	// KeyFromRules is set and for the profiles without an event id
	// (generic-hmac, none). Nil: the default rule.
	Keys         *keys.Extractor
	KeyFromRules bool
	// Claims is the claim protocol shared with the process's other users
	// of the seen-set (the daemon builds one). Nil: one of the handler's
	// own, from Store, Lease, TTL, CommitAttempts, OpTimeout,
	// StoreObservers and MaxRequestTime.
	Claims *claim.Protocol
	Store  seenset.Store
	// KeyReuse is the source's key_reuse (claim.KeyReuse*; "" is warn)
	// and Digest its key_reuse_fields (nil: the whole body).
	KeyReuse string
	Digest   *keys.Digester
	Lease    time.Duration
	TTL      time.Duration
	// BusyDelay is the Retry-After of a 409 (the event is being stored by
	// another request right now).
	BusyDelay time.Duration
	// Sink (enqueue mode) or Forwarder and AppPath (forward mode).
	Sink         Sink
	Forwarder    Forwarder
	AppPath      string
	MaxBodyBytes int64
	// MaxConcurrent bounds the verified requests being stored (claim,
	// publish or forward, commit) at once.
	MaxConcurrent int
	// MaxUnverified bounds the requests whose body is being read and
	// signature checked, on their own: an unauthenticated client never
	// holds a store slot. The server's read timeout bounds each one's time.
	// 0: DefaultMaxUnverified.
	MaxUnverified  int
	CommitAttempts int
	// OpTimeout bounds each store and broker operation.
	OpTimeout time.Duration
	Logger    *slog.Logger
	Metrics   *metrics.WebhookMetrics
	// StoreObservers are told of every seen-set call (the store metrics).
	StoreObservers []seenset.Observer
	// MaxRequestTime is app.max_request_time, for the handler's own
	// protocol (Claims nil): a forward cut short by a shutdown keeps its
	// claim until then from its start.
	MaxRequestTime time.Duration
}

// DefaultMaxUnverified is the pre-auth limit when none is set: a body in
// memory each, so with a 1 MiB max_body_bytes at most 512 MiB while
// reading, though a client that trickles holds little of it.
const DefaultMaxUnverified = 512

// unavailableRetryAfter is what a 503 asks the sender to wait: long
// enough for a reconnect, short against every sender's deadline.
const unavailableRetryAfter = 5 * time.Second

// Handler answers webhook requests. The order is what makes a 2xx mean
// "stored": verify, claim the key, publish (or forward), commit, answer.
// The claim is a claim.Session, as a broker message's: held and renewed
// while the app works, released when the publish or the app failed, and
// kept, never released, while a forwarded request may still be running at
// the app.
type Handler struct {
	o   Options
	log *slog.Logger
	m   *metrics.WebhookMetrics
	// unverified are the pre-auth slots (reading and verifying), slots
	// the store slots only verified requests take.
	unverified chan struct{}
	slots      chan struct{}
	claims     *claim.Protocol
	// storeState logs Redis going down and coming back once each way;
	// each request's own line about it is debug.
	storeState *statelog.Tracker
	// open are the forwards still running after their sender was
	// answered (the app was slower than app.timeout); Drain waits for
	// them, and past its bound cancels them with abort.
	open  sync.WaitGroup
	hard  context.Context
	abort context.CancelFunc
}

// NewHandler returns a Handler.
func NewHandler(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(nil).ForWebhook(o.Name)
	}
	if o.MaxConcurrent < 1 {
		o.MaxConcurrent = 1
	}
	if o.MaxUnverified < 1 {
		o.MaxUnverified = DefaultMaxUnverified
	}
	if o.CommitAttempts < 1 {
		o.CommitAttempts = 1
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	log := o.Logger.With("source", o.Name)
	h := &Handler{o: o, log: log, m: o.Metrics,
		unverified: make(chan struct{}, o.MaxUnverified), slots: make(chan struct{}, o.MaxConcurrent),
		storeState: statelog.New(log, "seen-set unreachable: webhooks are answered 503 (the sender retries) until it is back", "seen-set reachable again")}
	if h.o.MaxRequestTime <= 0 {
		h.o.MaxRequestTime = forward.DefaultMaxRequestTime
	}
	h.hard, h.abort = context.WithCancel(context.Background())
	claims := o.Claims
	if claims == nil {
		claims = claim.New(claim.Options{
			Store:          o.Store,
			Observers:      o.StoreObservers,
			Lease:          o.Lease,
			TTL:            o.TTL,
			CommitAttempts: o.CommitAttempts,
			OpTimeout:      o.OpTimeout,
			MaxRequestTime: h.o.MaxRequestTime,
		})
	}
	h.claims = claims.Observe(claim.StoreState{Tracker: h.storeState})
	return h
}

// Drain waits up to timeout for the forwards still running after their
// senders were answered, then cancels those left: their claims are kept
// until app.max_request_time from their start, so that no retry of the
// sender's reaches the app while one of them may still run.
func (h *Handler) Drain(timeout time.Duration) {
	done := make(chan struct{})
	go func() { h.open.Wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	h.abort()
	<-done
}

func (h *Handler) refuse(w http.ResponseWriter, status int, reason, msg string, retryAfter time.Duration) {
	h.m.Rejected(reason)
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
	}
	http.Error(w, msg, status)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { h.m.Duration.Observe(time.Since(start).Seconds()) }()
	h.m.Received.Inc()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, http.StatusMethodNotAllowed, metrics.WebhookBadRequest, "POST only", 0)
		return
	}
	body, ok := h.readVerified(w, r)
	if !ok {
		return
	}
	h.m.Verified.Inc()
	if h.o.Profile == ProfileSlack {
		if c, ok := SlackChallenge(body); ok {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, c)
			return
		}
	}
	// Only now, authenticated, does the request compete for a store slot:
	// a client trickling its body or sending forgeries waits in the
	// pre-auth stage, never here.
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		h.refuse(w, http.StatusServiceUnavailable, metrics.WebhookOverloaded, "too many concurrent requests", time.Second)
		return
	}
	key, why := h.key(r.Header, body)
	if key == "" {
		h.refuse(w, http.StatusBadRequest, metrics.WebhookNoKey, "no event key: "+why, 0)
		return
	}
	h.store(w, r, key, body)
}

// readVerified reads the body and checks the signature under a pre-auth
// slot of its own, released before the request goes on: the server's
// read timeout bounds how long one request holds it, MaxUnverified how
// many are held. It answers the request itself when it returns false.
func (h *Handler) readVerified(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	select {
	case h.unverified <- struct{}{}:
		defer func() { <-h.unverified }()
	default:
		h.refuse(w, http.StatusServiceUnavailable, metrics.WebhookOverloaded, "too many requests being read", time.Second)
		return nil, false
	}
	if r.ContentLength > h.o.MaxBodyBytes {
		h.refuse(w, http.StatusRequestEntityTooLarge, metrics.WebhookTooLarge, "body too large", 0)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, http.StatusRequestEntityTooLarge, metrics.WebhookTooLarge, "body too large", 0)
			return nil, false
		}
		h.refuse(w, http.StatusBadRequest, metrics.WebhookBadRequest, "body could not be read", 0)
		return nil, false
	}
	if err := h.o.Verifier.Verify(r.Header, body); err != nil {
		var rej *Rejection
		if !errors.As(err, &rej) {
			rej = &Rejection{Status: http.StatusUnauthorized, Reason: ReasonBadSignature, Msg: "not verified"}
		}
		h.log.Info("webhook refused", "reason", rej.Reason, "detail", rej.Msg, "remote", r.RemoteAddr)
		h.refuse(w, rej.Status, rej.Reason, rej.Msg, 0)
		return nil, false
	}
	return body, true
}

// key is the profile's event id, or the key rules' answer.
func (h *Handler) key(hd http.Header, body []byte) (string, string) {
	if !h.o.KeyFromRules {
		if k, why, ok := ProfileKey(h.o.Profile, hd, body); ok {
			if k != "" && len(k) <= keys.MaxKeyBytes {
				return k, ""
			}
			if why == "" {
				why = "too long"
			}
			return "", why
		}
	}
	ex := h.o.Keys
	if ex == nil {
		ex, _ = keys.Parse(nil)
	}
	return ex.Key(&broker.Message{Body: body, ContentType: hd.Get("Content-Type"), Headers: flatHeaders(hd)})
}

func (h *Handler) store(w http.ResponseWriter, r *http.Request, key string, body []byte) {
	s := h.claims.Begin(h.o.Prefix+key, h.o.Digest.Digest(body))
	// The sender hanging up must not cut a publish or commit short: the
	// work goes on and its retry then finds the key done.
	ctx := context.WithoutCancel(r.Context())
	res, _, err := s.Take(ctx, nil)
	if err == nil && res == seenset.Reused {
		if !h.keyReused(ctx, w, &s, key) {
			return
		}
		// key_reuse: forward: this body under its own key.
		s.Reuse()
		res, _, err = s.Take(ctx, nil)
	}
	switch {
	case errors.Is(err, seenset.ErrKeyUnusable):
		h.log.Error("webhook key's seen-set entry is unusable; an operator must remove it", "key", key, "err", err)
		h.refuse(w, http.StatusInternalServerError, metrics.WebhookKeyUnusable, "event key cannot be recorded", 0)
		return
	case err != nil:
		h.log.Log(context.Background(), claim.LogLevel(err), "webhook not stored: seen-set unavailable", "key", key, "err", err)
		h.refuse(w, http.StatusServiceUnavailable, metrics.WebhookStoreUnavailable, "seen-set unavailable", unavailableRetryAfter)
		return
	case res == seenset.Duplicate:
		h.m.Duplicates.Inc()
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "duplicate\n")
		return
	case res == seenset.Busy:
		h.refuse(w, http.StatusConflict, metrics.WebhookBusy, "this event is being stored by another request", max(h.o.BusyDelay, time.Second))
		return
	}

	headers := eventHeaders(r.Header, SignatureHeaders(h.o.Profile, h.o.Verifier.generic))
	meta := []forward.Header{{Name: "X-Dedupe-Source", Value: h.o.Name}, {Name: "X-Dedupe-Broker", Value: "webhook"}}
	if s.Reused() {
		headers[strings.ToLower(claim.ReusedHeader)] = "true"
		meta = append(meta, forward.Header{Name: claim.ReusedHeader, Value: "true"})
	}
	if h.o.Sink != nil {
		h.enqueue(ctx, w, &s, Event{Key: key, Body: body, ContentType: r.Header.Get("Content-Type"), Headers: headers, Source: h.o.Name})
		return
	}

	// Forward mode. The forward runs on its own goroutine so that the
	// sender can be answered when the app is slow, while the request
	// stays open at the app with the claim held: its late answer then
	// settles the claim, and the sender's retry finds the key busy until
	// then and done after a late success.
	f := &openForward{done: make(chan forward.Result, 1), slow: make(chan struct{})}
	h.open.Add(1)
	go func() {
		defer h.open.Done()
		res := h.forward(&s, key, body, r.Header.Get("Content-Type"), meta, headers, f.slowed)
		h.settle(ctx, &s, key, res)
		f.done <- res
	}()
	select {
	case res := <-f.done:
		h.answer(w, res)
	case <-f.slow:
		select {
		case res := <-f.done: // answered just as app.timeout ran out
			h.answer(w, res)
			return
		default:
		}
		h.log.Warn("the app has not answered within app.timeout; the sender is asked to retry later while the request stays open with the key held", "key", key)
		h.refuse(w, http.StatusServiceUnavailable, metrics.WebhookAppSlow, "the app is still processing this event; retry later", max(h.o.BusyDelay, unavailableRetryAfter))
	}
}

// enqueue publishes the event (enqueue mode) and commits its claim once
// the broker has it.
func (h *Handler) enqueue(ctx context.Context, w http.ResponseWriter, s *claim.Session, e Event) {
	pctx, cancel := context.WithTimeout(ctx, h.o.OpTimeout)
	err := h.o.Sink.Publish(pctx, e)
	cancel()
	if err != nil {
		// Not confirmed: the sender retries, and a copy that did land
		// is caught by the consuming source's own key.
		h.letGo(ctx, s, e.Key)
		// A target the sink knows to be down has had its outage
		// logged once by the sink; each request refused meanwhile is
		// debug.
		level := slog.LevelWarn
		if h.o.Sink.Ready() != nil {
			level = slog.LevelDebug
		}
		h.log.Log(context.Background(), level, "webhook not stored: publish not confirmed", "key", e.Key, "err", err)
		h.refuse(w, http.StatusServiceUnavailable, metrics.WebhookTargetUnavailable, "broker unavailable", unavailableRetryAfter)
		return
	}
	s.Succeeded(ctx, committed{h, e.Key})
	h.m.Enqueued.Inc()
	w.WriteHeader(http.StatusOK)
}

// keyReused answers an event whose id was stored with another body, by
// key_reuse, and reports whether it is to be stored all the same
// (forward). Under dead_letter it is refused with 422, as Stripe answers
// an idempotency key reused with other parameters: a retry cannot help,
// and nothing is stored. Under warn it is answered as a duplicate.
func (h *Handler) keyReused(ctx context.Context, w http.ResponseWriter, s *claim.Session, key string) bool {
	h.m.KeyReuse.Inc()
	attrs := []any{"key", key, "digest", s.Digest(), "stored_digest", s.StoredDigest(ctx)}
	switch h.o.KeyReuse {
	case claim.KeyReuseDeadLetter:
		h.log.Warn("event id reused with a different body: refused with 422 (key_reuse: dead_letter)", attrs...)
		h.refuse(w, http.StatusUnprocessableEntity, metrics.WebhookKeyReused, claim.ReasonKeyReused, 0)
		return false
	case claim.KeyReuseForward:
		h.log.Warn("event id reused with a different body: stored with "+claim.ReusedHeader+": true (key_reuse: forward)", attrs...)
		return true
	}
	h.log.Warn("event id reused with a different body: answered as a duplicate (key_reuse: warn)", attrs...)
	h.m.Duplicates.Inc()
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "duplicate\n")
	return false
}

// openForward is one forward's way back to its request: its result, or
// word that the app is slow.
type openForward struct {
	done chan forward.Result
	slow chan struct{}
	once sync.Once
}

func (f *openForward) slowed() { f.once.Do(func() { close(f.slow) }) }

// answer tells the sender what became of a forward that ended in time.
func (h *Handler) answer(w http.ResponseWriter, res forward.Result) {
	if res.Outcome == forward.Success {
		w.WriteHeader(http.StatusOK)
		return
	}
	status, after := http.StatusServiceUnavailable, max(res.RetryAfter, time.Second)
	if res.Outcome == forward.Permanent {
		status, after = http.StatusBadGateway, 0
	}
	h.refuse(w, status, metrics.WebhookAppFailed, "app: "+res.Reason, after)
}

// forward sends the event to the app, holding the claim (renewing its
// lease) for as long as the request is open.
func (h *Handler) forward(s *claim.Session, key string, body []byte, ct string, meta []forward.Header, headers map[string]string, slow func()) forward.Result {
	defer s.Hold(claim.LostFunc(func(error) {
		h.log.Error("lease lost while forwarding: another request claimed the event and may forward it too", "key", key)
	})).Stop()
	return h.o.Forwarder.Do(h.hard, forward.Request{
		Path:           h.o.AppPath,
		Body:           body,
		ContentType:    ct,
		IdempotencyKey: key,
		Attempt:        1, // one forward per request: a sender's retry is a delivery of its own
		Meta:           meta,
		MessageHeaders: headers,
		OnSlow:         slow,
	})
}

// settle does to the claim what the forward's result asks
// (claim.Session.Forwarded), as the pipeline does for a broker message.
func (h *Handler) settle(ctx context.Context, s *claim.Session, key string, res forward.Result) {
	switch act, err := s.Forwarded(ctx, res, h.hard.Err() != nil, committed{h, key}); act {
	case claim.Commit:
		h.m.Forwarded.Inc()
		if res.Slow {
			h.log.Info("late answer from the app: the event is done", "key", key, "status", res.Status, "took", res.Duration)
		}
	case claim.Keep:
		if res.Abandoned {
			h.log.Error("no answer from the app within app.max_request_time; giving up on the request while the app may still be working on it, so a retried event may now overlap it", "key", key)
		}
		h.log.Info("no answer from the app; the event's key stays claimed for a lease so it is not sent again while the request may still run", "key", key, "reason", res.Reason)
	default:
		h.releaseFailed(key, err)
		h.log.Warn("webhook not processed: the app did not succeed", "key", key, "status", res.Status, "reason", res.Reason)
	}
}

// committed logs what became of an event's commit. When it failed, the
// event is stored (published or processed) all the same, so the answer
// is still 2xx: a redelivery then finds the key inflight until the lease
// ends and is stored again after it — a duplicate the broker source (or
// the app's Idempotency-Key) catches, never a loss.
type committed struct {
	h   *Handler
	key string
}

func (c committed) Committed(err error) {
	switch {
	case err == nil:
	case errors.Is(err, seenset.ErrNotOwner):
		c.h.log.Error("commit refused: the lease expired and another request claimed the event", "key", c.key)
	default:
		c.h.log.Error("webhook stored but its key could not be recorded; a redelivery after the lease is stored again", "key", c.key, "err", err)
	}
}

func (h *Handler) letGo(ctx context.Context, s *claim.Session, key string) {
	h.releaseFailed(key, s.LetGo(ctx))
}

func (h *Handler) releaseFailed(key string, err error) {
	if err != nil && !errors.Is(err, seenset.ErrNotOwner) {
		h.log.Log(context.Background(), claim.LogLevel(err), "webhook claim not released; it frees up when its lease ends", "key", key, "err", err)
	}
}

// dropHeaders are never passed on: framing, credentials and cookies.
var dropHeaders = map[string]bool{
	"connection": true, "content-length": true, "expect": true, "host": true, "keep-alive": true, "te": true,
	"trailer": true, "transfer-encoding": true, "upgrade": true, "authorization": true, "cookie": true,
}

// eventHeaders are the request's headers as the app would have seen them
// (event type, delivery attempt, timestamps), minus the signature headers
// and what dropHeaders lists.
func eventHeaders(hd http.Header, signature []string) map[string]string {
	out := make(map[string]string, len(hd))
	for name, vals := range hd {
		lower := strings.ToLower(name)
		if dropHeaders[lower] || strings.HasPrefix(lower, "proxy-") {
			continue
		}
		skip := false
		for _, s := range signature {
			if strings.EqualFold(s, name) {
				skip = true
			}
		}
		if !skip {
			out[lower] = strings.Join(vals, ", ")
		}
	}
	return out
}

func flatHeaders(hd http.Header) map[string]string {
	out := make(map[string]string, len(hd))
	for name, vals := range hd {
		out[strings.ToLower(name)] = strings.Join(vals, ", ")
	}
	return out
}
