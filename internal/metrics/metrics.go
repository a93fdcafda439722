// Package metrics holds dedupe-proxy's Prometheus collectors. They are
// registered on a registry passed in, never the global one, so tests and
// several in-process daemons do not collide. Labels are bounded: source
// names come from the config; keys, URLs and error texts never become
// labels.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Terminal results: every delivery ends in exactly one of them.
const (
	Forwarded    = "forwarded"     // the app succeeded; key committed; acked
	Duplicate    = "duplicate"     // key already done; acked without forwarding
	DeadLettered = "dead_lettered" // sent to the dead-letter destination
	Requeued     = "requeued"      // given back for redelivery (busy, shutdown, no dead letter, connection lost)
)

// Events that happen on the way; a delivery can have several.
const (
	EventNoKey          = "no_key"           // no usable key: forwarded without dedupe (or dead-lettered)
	EventBusy           = "busy"             // the key was in flight: at another replica, or kept claimed here after a request that may still run
	EventRetry          = "retry"            // an attempt failed and will be retried
	EventStoreError     = "store_error"      // the seen-set could not be reached
	EventStoreFailOpen  = "store_fail_open"  // forwarded without the seen-set (on_store_error: forward)
	EventCommitFailed   = "commit_failed"    // the success could not be recorded (acked anyway)
	EventLeaseLost      = "lease_lost"       // the lease expired during the forward and another owner took it
	EventSettleFailed   = "settle_failed"    // ack/nack failed (connection lost; the broker redelivers)
	EventBodyTooLarge   = "body_too_large"   // larger than delivery.max_body_bytes
	EventUnforwardable  = "unforwardable"    // cannot be forwarded as it came (a stream entry without its body field)
	EventDeadLetterFail = "dead_letter_fail" // the dead-letter publish failed; requeued or retried instead
	EventFailed         = "failed"           // given up on: permanent answer, retries exhausted or body too large
	EventAppWait        = "app_wait"         // held before its claim because app.health_url said the app was down
	EventPanic          = "panic"            // a bug panicked while handling it; recovered, claim released or left to expire, given back
	EventStoreKeyError  = "store_key_error"  // the key's seen-set entry is unusable (wrong type, foreign value): dead-lettered or held
	EventSlow           = "slow"             // the app had not answered within app.timeout; the request stays open, the key held
	EventAbandoned      = "abandoned"        // no answer within app.max_request_time: given up while the app may still run it, so a second request may overlap it
)

var (
	results = []string{Forwarded, Duplicate, DeadLettered, Requeued}
	events  = []string{EventNoKey, EventBusy, EventRetry, EventStoreError, EventStoreFailOpen, EventCommitFailed,
		EventLeaseLost, EventSettleFailed, EventBodyTooLarge, EventUnforwardable, EventDeadLetterFail, EventFailed, EventAppWait,
		EventPanic, EventStoreKeyError, EventSlow, EventAbandoned}
	classes  = []string{"2xx", "3xx", "4xx", "5xx", "error"}
	storeOps = []string{"claim", "renew", "commit", "release", "forget", "status", "ping"}
)

// Metrics are the proxy's collectors.
type Metrics struct {
	Messages        *prometheus.CounterVec
	Events          *prometheus.CounterVec
	ForwardDuration *prometheus.HistogramVec
	AppResponses    *prometheus.CounterVec
	StoreDuration   *prometheus.HistogramVec
	StoreErrors     *prometheus.CounterVec
	InFlight        *prometheus.GaugeVec
	BusyWaiting     *prometheus.GaugeVec
	Reconnects      *prometheus.CounterVec
	Connected       *prometheus.GaugeVec
	AppUp           prometheus.Gauge
	KafkaLag        *prometheus.GaugeVec
	KafkaCommits    *prometheus.CounterVec
	KafkaCommitFail *prometheus.CounterVec
	PartitionHeld   *prometheus.GaugeVec
	// KeyReuse counts messages whose key was already done for another
	// body (key_reuse), whatever was done with them.
	KeyReuse *prometheus.CounterVec
	// RedisReclaimed, RedisQueued and RedisReserved are for Redis
	// sources, both modes.
	RedisReclaimed *prometheus.CounterVec
	RedisQueued    *prometheus.GaugeVec
	RedisReserved  *prometheus.GaugeVec
	// SeenSetEvicting and SeenSetPersistent are -1 until the store's
	// servers have been asked, and while they refuse to say.
	SeenSetEvicting   prometheus.Gauge
	SeenSetPersistent prometheus.Gauge

	Webhook *WebhookVecs

	connected *refreshed
}

