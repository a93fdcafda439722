package daemon

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// newWebhook builds a webhook source's listener: its secrets are read
// from the process environment or files now, so a missing one stops the
// start instead of refusing every request later.
func (d *Daemon) newWebhook(sc config.Source) (*webhook.Listener, error) {
	cfg, w := d.cfg, sc.Webhook
	secrets, errs := w.ResolveSecrets(os.LookupEnv)
	if len(errs) > 0 {
		return nil, fmt.Errorf("webhook: %w", errors.Join(errs...))
	}
	g := w.Generic
	v, err := webhook.NewVerifier(w.Profile, secrets, w.Tolerance, webhook.Generic{Header: g.Header, Prefix: g.Prefix,
		Encoding: g.Encoding, Algorithm: g.Algorithm, TimestampHeader: g.TimestampHeader})
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	ex, err := keys.Parse(sc.Key)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	dg, err := keys.ParseDigestFields(sc.KeyReuseFields)
	if err != nil {
		return nil, fmt.Errorf("key_reuse_fields: %w", err)
	}
	o := webhook.Options{
		Name:          sc.Name,
		KeyReuse:      sc.KeyReuse,
		Digest:        dg,
		Prefix:        cfg.Consumer + ":" + sc.StoredKeySpace() + ":",
		Profile:       w.Profile,
		Verifier:      v,
		Keys:          ex,
		KeyFromRules:  w.KeyFrom == "rules",
		Claims:        d.claims,
		BusyDelay:     cfg.Delivery.BusyDelay,
		MaxBodyBytes:  int64(w.MaxBodyBytes),
		MaxConcurrent: w.MaxConcurrent,
		MaxUnverified: w.MaxUnverified,
		Logger:        d.log,
		Metrics:       d.metrics.ForWebhook(sc.Name),
	}
	var sink webhook.Sink
	if w.Mode == "enqueue" {
		t := w.Target
		k := config.KindOf(t.Broker)
		if k == nil || k.Target == nil {
			return nil, fmt.Errorf("webhook: unknown target broker %q", t.Broker)
		}
		sink, err = k.Target.NewSink(t, d.log.With("source", sc.Name))
		if err != nil {
			return nil, fmt.Errorf("webhook: %s target: %w", t.Broker, err)
		}
		o.Sink = sink
	} else {
		o.Forwarder, o.AppPath = d.fwd, sc.Path
	}
	return webhook.NewListener(webhook.ListenerOptions{
		Name:        sc.Name,
		Listen:      w.Listen,
		Path:        w.Path,
		ReadTimeout: w.ReadTimeout,
		// Reading, then storing (each store and broker step is bounded
		// on its own) or the app's whole answer in mode forward.
		WriteTimeout: w.ReadTimeout + cfg.App.Timeout + 30*time.Second,
		DrainTimeout: cfg.ShutdownTimeout,
	}, webhook.NewHandler(o), sink), nil
}

// WebhookAddr is the bound address of webhook source name once Run
// started it ("" otherwise).
func (d *Daemon) WebhookAddr(name string) string {
	for _, s := range d.sources {
		if l, ok := s.src.(*webhook.Listener); ok && l.Name() == name {
			return l.Addr()
		}
	}
	return ""
}
