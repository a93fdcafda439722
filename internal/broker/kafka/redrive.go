package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// RedriveGroup is the consumer group whose committed offsets on the
// dead-letter topic say how far the redrives of a source with group
// got. Nothing else uses it: the source's own group never reads the
// dead-letter topic.
func RedriveGroup(group string) string { return group + ".redrive" }

// redriveIdle is how long Redrive waits for the next dead letter it
// knows is there before it gives up.
const redriveIdle = 15 * time.Second

// Redriver moves the dead letters of a Kafka source from its
// dead-letter topic back to the topics they came from: it reads the
// dead-letter topic from RedriveGroup's committed offsets up to the
// end offsets at its start, produces each record to its original topic
// and partition (acks=all), and only then commits past it. Records of
// another source sharing the dead-letter topic are committed past and
// left for that source's redrive.
type Redriver struct {
	o   Options
	sec []kgo.Opt
}

var _ broker.Redriver = (*Redriver)(nil)

// NewRedriver returns a Redriver for the source o; it connects in
// Redrive. It fails on options that can never work, as New does.
func NewRedriver(o Options) (*Redriver, error) {
	if o.DeadLetterTopic == "" {
		return nil, broker.ErrNoDeadLetter
	}
	if len(o.Brokers) == 0 || len(o.Topics) == 0 || o.Group == "" {
		return nil, errors.New("kafka: brokers, topics and group must be set")
	}
	if o.ClientID == "" {
		o.ClientID = "dedupe-proxy-redrive"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	defaultDuration(&o.NetworkTimeout, 5*time.Second)
	defaultDuration(&o.RetryBackoff, 500*time.Millisecond)
	defaultDuration(&o.RetryBackoffMax, 5*time.Second)
	defaultDuration(&o.DeadLetterTimeout, 10*time.Second)
	sec, err := SecurityOpts(o.SASL, o.TLS)
	if err != nil {
		return nil, err
	}
	return &Redriver{o: o, sec: sec}, nil
}

// Close implements broker.Redriver: Redrive closes what it opened.
func (r *Redriver) Close() error { return nil }

// Redrive implements broker.Redriver.
func (r *Redriver) Redrive(ctx context.Context, o broker.RedriveOptions) (res broker.RedriveResult, err error) {
	dlt, group := r.o.DeadLetterTopic, RedriveGroup(r.o.Group)
	opts := append(clientOpts(r.o.Brokers, r.o.ClientID, r.o.NetworkTimeout, r.o.RetryBackoff, r.o.RetryBackoffMax, r.sec, r.o.Logger),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(max(r.o.DeadLetterTimeout, time.Second)),
		// Each record goes back to the partition it was read from.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return res, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()

	topics, err := r.metadata(ctx, cl, append([]string{dlt}, r.o.Topics...))
	if err != nil {
		return res, err
	}
	n := topics[dlt].partitions
	committed, err := r.committed(ctx, cl, group, dlt, n)
	if err != nil {
		return res, err
	}
	starts, err := r.listOffsets(ctx, cl, dlt, n, -2)
	if err != nil {
		return res, err
	}
	ends, err := r.listOffsets(ctx, cl, dlt, n, -1)
	if err != nil {
		return res, err
	}
	next := map[int32]int64{}
	consume := map[int32]kgo.Offset{}
	for p := range n {
		next[p] = max(committed[p], starts[p])
		if next[p] < ends[p] {
			consume[p] = kgo.NewOffset().At(next[p])
		}
	}
	if len(consume) == 0 {
		return res, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{dlt: consume})

	for len(consume) > 0 {
		if o.Done(res.Moved) {
			res.More = true
			return res, nil
		}
		pollCtx, cancel := context.WithTimeout(ctx, redriveIdle)
		fs := cl.PollRecords(pollCtx, 256)
		cancel()
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		var recs []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) { recs = append(recs, rec) })
		if err := fetchError(fs); err != nil && len(recs) == 0 {
			if errors.Is(err, context.DeadlineExceeded) {
				return res, fmt.Errorf("no dead letter came from topic %q for %s although partitions %v hold more: the brokers do not answer, or the rest is not readable (read_committed)", dlt, redriveIdle, partitionList(consume))
			}
			return res, fmt.Errorf("read dead-letter topic %q: %w", dlt, err)
		}
		done := map[int32]int64{}
		var stop error
		for _, rec := range recs {
			p := rec.Partition
			if _, ok := consume[p]; !ok || rec.Offset >= ends[p] {
				continue
			}
			if o.Done(res.Moved) {
				res.More = true
				break
			}
			if stop = r.one(ctx, cl, o, rec, topics, &res); stop != nil {
				break
			}
			done[p] = rec.Offset + 1
			if rec.Offset+1 >= ends[p] {
				delete(consume, p)
			}
		}
		if !o.DryRun && len(done) > 0 {
			if err := r.commitOffsets(ctx, cl, group, dlt, topics[dlt].id, done); err != nil {
				return res, fmt.Errorf("the dead letters are back in their topics, but committing group %s past them failed (a second run moves them again, and the seen-set recognises them): %w", group, err)
			}
		}
		if stop != nil || res.More {
			return res, stop
		}
	}
	return res, nil
}

