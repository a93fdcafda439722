package kafka_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// selfSigned returns a server certificate for 127.0.0.1 and the PEM of
// the CA (itself) that signs it.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kfake"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TLS with a private CA reaches the group, the fetches and the dead-letter
// producer (one client); without the CA the certificate is refused.
func TestTLS(t *testing.T) {
	cert, caPEM := selfSigned(t)
	c := kafkatest.Start(t, 1, []string{"orders", "orders.dlq"}, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	w := c.Client(t, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), kgo.DefaultProduceTopic("orders"))
	if err := w.ProduceSync(context.Background(), &kgo.Record{Value: []byte("a")}, &kgo.Record{Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	w.Close()

	o := options(c, "orders")
	o.TLS = kafka.TLS{Enabled: true, CAFile: caFile}
	o.DeadLetterTopic = "orders.dlq"
	var n atomic.Int64
	start(t, o, func(d broker.Delivery) {
		if n.Add(1) == 1 {
			if err := d.DeadLetter(context.Background(), broker.DeadLetterInfo{Reason: "test"}); err != nil {
				panic(err)
			}
			return
		}
		_ = d.Ack(context.Background())
	})
	testutil.Eventually(t, 15*time.Second, "both settled", func() bool { return n.Load() == 2 })

	// System roots do not know the private CA: never a member.
	bad := options(c, "orders")
	bad.TLS = kafka.TLS{Enabled: true}
	s, err := kafka.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, func(broker.Delivery) { panic("delivered over an unverified connection") }) }()
	time.Sleep(time.Second)
	if s.Ready() == nil {
		t.Error("Ready with an unverifiable certificate")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A CA file that holds no certificate is refused at New.
	empty := filepath.Join(t.TempDir(), "empty.pem")
	_ = os.WriteFile(empty, []byte("nothing"), 0o600)
	if _, err := kafka.New(kafka.Options{Brokers: c.Addrs, Topics: []string{"orders"}, Group: "g", TLS: kafka.TLS{Enabled: true, CAFile: empty}}); err == nil {
		t.Error("New accepted a CA file without a certificate")
	}
}

// The webhook sink's producer takes the same TLS options as the source:
// with the private CA it produces (acks=all), with the system roots the
// certificate is refused.
func TestProducerTLS(t *testing.T) {
	cert, caPEM := selfSigned(t)
	c := kafkatest.Start(t, 1, []string{"hooks"}, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := kafka.NewProducer(kafka.ProducerOptions{Brokers: c.Addrs, Topic: "hooks", TLS: kafka.TLS{Enabled: true, CAFile: caFile}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Produce(context.Background(), &kgo.Record{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("produce over TLS: %v", err)
	}
	bad, err := kafka.NewProducer(kafka.ProducerOptions{Brokers: c.Addrs, Topic: "hooks", TLS: kafka.TLS{Enabled: true}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Produce(context.Background(), &kgo.Record{Value: []byte("v")}); err == nil {
		t.Fatal("produced over an unverified connection")
	}
}
