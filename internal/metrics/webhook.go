package metrics

import "github.com/prometheus/client_golang/prometheus"

// Why a webhook request was answered with something other than a 2xx:
// the labels of dedupe_proxy_webhook_rejected_total.
const (
	WebhookUnsigned          = "unsigned"           // 401: signature or timestamp header missing or malformed
	WebhookBadSignature      = "bad_signature"      // 401: no signature matches a secret
	WebhookStale             = "stale"              // 400: signed timestamp outside the tolerance
	WebhookTooLarge          = "too_large"          // 413: body above max_body_bytes
	WebhookNoKey             = "no_key"             // 400: no event key in the request
	WebhookBadRequest        = "bad_request"        // 405/400: not a POST, unreadable body
	WebhookOverloaded        = "overloaded"         // 503: max_concurrent requests already running
	WebhookBusy              = "busy"               // 409: the same event is being stored right now
	WebhookStoreUnavailable  = "store_unavailable"  // 503: the seen-set could not be reached
	WebhookTargetUnavailable = "target_unavailable" // 503: the broker did not confirm the publish
	WebhookAppFailed         = "app_failed"         // 502/503: forward mode, the app did not answer 2xx
	WebhookKeyUnusable       = "key_unusable"       // 500: the key's seen-set entry holds a foreign value
	WebhookAppSlow           = "app_slow"           // 503: forward mode, no answer within app.timeout; the request stays open with the key held
	WebhookKeyReused         = "key_reused"         // 422: key_reuse dead_letter, the event id was stored with another body
)

// How a webhook event was stored: the labels of
// dedupe_proxy_webhook_accepted_total.
const (
	WebhookEnqueued  = "enqueued"  // published to the broker with a confirm
	WebhookForwarded = "forwarded" // the app answered 2xx
)

var webhookReasons = []string{WebhookUnsigned, WebhookBadSignature, WebhookStale, WebhookTooLarge, WebhookNoKey,
	WebhookBadRequest, WebhookOverloaded, WebhookBusy, WebhookStoreUnavailable, WebhookTargetUnavailable,
	WebhookAppFailed, WebhookKeyUnusable, WebhookAppSlow, WebhookKeyReused}

// WebhookReasons lists every rejected label value.
func WebhookReasons() []string { return webhookReasons }

// WebhookVecs are the webhook sources' collectors.
type WebhookVecs struct {
	Received   *prometheus.CounterVec
	Verified   *prometheus.CounterVec
	Rejected   *prometheus.CounterVec
	Duplicates *prometheus.CounterVec
	Accepted   *prometheus.CounterVec
	Duration   *prometheus.HistogramVec
}

func newWebhookVecs() *WebhookVecs {
	return &WebhookVecs{
		Received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_webhook_received_total",
			Help: "Webhook requests received.",
		}, []string{"source"}),
		Verified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_webhook_verified_total",
			Help: "Webhook requests whose signature and timestamp were valid (always, for profile none).",
		}, []string{"source"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_webhook_rejected_total",
			Help: "Webhook requests answered with a non-2xx, by reason.",
		}, []string{"source", "reason"}),
		Duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_webhook_duplicates_total",
			Help: "Webhook deliveries of an event already stored: answered 2xx, nothing published or forwarded.",
		}, []string{"source"}),
		Accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dedupe_proxy_webhook_accepted_total",
			Help: "Webhook events stored for the first time: enqueued (broker confirmed) or forwarded (app answered 2xx).",
		}, []string{"source", "how"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dedupe_proxy_webhook_duration_seconds",
			Help:    "Time from a webhook request's arrival to its answer.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source"}),
	}
}

func (v *WebhookVecs) register(reg prometheus.Registerer) {
	reg.MustRegister(v.Received, v.Verified, v.Rejected, v.Duplicates, v.Accepted, v.Duration)
}

// WebhookMetrics is one webhook source's handle, its series bound once
// (and created at 0, so rates and alerts work before the first request).
type WebhookMetrics struct {
	Received   prometheus.Counter
	Verified   prometheus.Counter
	Duplicates prometheus.Counter
	Enqueued   prometheus.Counter
	Forwarded  prometheus.Counter
	// KeyReuse is dedupe_proxy_key_reuse_total of this source.
	KeyReuse prometheus.Counter
	Duration prometheus.Observer
	rejected map[string]prometheus.Counter
}

// Rejected counts one non-2xx answer.
func (w *WebhookMetrics) Rejected(reason string) { w.rejected[reason].Inc() }

// ForWebhook returns the handle of webhook source name.
func (m *Metrics) ForWebhook(name string) *WebhookMetrics {
	v := m.Webhook
	w := &WebhookMetrics{
		Received:   v.Received.WithLabelValues(name),
		Verified:   v.Verified.WithLabelValues(name),
		Duplicates: v.Duplicates.WithLabelValues(name),
		Enqueued:   v.Accepted.WithLabelValues(name, WebhookEnqueued),
		Forwarded:  v.Accepted.WithLabelValues(name, WebhookForwarded),
		Duration:   v.Duration.WithLabelValues(name),
		KeyReuse:   m.KeyReuse.WithLabelValues(name),
		rejected:   map[string]prometheus.Counter{},
	}
	for _, r := range webhookReasons {
		w.rejected[r] = v.Rejected.WithLabelValues(name, r)
	}
	return w
}