// New creates the collectors and registers them on reg (nil: not
// registered, for tests that do not read them).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_messages_total",
			Help: "Deliveries by source and terminal result (forwarded, duplicate, dead_lettered, requeued).",
		}, []string{"source", "result"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_events_total",
			Help: "Things that happened to deliveries on the way: no_key, busy, retry, store_error, commit_failed, lease_lost, ...",
		}, []string{"source", "event"}),
		ForwardDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dedupe_proxy_forward_duration_seconds",
			Help:    "Duration of one HTTP request to the app.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source"}),
		AppResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_app_responses_total",
			Help: "App responses by status class; error means no response (refused, reset, timeout).",
		}, []string{"source", "class"}),
		StoreDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dedupe_proxy_seenset_duration_seconds",
			Help:    "Latency of seen-set round trips; a batch of claims or commits is one.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5, 1, 2.5},
		}, []string{"op"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_seenset_errors_total",
			Help: "Seen-set operations that failed to reach the store.",
		}, []string{"op"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedupe_proxy_inflight_messages",
			Help: "Deliveries being processed now.",
		}, []string{"source"}),
		BusyWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedupe_proxy_busy_waiting_messages",
			Help: "Deliveries held unacked in the proxy, off the source's workers, until their busy key (claimed by a request still open) can be claimed again.",
		}, []string{"source"}),
		Reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_broker_reconnects_total",
			Help: "Broker reconnections after a lost connection.",
		}, []string{"source"}),
		Connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedupe_proxy_broker_connected",
			Help: "1 while the source is connected and consuming.",
		}, []string{"source"}),
		AppUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dedupe_proxy_app_up",
			Help: "1 while the app's health URL answers 2xx (always 1 without app.health_url).",
		}),
		KafkaLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedupe_proxy_kafka_lag_messages",
			Help: "Messages between the committed offset and the partition's high watermark.",
		}, []string{"source", "topic", "partition"}),
		KafkaCommits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_kafka_commits_total",
			Help: "Offset commits sent.",
		}, []string{"source"}),
		KafkaCommitFail: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_kafka_commit_failures_total",
			Help: "Offset commits that failed.",
		}, []string{"source"}),
		KeyReuse: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_key_reuse_total",
			Help: "Messages whose key was already processed for another body (a different digest): acked as duplicates (key_reuse: warn), dead-lettered or forwarded marked.",
		}, []string{"source"}),
		PartitionHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedupe_proxy_kafka_partitions_held",
			Help: "Partitions not advancing because a message keeps failing and no dead-letter topic is set.",
		}, []string{"source"}),
		RedisReclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_redis_reclaimed_total",
			Help: "Messages given back to a Redis queue from the processing list of a replica whose heartbeat expired, or of this replica after a reconnect.",
		}, []string{"source"}),
		RedisQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedupe_proxy_redis_queue_length",
			Help: "Redis source: what waits, not yet delivered: the queue's LLEN (mode list, read at every heartbeat) or the consumer group's lag (mode stream, read at every renewal; NaN when Redis cannot tell).",
		}, []string{"source"}),
		RedisReserved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dedupe_proxy_redis_processing_length",
			Help: "Redis source: what this replica holds: its processing list's LLEN (mode list, read at every heartbeat) or its consumer's pending entries (mode stream, XPENDING, read at every renewal).",
		}, []string{"source"}),
		SeenSetEvicting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dedupe_proxy_seenset_evicting",
			Help: "1 when a Redis server of the seen-set has maxmemory set and a maxmemory-policy other than noeviction, so it may evict keys; 0 when none can; -1 unknown.",
		}),
		SeenSetPersistent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dedupe_proxy_seenset_persistent",
			Help: "1 when every Redis server of the seen-set has AOF or RDB snapshots; 0 when one has neither; -1 unknown.",
		}),
	}
	m.Webhook = newWebhookVecs()
	m.SeenSetEvicting.Set(-1)
	m.SeenSetPersistent.Set(-1)
	for _, op := range storeOps {
		m.StoreDuration.WithLabelValues(op)
		m.StoreErrors.WithLabelValues(op)
	}
	m.connected = &refreshed{GaugeVec: m.Connected}
	if reg != nil {
		reg.MustRegister(m.Messages, m.Events, m.ForwardDuration, m.AppResponses, m.StoreDuration, m.StoreErrors,
			m.InFlight, m.BusyWaiting, m.Reconnects, m.connected, m.AppUp, m.KafkaLag, m.KafkaCommits, m.KafkaCommitFail, m.PartitionHeld, m.KeyReuse,
			m.RedisReclaimed, m.RedisQueued, m.RedisReserved, m.SeenSetEvicting, m.SeenSetPersistent)
		m.Webhook.register(reg)
	}
	m.AppUp.Set(1)
	return m
}

