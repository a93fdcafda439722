//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	// The default partitioner hashes the record key: the same key, the
	// same partition.
	w, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.Addrs...), kgo.DefaultProduceTopic(e.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return func(bodies [][]byte) {
		if len(bodies) == 0 {
			return
		}
		for try := 0; ; try++ {
			recs := make([]*kgo.Record, len(bodies))
			for i, b := range bodies {
				var env struct{ Meta struct{ ID string } }
				_ = json.Unmarshal(b, &env)
				key := env.Meta.ID
				if alt {
					key = "alt/" + key
				}
				recs[i] = &kgo.Record{Key: []byte(key), Value: b,
					Headers: []kgo.RecordHeader{{Key: "bq-message-id", Value: []byte(env.Meta.ID)}}}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := w.ProduceSync(ctx, recs...).FirstErr()
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
	ends := e.cluster.EndOffsets(t, e.topic, kafkaPartitions)
	left := 0
	for p := range kafkaPartitions {
		c := committed[p]
		if c < 0 {
			c = 0
		}
		left += int(ends[p] - c)
	}
	return left
}

func TestChaosKafka(t *testing.T) {
	topic := "chaos-" + randHex(3)
	env := &kafkaEnv{cluster: kafkatest.Start(t, kafkaPartitions, []string{topic}), topic: topic, group: "chaos-" + randHex(3)}
	runChaos(t, env)
}
