package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func service(what string, up bool, probed *[]string) fallback {
	return fallback{what: what, probe: func() error {
		*probed = append(*probed, what)
		if up {
			return nil
		}
		return errors.New("connection refused")
	}}
}

// The fallback decision: explicit values are taken as they are without a
// probe; "auto" probes, and with both on auto one service down moves the
// whole demo onto the embedded parts, saying what was unreachable.
func TestChooseFallback(t *testing.T) {
	const (
		rabbit = "RabbitMQ at 127.0.0.1:5672"
		redis  = "Redis at 127.0.0.1:6379"
	)
	for _, tc := range []struct {
		broker, seen       string
		rabbitUp, redisUp  bool
		wantBroker, wantSS string
		wantNote           string
		wantProbed         int
	}{
		{"auto", "auto", true, true, "rabbitmq", "redis", "", 2},
		{"auto", "auto", false, true, "kafka", "embedded",
			"RabbitMQ at 127.0.0.1:5672 is not reachable: running on an in-process Kafka and Redis instead", 2},
		{"auto", "auto", true, false, "kafka", "embedded",
			"Redis at 127.0.0.1:6379 is not reachable: running on an in-process Kafka and Redis instead", 2},
		{"auto", "auto", false, false, "kafka", "embedded",
			"RabbitMQ at 127.0.0.1:5672 and Redis at 127.0.0.1:6379 are not reachable: running on an in-process Kafka and Redis instead", 2},
		{"kafka", "auto", true, true, "kafka", "redis", "", 1},
		{"kafka", "auto", true, false, "kafka", "embedded",
			"Redis at 127.0.0.1:6379 is not reachable: running on an in-process Redis instead", 1},
		{"auto", "redis", false, true, "kafka", "redis",
			"RabbitMQ at 127.0.0.1:5672 is not reachable: running on an in-process Kafka instead", 1},
		{"auto", "embedded", true, false, "rabbitmq", "embedded", "", 1},
		// Explicit choices are not probed: a service that is down fails
		// the demo with its own error rather than being replaced.
		{"rabbitmq", "redis", false, false, "rabbitmq", "redis", "", 0},
		{"kafka", "embedded", true, true, "kafka", "embedded", "", 0},
		{"redis", "redis", false, true, "redis", "redis", "", 0},
	} {
		t.Run(fmt.Sprintf("%s/%s/rabbit=%t/redis=%t", tc.broker, tc.seen, tc.rabbitUp, tc.redisUp), func(t *testing.T) {
			var probed []string
			c, err := choose(tc.broker, tc.seen, service(rabbit, tc.rabbitUp, &probed), service(redis, tc.redisUp, &probed))
			if err != nil {
				t.Fatal(err)
			}
			if c.broker != tc.wantBroker || c.seenset != tc.wantSS || c.note != tc.wantNote {
				t.Errorf("got %s/%s %q, want %s/%s %q", c.broker, c.seenset, c.note, tc.wantBroker, tc.wantSS, tc.wantNote)
			}
			if len(probed) != tc.wantProbed {
				t.Errorf("probed %v, want %d probes", probed, tc.wantProbed)
			}
		})
	}
	for _, bad := range [][2]string{{"nats", "auto"}, {"auto", "memory"}} {
		if _, err := choose(bad[0], bad[1], service(rabbit, true, new([]string)), service(redis, true, new([]string))); err == nil {
			t.Errorf("choose(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// The real probes against a closed port and against a listening one.
func TestProbes(t *testing.T) {
	closed := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	if err := probeTCP(closed); err == nil {
		t.Errorf("probeTCP(%s) = nil on a closed port", closed)
	}
	if err := probeRedis(closed); err == nil {
		t.Errorf("probeRedis(%s) = nil on a closed port", closed)
	}
	r, err := startEmbeddedRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	if err := probeTCP(r.addr()); err != nil {
		t.Errorf("probeTCP(%s) = %v on a listening port", r.addr(), err)
	}
	if err := probeRedis(r.addr()); err != nil {
		t.Errorf("probeRedis(%s) = %v on a Redis", r.addr(), err)
	}
}

func TestRedactURL(t *testing.T) {
	if got := redactURL("amqp://guest:guest@127.0.0.1:5672/"); got != "amqp://guest:xxxxx@127.0.0.1:5672/" {
		t.Errorf("redactURL = %q", got)
	}
}