// InitSource creates every series of a source at 0, so rates and alerts
// work before the first event.
func (m *Metrics) InitSource(source, kind string) {
	for _, r := range results {
		m.Messages.WithLabelValues(source, r)
	}
	for _, e := range events {
		m.Events.WithLabelValues(source, e)
	}
	for _, c := range classes {
		m.AppResponses.WithLabelValues(source, c)
	}
	m.ForwardDuration.WithLabelValues(source)
	m.KeyReuse.WithLabelValues(source)
	m.InFlight.WithLabelValues(source)
	m.BusyWaiting.WithLabelValues(source)
	m.Reconnects.WithLabelValues(source)
	m.Connected.WithLabelValues(source)
	if kind == "redis" {
		m.RedisReclaimed.WithLabelValues(source)
		m.RedisQueued.WithLabelValues(source)
		m.RedisReserved.WithLabelValues(source)
	}
	if kind == "kafka" {
		m.KafkaCommits.WithLabelValues(source)
		m.KafkaCommitFail.WithLabelValues(source)
		m.PartitionHeld.WithLabelValues(source)
	}
}

// SourceMetrics is what one broker source writes, whatever its broker:
// a small handle with its series bound once. The Kafka fields are for
// Kafka sources; a RabbitMQ source leaves them alone.
type SourceMetrics struct {
	Reconnects     prometheus.Counter
	Commits        prometheus.Counter
	CommitFailures prometheus.Counter
	PartitionsHeld prometheus.Gauge
	// Lag is curried by source: label it with topic and partition.
	Lag *prometheus.GaugeVec
	// Reclaimed, Queued and Reserved are for Redis sources, both modes.
	Reclaimed prometheus.Counter
	Queued    prometheus.Gauge
	Reserved  prometheus.Gauge
}

// ForSource returns the handle of source name of the given kind
// ("rabbitmq", "kafka", "redis"). Only its kind's series are exported: a
// RabbitMQ source with a dedupe_proxy_kafka_partitions_held series at 0
// would put a line for it on the dashboard's Kafka panel. The other
// kinds' fields are live but exported nowhere, so a source may still
// write them.
func (m *Metrics) ForSource(name, kind string) *SourceMetrics {
	sm := &SourceMetrics{
		Reconnects:     m.Reconnects.WithLabelValues(name),
		Commits:        prometheus.NewCounter(prometheus.CounterOpts{Name: "unexported"}),
		CommitFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "unexported"}),
		PartitionsHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "unexported"}),
		Lag:            prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "unexported"}, []string{"topic", "partition"}),
		Reclaimed:      prometheus.NewCounter(prometheus.CounterOpts{Name: "unexported"}),
		Queued:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "unexported"}),
		Reserved:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "unexported"}),
	}
	switch kind {
	case "kafka":
		sm.Commits = m.KafkaCommits.WithLabelValues(name)
		sm.CommitFailures = m.KafkaCommitFail.WithLabelValues(name)
		sm.PartitionsHeld = m.PartitionHeld.WithLabelValues(name)
		sm.Lag = m.KafkaLag.MustCurryWith(prometheus.Labels{"source": name})
	case "redis":
		sm.Reclaimed = m.RedisReclaimed.WithLabelValues(name)
		sm.Queued = m.RedisQueued.WithLabelValues(name)
		sm.Reserved = m.RedisReserved.WithLabelValues(name)
	}
	return sm
}

// SetConnectedProbe makes every collection of dedupe_proxy_broker_connected
// first ask probe, per source, whether it is connected: the probe is the
// gauge's only writer, so no source can leave it stale.
func (m *Metrics) SetConnectedProbe(probe func(set func(source string, connected bool))) {
	m.connected.mu.Lock()
	m.connected.probe = probe
	m.connected.mu.Unlock()
}

// refreshed is the Connected gauge vec, refreshed from a probe right
// before it is collected.
type refreshed struct {
	*prometheus.GaugeVec
	mu    sync.Mutex
	probe func(set func(source string, connected bool))
}

func (r *refreshed) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	probe := r.probe
	r.mu.Unlock()
	if probe != nil {
		probe(func(source string, connected bool) {
			v := 0.0
			if connected {
				v = 1
			}
			r.GaugeVec.WithLabelValues(source).Set(v)
		})
	}
	r.GaugeVec.Collect(ch)
}

// Results lists the terminal results, Events the events and Classes the
// app response classes: every label value the pipeline uses.
func Results() []string { return results }

// Events lists every event label value.
func Events() []string { return events }

// Classes lists the app response classes.
func Classes() []string { return classes }

// StatusClass maps an HTTP status (0: no response) to its label.
func StatusClass(status int) string {
	switch {
	case status == 0:
		return "error"
	case status < 300:
		return "2xx"
	case status < 400:
		return "3xx"
	case status < 500:
		return "4xx"
	}
	return "5xx"
}
