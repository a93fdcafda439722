package doctor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// kafkaSource checks a Kafka source's brokers (with its TLS and SASL),
// its topics and dead-letter topic (metadata, never auto-created) and
// its consumer group.
func (c *checker) kafkaSource(s config.Source) {
	k := s.Kafka
	check := fmt.Sprintf("kafka %s (source %s)", strings.Join(k.Brokers, ","), s.Name)
	o := s.KafkaOptions()
	o.NetworkTimeout, o.ClientID = c.timeout, "dedupe-proxy-doctor"
	src, err := kafka.New(o)
	if err != nil {
		c.add(Fail, check, "%v", err)
		return
	}
	cl, err := src.Client()
	if err != nil {
		c.add(Fail, check, "%v", err)
		return
	}
	defer cl.Close()
	topics := append([]string(nil), k.Topics...)
	if k.DeadLetterTopic != "" {
		topics = append(topics, k.DeadLetterTopic)
	}
	if !c.kafkaTopics(cl, check, s.Name, topics, k.DeadLetterTopic) {
		return
	}
	c.kafkaGroup(cl, s.Name, k.Group)
}

// kafkaTopics reports each topic; false when the brokers did not answer.
func (c *checker) kafkaTopics(cl *kgo.Client, check, source string, topics []string, deadLetter string) bool {
	ctx, cancel := c.context()
	defer cancel()
	resp, err := kafka.TopicMetadata(ctx, cl, topics)
	if err != nil {
		c.add(Fail, check, "not reachable: %v", err)
		return false
	}
	c.add(OK, check, "reachable (%d brokers)", len(resp.Brokers))
	found := map[string]kmsg.MetadataResponseTopic{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			found[*t.Topic] = t
		}
	}
	for _, name := range topics {
		what := "topic"
		if name == deadLetter {
			what = "dead-letter topic"
		}
		at := fmt.Sprintf("kafka %s %s (source %s)", what, name, source)
		t, ok := found[name]
		if !ok {
			c.add(Fail, at, "not in the brokers' answer")
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				c.add(Fail, at, "does not exist (the proxy does not create it); create it, e.g. kafka-topics.sh --bootstrap-server BROKER --create --topic %s --partitions N", name)
			} else {
				c.add(Fail, at, "%v", err)
			}
			continue
		}
		c.add(OK, at, "exists: %d partitions", len(t.Partitions))
	}
	return true
}

// kafkaGroup describes the consumer group. A group nobody joined yet is
// fine: the first replica creates it.
func (c *checker) kafkaGroup(cl *kgo.Client, source, group string) {
	at := fmt.Sprintf("kafka group %s (source %s)", group, source)
	ctx, cancel := c.context()
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		c.add(Fail, at, "cannot describe: %v", err)
		return
	}
	if len(resp.Groups) != 1 {
		c.add(Fail, at, "cannot describe: %d groups in the answer", len(resp.Groups))
		return
	}
	g := resp.Groups[0]
	err = kerr.ErrorForCode(g.ErrorCode)
	switch {
	case errors.Is(err, kerr.GroupIDNotFound), err == nil && (g.State == "Dead" || g.State == ""):
		c.add(OK, at, "no member yet; the first replica to start creates it")
	case err != nil:
		c.add(Fail, at, "%v", err)
	default:
		c.add(OK, at, "state %s, %d members", g.State, len(g.Members))
	}
}
