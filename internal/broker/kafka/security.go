package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	kgosasl "github.com/twmb/franz-go/pkg/sasl"
	kgoplain "github.com/twmb/franz-go/pkg/sasl/plain"
	kgoscram "github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL authenticates to the brokers. Mechanism is "" (off), "plain",
// "scram-sha-256" or "scram-sha-512".
type SASL struct {
	Mechanism string
	Username  string
	Password  string
}

func (s SASL) mechanism() (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case "plain":
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case "scram-sha-256", "scram-sha-512":
		algo := scram.SHA256
		if s.Mechanism == "scram-sha-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, s.Username, s.Password)
		if err != nil {
			return nil, fmt.Errorf("kafka sasl %s: %w", s.Mechanism, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("kafka sasl: unknown mechanism %q", s.Mechanism)
}

// kgoMechanism is the same mechanism for the partition readers' kgo
// clients; mechanism has validated it.
func (s SASL) kgoMechanism() kgosasl.Mechanism {
	switch s.Mechanism {
	case "plain":
		return kgoplain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	case "scram-sha-256":
		return kgoscram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case "scram-sha-512":
		return kgoscram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil
}

// TLS encrypts the connections to the brokers. CAFile replaces the system
// roots; CertFile and KeyFile present a client certificate.
type TLS struct {
	Enabled            bool
	CAFile             string
	CertFile           string
	KeyFile            string
	InsecureSkipVerify bool
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
