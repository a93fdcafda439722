package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL authenticates to the brokers. Mechanism is "" (off), "plain",
// "scram-sha-256" or "scram-sha-512".
type SASL struct {
	Mechanism string `mapstructure:"mechanism"`
	Username  string `mapstructure:"username"`
	Password  string `mapstructure:"password"`
}

func (s SASL) mechanism() (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case "plain":
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	case "scram-sha-256":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), nil
	case "scram-sha-512":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("kafka sasl: unknown mechanism %q", s.Mechanism)
}

// TLS encrypts the connections to the brokers. CAFile replaces the system
// roots; CertFile and KeyFile present a client certificate.
type TLS struct {
	Enabled            bool   `mapstructure:"enabled"`
	CAFile             string `mapstructure:"ca_file"`
	CertFile           string `mapstructure:"cert_file"`
	KeyFile            string `mapstructure:"key_file"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify"`
}

func (t TLS) config() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka tls ca_file %s: no PEM certificate found", t.CAFile)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka tls cert_file/key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// SecurityOpts are the kgo options for TLS and SASL. Every client that
// talks to the brokers — the source's, the webhook sink's, doctor's —
// takes them from here, so a setting can never reach one and not the
// other. Files are read now: an unreadable one is an error at start.
func SecurityOpts(s SASL, t TLS) ([]kgo.Opt, error) {
	mech, err := s.mechanism()
	if err != nil {
		return nil, err
	}
	cfg, err := t.config()
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if cfg != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// saslWatch remembers how the last SASL exchange with a broker ended,
// as a kgo hook. A broker refusing the credentials answers
// SASL_AUTHENTICATION_FAILED, or just closes the connection (kfake
// does); kgo retries the latter as a network error until the request's
// deadline, and the request's own error then says nothing of SASL.
type saslWatch struct {
	mu  sync.Mutex
	err error
	at  time.Time
}

var _ kgo.HookBrokerRead = (*saslWatch)(nil)

func (w *saslWatch) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != kmsg.SASLHandshake.Int16() && key != kmsg.SASLAuthenticate.Int16() {
		return
	}
	w.mu.Lock()
	w.err, w.at = err, time.Now()
	w.mu.Unlock()
}

// failedSince is the last SASL exchange's error if it ended after t.
func (w *saslWatch) failedSince(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.at.Before(t) {
		return nil
	}
	return w.err
}

// explainRefusal returns err naming the setting to fix when it is the
// brokers refusing the client's SASL (w saw an exchange fail since
// since) or TLS, else err. block is where s and t are in the config
// ("kafka" of a source, "webhook.target.kafka").
func explainRefusal(err error, w *saslWatch, since time.Time, s SASL, t TLS, block string) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Errorf("the brokers do not offer SASL mechanism %s: check %s.sasl.mechanism: %w", s.Mechanism, block, err)
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("the brokers refused the SASL credentials of user %q (mechanism %s): check %s.sasl.username and %s.sasl.password: %w",
			s.Username, s.Mechanism, block, block, err)
	}
	if serr := w.failedSince(since); serr != nil && s.Mechanism != "" {
		return fmt.Errorf("the brokers refused the SASL credentials of user %q (mechanism %s; the broker ended the connection during authentication: %v): check %s.sasl.username, %s.sasl.password and %s.sasl.mechanism: %w",
			s.Username, s.Mechanism, serr, block, block, block, err)
	}
	if eof, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		switch msg := eof.Error(); {
		case s.Mechanism == "" && strings.Contains(msg, "SASL"):
			return fmt.Errorf("the brokers closed the connection at the first request, as brokers that require SASL do: set %s.sasl: %w", block, err)
		case !t.Enabled && strings.Contains(msg, "TLS"):
			return fmt.Errorf("the brokers closed the connection as brokers that require TLS do: set %s.tls.enabled: %w", block, err)
		}
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return fmt.Errorf("the brokers' certificate is not trusted: check %s.tls.ca_file: %w", block, err)
	}
	return err
}
