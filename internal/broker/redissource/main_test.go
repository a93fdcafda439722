package redissource_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
)

// TestMain runs the package's tests, or, started by a test with
// REDISQ_HOLD set, one replica that reserves messages and never settles
// them, for the test to SIGKILL.
func TestMain(m *testing.M) {
	if os.Getenv("REDISQ_HOLD") != "" {
		os.Exit(hold())
	}
	goleak.VerifyTestMain(m)
}

// hold prints "replica <id>" and then "held <body>" for every delivery,
// which it keeps until it is killed.
func hold() int {
	ttl, err := time.ParseDuration(os.Getenv("REDISQ_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := redissource.New(redissource.Options{
		Name:         "held",
		Addrs:        strings.Split(os.Getenv("REDISQ_ADDRS"), ","),
		Queue:        os.Getenv("REDISQ_QUEUE"),
		Workers:      3,
		HeartbeatTTL: ttl,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("replica %s\n", s.Replica())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_ = s.Run(ctx, func(d broker.Delivery) {
		fmt.Printf("held %s\n", d.Message().Body)
		<-ctx.Done()
	})
	return 0
}
