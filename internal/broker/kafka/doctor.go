package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupe-proxy/dedupe-proxy/internal/probe"
)

// Check is doctor's check of a Kafka source: its brokers (with its TLS
// and SASL), its topics and dead-letter topic (metadata, never
// auto-created) and its consumer group.
func Check(c *probe.Checker, o Options) {
	check := fmt.Sprintf("kafka %s (source %s)", strings.Join(o.Brokers, ","), o.Name)
	o.NetworkTimeout, o.ClientID = c.Timeout, "dedupe-proxy-doctor"
	src, err := New(o)
	if err != nil {
		c.Add(probe.Fail, check, "%v", err)
		return
	}
	w := &saslWatch{}
	cl, err := src.Client(kgo.WithHooks(w))
	if err != nil {
		c.Add(probe.Fail, check, "%v", err)
		return
	}
	defer cl.Close()
	topics := append([]string(nil), o.Topics...)
	if o.DeadLetterTopic != "" {
		topics = append(topics, o.DeadLetterTopic)
	}
	metadata := func(ctx context.Context) (*kmsg.MetadataResponse, error) {
		start := time.Now()
		resp, err := TopicMetadata(ctx, cl, topics)
		return resp, explainRefusal(err, w, start, o.SASL, o.TLS, "kafka")
	}
	if !checkTopics(c, metadata, check, o.Name, topics, o.DeadLetterTopic) {
		return
	}
	checkGroup(c, cl, o.Name, o.Group)
}

// checkTopics reports each topic of the answer of metadata (a request
// for them); false when the brokers did not answer.
func checkTopics(c *probe.Checker, metadata func(context.Context) (*kmsg.MetadataResponse, error), check, source string, topics []string, deadLetter string) bool {
	ctx, cancel := c.Context()
	defer cancel()
	resp, err := metadata(ctx)
	if err != nil {
		c.Add(probe.Fail, check, "not reachable: %v", err)
		return false
	}
	c.Add(probe.OK, check, "reachable (%d brokers)", len(resp.Brokers))
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
			c.Add(probe.Fail, at, "not in the brokers' answer")
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				c.Add(probe.Fail, at, "does not exist (the proxy does not create it); create it, e.g. kafka-topics.sh --bootstrap-server BROKER --create --topic %s --partitions N", name)
			} else {
				c.Add(probe.Fail, at, "%v", err)
			}
			continue
		}
		c.Add(probe.OK, at, "exists: %d partitions", len(t.Partitions))
	}
	return true
}

// checkGroup describes the consumer group. A group nobody joined yet is
// fine: the first replica creates it.
func checkGroup(c *probe.Checker, cl *kgo.Client, source, group string) {
	at := fmt.Sprintf("kafka group %s (source %s)", group, source)
	ctx, cancel := c.Context()
	defer cancel()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		c.Add(probe.Fail, at, "cannot describe: %v", err)
		return
	}
	if len(resp.Groups) != 1 {
		c.Add(probe.Fail, at, "cannot describe: %d groups in the answer", len(resp.Groups))
		return
	}
	g := resp.Groups[0]
	err = kerr.ErrorForCode(g.ErrorCode)
	switch {
	case errors.Is(err, kerr.GroupIDNotFound), err == nil && (g.State == "Dead" || g.State == ""):
		c.Add(probe.OK, at, "no member yet; the first replica to start creates it")
	case err != nil:
		c.Add(probe.Fail, at, "%v", err)
	default:
		c.Add(probe.OK, at, "state %s, %d members", g.State, len(g.Members))
	}
}

// CheckTarget is doctor's check of a webhook source's Kafka target: the
// brokers answer the sink's own client (its TLS and SASL), and the topic
// exists.
func CheckTarget(c *probe.Checker, source string, o ProducerOptions) {
	check := fmt.Sprintf("kafka %s (webhook source %s)", strings.Join(o.Brokers, ","), source)
	o.NetworkTimeout, o.ClientID = c.Timeout, "dedupe-proxy-doctor"
	p, err := NewProducer(o)
	if err != nil {
		c.Add(probe.Fail, check, "%v", err)
		return
	}
	defer p.Close()
	checkTopics(c, p.metadata, check, source, []string{o.Topic}, "")
}