// one moves (or, in a dry run, lists) one dead letter.
func (r *Redriver) one(ctx context.Context, cl *kgo.Client, o broker.RedriveOptions, rec *kgo.Record, topics map[string]topicInfo, res *broker.RedriveResult) error {
	from := fmt.Sprintf("topic %s[%d]@%d", rec.Topic, rec.Partition, rec.Offset)
	if src, ok := lastHeader(rec.Headers, broker.HeaderSource); ok && src != r.o.Name {
		res.Skipped++
		return nil
	}
	dest, ok := lastHeader(rec.Headers, broker.HeaderOriginalTopic)
	if !ok && len(r.o.Topics) == 1 {
		dest = r.o.Topics[0]
	}
	if !slices.Contains(r.o.Topics, dest) {
		return fmt.Errorf("dead letter %s came from topic %q, which is not one of the source's topics %v: not moved, and the redrive stops there", from, dest, r.o.Topics)
	}
	n := topics[dest].partitions
	out := &kgo.Record{Topic: dest, Key: rec.Key, Value: rec.Value}
	for _, h := range rec.Headers {
		if !broker.IsDeadLetterHeader(strings.ToLower(h.Key)) {
			out.Headers = append(out.Headers, h)
		}
	}
	out.Partition = -1
	if v, ok := lastHeader(rec.Headers, broker.HeaderOriginalPart); ok {
		if p, err := strconv.Atoi(v); err == nil && p >= 0 && p < int(n) {
			out.Partition = int32(p)
		}
	}
	if out.Partition < 0 {
		// The partition the client's default partitioner picks for the
		// key, as a producer would.
		out.Partition = int32(kgo.StickyKeyPartitioner(nil).ForTopic(dest).Partition(out, int(n)))
	}
	headers, contentType := recordHeaders(out.Headers)
	msg := broker.Message{Body: out.Value, ContentType: contentType, Headers: headers, RecordKey: out.Key,
		Source: r.o.Name, Kind: "kafka", Topic: dest, Partition: int(out.Partition), Offset: -1}
	rd := broker.Redriven{Message: &msg, From: from, To: fmt.Sprintf("topic %s[%d]", dest, out.Partition)}
	if err := o.Run(ctx, rd, func() error {
		if err := produceSync(ctx, cl, r.o.DeadLetterTimeout, out); err != nil {
			return fmt.Errorf("produce to topic %q: %w", dest, err)
		}
		return nil
	}); err != nil {
		return err
	}
	res.Moved++
	return nil
}

func lastHeader(hs []kgo.RecordHeader, key string) (string, bool) {
	v, ok := "", false
	for _, h := range hs {
		if strings.EqualFold(h.Key, key) {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}

func fetchError(fs kgo.Fetches) error {
	var err error
	fs.EachError(func(_ string, _ int32, e error) {
		if err == nil {
			err = e
		}
	})
	return err
}

func partitionList(m map[int32]kgo.Offset) []int32 {
	out := make([]int32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

type topicInfo struct {
	id         [16]byte
	partitions int32
}

// requestTimeout bounds one request of a redrive; a client retries
// within it while the brokers do not answer.
func (r *Redriver) requestTimeout() time.Duration { return 3 * r.o.NetworkTimeout }

// TopicMetadata asks the brokers about topics, never creating one (a
// broker with auto.create.topics.enable would otherwise make a mistyped
// name real): one way for the proxy, doctor and redrive to look.
func TopicMetadata(ctx context.Context, cl *kgo.Client, topics []string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	return req.RequestWith(ctx, cl)
}

// metadata looks the topics up, never creating them.
func (r *Redriver) metadata(ctx context.Context, cl *kgo.Client, topics []string) (map[string]topicInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, r.requestTimeout())
	defer cancel()
	resp, err := TopicMetadata(ctx, cl, topics)
	if err != nil {
		return nil, fmt.Errorf("kafka brokers %s: not reachable: %w", strings.Join(r.o.Brokers, ","), err)
	}
	out := map[string]topicInfo{}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("topic %q: %w", *t.Topic, err)
		}
		out[*t.Topic] = topicInfo{id: t.TopicID, partitions: int32(len(t.Partitions))}
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			return nil, fmt.Errorf("topic %q: not in the brokers' answer", t)
		}
	}
	return out, nil
}

// committed is group's committed offset of each partition, -1 for none.
func (r *Redriver) committed(ctx context.Context, cl *kgo.Client, group, topic string, n int32) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.requestTimeout())
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range n {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("read the offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	for p := range n {
		out[p] = -1
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) {
			// The first redrive: nothing committed yet.
			return out, nil
		}
		return nil, fmt.Errorf("read the offsets of group %s: %w", group, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("read the offsets of group %s on %s[%d]: %w", group, topic, p.Partition, err)
			}
			if t.Topic == topic {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

// listOffsets asks for each partition's start (ts -2) or last stable
// (ts -1, read_committed) offset.
func (r *Redriver) listOffsets(ctx context.Context, cl *kgo.Client, topic string, n int32, ts int64) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.requestTimeout())
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range n {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = ts
		rp.CurrentLeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("list the offsets of topic %q: %w", topic, err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("list the offsets of %s[%d]: %w", topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	if len(out) != int(n) {
		return nil, fmt.Errorf("list the offsets of topic %q: %d of %d partitions in the answer", topic, len(out), n)
	}
	return out, nil
}

// commitOffsets commits for group, which has no members: the redrive
// reads its partitions directly, as an operator's offset reset does.
// It runs even when ctx was cancelled after the produce: what is back
// in its topic should not be moved a second time.
func (r *Redriver) commitOffsets(ctx context.Context, cl *kgo.Client, group, topic string, id [16]byte, offsets map[int32]int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.requestTimeout())
	defer cancel()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = group
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	// OffsetCommit v10 names the topic by its id only.
	rt.Topic, rt.TopicID = topic, id
	for p, off := range offsets {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition = p
		rp.Offset = off
		rp.LeaderEpoch = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("%s[%d]: %w", topic, p.Partition, err)
			}
		}
	}
	return nil
}
