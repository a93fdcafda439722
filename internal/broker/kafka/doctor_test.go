package kafka_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/probe"
)

// checkTarget runs doctor's check of a webhook Kafka target and returns
// the line about the brokers.
func checkTarget(t *testing.T, o kafka.ProducerOptions) probe.Result {
	t.Helper()
	o.ConfigPath = "webhook.target.kafka"
	c := &probe.Checker{Ctx: context.Background(), Timeout: 2 * time.Second}
	kafka.CheckTarget(c, "hooks", o)
	for _, r := range c.Out {
		if strings.HasSuffix(r.Check, "(webhook source hooks)") {
			return r
		}
	}
	t.Fatalf("no line about the brokers: %v", c.Out)
	return probe.Result{}
}

// A broker that answers SASL_AUTHENTICATION_FAILED, as Kafka does (kfake
// only closes the connection): the credentials are named.
func TestCheckTargetSASLRefused(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"hooks"}, kfake.EnableSASL(), kfake.Superuser("PLAIN", "alice", "alice-s3cret"))
	c.ControlKey(kmsg.SASLAuthenticate.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.(*kmsg.SASLAuthenticateRequest).ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		return resp, nil, true
	})
	r := checkTarget(t, kafka.ProducerOptions{Brokers: c.Addrs, Topic: "hooks", SASL: kafka.SASL{Mechanism: "plain", Username: "alice", Password: "wrong"}})
	want := `the brokers refused the SASL credentials of user "alice" (mechanism plain): check webhook.target.kafka.sasl.username and webhook.target.kafka.sasl.password: SASL_AUTHENTICATION_FAILED`
	if r.Level != probe.Fail || !strings.Contains(r.Finding, want) {
		t.Fatalf("%s: %s, want FAIL with %q", r.Level, r.Finding, want)
	}
}

// TLS the target's way: with its CA it passes; without it, or without
// TLS at all, the line names the tls setting.
func TestCheckTargetTLS(t *testing.T) {
	cert, caPEM := selfSigned(t)
	c := kafkatest.Start(t, 1, []string{"hooks"}, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		tls   kafka.TLS
		level probe.Level
		want  string
	}{
		{"with its CA", kafka.TLS{Enabled: true, CAFile: caFile}, probe.OK, "reachable (1 brokers)"},
		{"system roots", kafka.TLS{Enabled: true}, probe.Fail, "the brokers' certificate is not trusted: check webhook.target.kafka.tls.ca_file"},
		{"plaintext", kafka.TLS{}, probe.Fail, "as brokers that require TLS do: set webhook.target.kafka.tls.enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkTarget(t, kafka.ProducerOptions{Brokers: c.Addrs, Topic: "hooks", TLS: tc.tls})
			if r.Level != tc.level || !strings.Contains(r.Finding, tc.want) {
				t.Fatalf("%s: %s, want %s with %q", r.Level, r.Finding, tc.level, tc.want)
			}
		})
	}
}

// A mechanism the brokers do not offer: sasl.mechanism is named.
func TestCheckTargetSASLMechanismNotOffered(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"hooks"}, kfake.EnableSASL(), kfake.Superuser("PLAIN", "alice", "alice-s3cret"))
	c.ControlKey(kmsg.SASLHandshake.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.(*kmsg.SASLHandshakeRequest).ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		resp.SupportedMechanisms = []string{"SCRAM-SHA-512"}
		return resp, nil, true
	})
	r := checkTarget(t, kafka.ProducerOptions{Brokers: c.Addrs, Topic: "hooks", SASL: kafka.SASL{Mechanism: "plain", Username: "alice", Password: "alice-s3cret"}})
	want := "the brokers do not offer SASL mechanism plain: check webhook.target.kafka.sasl.mechanism: UNSUPPORTED_SASL_MECHANISM"
	if r.Level != probe.Fail || !strings.Contains(r.Finding, want) {
		t.Fatalf("%s: %s, want FAIL with %q", r.Level, r.Finding, want)
	}
}
