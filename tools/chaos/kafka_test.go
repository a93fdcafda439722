//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
)

const kafkaPartitions = 6

type kafkaEnv struct {
	cluster *kafkatest.Cluster
	topic   string
	group   string
}

func (e *kafkaEnv) name() string { return "Kafka (kfake)" }

// A killed member's partitions wait out session_timeout (6 s, kfake's
// minimum) before the group can rebalance without it, so kills every
// 2.5 s would keep the group rebalancing forever and the work would only
// happen after the faults stop.
func (e *kafkaEnv) killEvery() time.Duration { return 6 * time.Second }

func (e *kafkaEnv) sourceYAML() string {
	return fmt.Sprintf(`sources:
  - name: payments
    type: kafka
    path: /payments
    key: ["header:bq-message-id", "json:meta.id"]
    kafka:
      brokers: ["%s"]
      topics: ["%s"]
      group: %s
      session_timeout: 6s
      heartbeat_interval: 1s
      rebalance_timeout: 10s
      commit_interval: 500ms
      ordering: key
      max_in_flight: 32
`, strings.Join(e.cluster.Addrs, `", "`), e.topic, e.group)
}

// publisher keys records by meta.id, so a duplicate from the main
// publisher lands on its original's partition; the second publisher keys
// by a different string, so its duplicates race their originals on other
// partitions (two producers with different partitioners).
func (e *kafkaEnv) publisher(t *testing.T, alt bool) func([][]byte) {
	tr := &kafkago.Transport{}
	w := &kafkago.Writer{
		Addr:         kafkago.TCP(e.cluster.Addrs...),
		Topic:        e.topic,
		Balancer:     &kafkago.Hash{},
		RequiredAcks: kafkago.RequireAll,
		BatchTimeout: time.Millisecond,
		BatchSize:    200,
		Transport:    tr,
	}
	t.Cleanup(func() { _ = w.Close(); tr.CloseIdleConnections() })
	return func(bodies [][]byte) {
		if len(bodies) == 0 {
			return
		}
		msgs := make([]kafkago.Message, len(bodies))
		for i, b := range bodies {
			var env struct{ Meta struct{ ID string } }
			_ = json.Unmarshal(b, &env)
			key := env.Meta.ID
			if alt {
				key = "alt/" + key
			}
			msgs[i] = kafkago.Message{Key: []byte(key), Value: b,
				Headers: []kafkago.Header{{Key: "bq-message-id", Value: []byte(env.Meta.ID)}}}
		}
		for try := 0; ; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := w.WriteMessages(ctx, msgs...)
			cancel()
			if err == nil {
				return
			}
			// A cut connection fails the write; the records were not
			// acknowledged, so writing them again is a producer retry.
			if try == 5 {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func (e *kafkaEnv) cut() { e.cluster.Cut() }

func (e *kafkaEnv) pending(t *testing.T) int {
	committed := e.cluster.Committed(t, e.group, e.topic, kafkaPartitions)
	left := 0
	for p := range kafkaPartitions {
		conn, err := kafkago.DialLeader(context.Background(), "tcp", e.cluster.Addrs[0], e.topic, p)
		if err != nil {
			t.Fatalf("dial partition %d: %v", p, err)
		}
		end, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatalf("end offset of partition %d: %v", p, err)
		}
		c := committed[p]
		if c < 0 {
			c = 0
		}
		left += int(end - c)
	}
	return left
}

func TestChaosKafka(t *testing.T) {
	topic := "chaos-" + randHex(3)
	env := &kafkaEnv{cluster: kafkatest.Start(t, kafkaPartitions, []string{topic}), topic: topic, group: "chaos-" + randHex(3)}
	runChaos(t, env)
}
