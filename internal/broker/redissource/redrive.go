package redissource

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
)

// ListRedriver moves the dead letters of a list source from its
// dead-letter list back to the tail of its queue, each with one script
// (the list and the queue share a Cluster slot), and drops their reason
// records. The element is moved as it is: a list element has no
// metadata of its own, its reasons live beside it.
type ListRedriver struct {
	o   Options
	k   keys
	rdb redis.UniversalClient
}

var _ broker.Redriver = (*ListRedriver)(nil)

// NewListRedriver returns a ListRedriver for the list source o.
func NewListRedriver(o Options) (*ListRedriver, error) {
	if o.DeadLetter == "" {
		return nil, broker.ErrNoDeadLetter
	}
	if o.Queue == "" {
		return nil, errors.New("redis: queue must be set")
	}
	if HashTag(o.DeadLetter) != HashTag(o.Queue) {
		return nil, fmt.Errorf("redis: dead-letter list %q must carry the queue's hash tag {%s}", o.DeadLetter, HashTag(o.Queue))
	}
	rdb, err := newClient(o)
	if err != nil {
		return nil, err
	}
	return &ListRedriver{o: o, k: newKeys(o.Queue, o.DeadLetter), rdb: rdb}, nil
}

// Close implements broker.Redriver.
func (r *ListRedriver) Close() error { return r.rdb.Close() }

// Redrive implements broker.Redriver.
func (r *ListRedriver) Redrive(ctx context.Context, o broker.RedriveOptions) (res broker.RedriveResult, err error) {
	if err := checkType(ctx, r.rdb, r.k.queue, "list"); err != nil {
		return res, err
	}
	n, err := r.rdb.LLen(ctx, r.k.dead).Result()
	if err != nil {
		return res, fmt.Errorf("redis dead-letter list %q: %w", r.k.dead, err)
	}
	from, to := "list "+r.k.dead, "list "+r.k.queue
	if o.DryRun {
		if o.Limit > 0 && int64(o.Limit) < n {
			n, res.More = int64(o.Limit), true
		}
		if n == 0 {
			return res, nil
		}
		elems, err := r.rdb.LRange(ctx, r.k.dead, 0, n-1).Result()
		if err != nil {
			return res, fmt.Errorf("redis dead-letter list %q: %w", r.k.dead, err)
		}
		for _, e := range elems {
			_ = o.Run(ctx, broker.Redriven{Message: r.message(e), From: from, To: to}, nil)
			res.Moved++
		}
		return res, nil
	}
	// Only the dead letters there at the start: one that fails again
	// meanwhile comes back behind them. A head that changed under the
	// script (another redrive) is looked at again, within the same bound.
	for i := int64(0); i < n; i++ {
		if o.Done(res.Moved) {
			res.More = true
			break
		}
		elem, err := r.rdb.LIndex(ctx, r.k.dead, 0).Result()
		if errors.Is(err, redis.Nil) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("redis dead-letter list %q: %w", r.k.dead, err)
		}
		moved := false
		err = o.Run(ctx, broker.Redriven{Message: r.message(elem), From: from, To: to}, func() error {
			v, err := redriveScript.Run(ctx, r.rdb, []string{r.k.dead, r.k.queue, r.k.reasons}, elem).Int64()
			if err != nil {
				return fmt.Errorf("redis move from %q to %q: %w", r.k.dead, r.k.queue, err)
			}
			if moved = v == 1; !moved {
				return errHeadMoved
			}
			return nil
		})
		if errors.Is(err, errHeadMoved) {
			continue
		}
		if err != nil {
			return res, err
		}
		res.Moved++
	}
	return res, nil
}

// errHeadMoved: the dead letter looked at was no longer the head of the
// list when the script ran; nothing moved.
var errHeadMoved = errors.New("the head of the dead-letter list changed")

func (r *ListRedriver) message(elem string) *broker.Message {
	return &broker.Message{Body: []byte(elem), Source: r.o.Name, Kind: Kind, Queue: r.o.Queue}
}

// StreamRedriver moves the dead letters of a stream source from its
// dead-letter stream back to its stream: XADD with the original fields
// (without the x-dedupe-* ones), then XDEL from the dead-letter stream.
// Entries of another source sharing the dead-letter stream stay.
type StreamRedriver struct {
	o   Options
	rdb redis.UniversalClient
}

var _ broker.Redriver = (*StreamRedriver)(nil)

// NewStreamRedriver returns a StreamRedriver for the stream source o.
func NewStreamRedriver(o Options) (*StreamRedriver, error) {
	if o.DeadLetter == "" {
		return nil, broker.ErrNoDeadLetter
	}
	if o.Stream == "" {
		return nil, errors.New("redis: stream must be set")
	}
	if o.BodyField == "" {
		o.BodyField = "body"
	}
	rdb, err := newClient(o)
	if err != nil {
		return nil, err
	}
	return &StreamRedriver{o: o, rdb: rdb}, nil
}

// Close implements broker.Redriver.
func (r *StreamRedriver) Close() error { return r.rdb.Close() }

// Redrive implements broker.Redriver.
func (r *StreamRedriver) Redrive(ctx context.Context, o broker.RedriveOptions) (res broker.RedriveResult, err error) {
	dead := r.o.DeadLetter
	if err := checkType(ctx, r.rdb, r.o.Stream, "stream"); err != nil {
		return res, err
	}
	last, err := r.rdb.XRevRangeN(ctx, dead, "+", "-", 1).Result()
	if err != nil {
		return res, fmt.Errorf("redis dead-letter stream %q: %w", dead, err)
	}
	if len(last) == 0 {
		return res, nil
	}
	// Only the entries there at the start, up to the last one's id.
	end, start := last[0].ID, "-"
	for {
		batch, err := r.rdb.XRangeN(ctx, dead, start, end, 100).Result()
		if err != nil {
			return res, fmt.Errorf("redis dead-letter stream %q: %w", dead, err)
		}
		if len(batch) == 0 {
			return res, nil
		}
		for _, e := range batch {
			if o.Done(res.Moved) {
				res.More = true
				return res, nil
			}
			if src, ok := e.Values[broker.HeaderSource].(string); ok && src != r.o.Name {
				res.Skipped++
				continue
			}
			fields := map[string]any{}
			for k, v := range e.Values {
				if !strings.HasPrefix(k, "x-dedupe-") {
					fields[k] = v
				}
			}
			m := streamMessage(r.o, fields)
			rd := broker.Redriven{Message: &m, From: fmt.Sprintf("stream %s@%s", dead, e.ID), To: "stream " + r.o.Stream}
			err := o.Run(ctx, rd, func() error {
				if err := r.rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.o.Stream, Values: fields}).Err(); err != nil {
					return fmt.Errorf("redis XADD to %q: %w", r.o.Stream, err)
				}
				if err := r.rdb.XDel(ctx, dead, e.ID).Err(); err != nil {
					return fmt.Errorf("the entry is back in stream %q, but XDEL of %s from %q failed (a second run adds it again, and the seen-set recognises it): %w", r.o.Stream, e.ID, dead, err)
				}
				return nil
			})
			if err != nil {
				return res, err
			}
			res.Moved++
		}
		start = "(" + batch[len(batch)-1].ID
	}
}

// checkType fails unless key holds want or nothing yet, and says so when
// Redis does not answer.
func checkType(ctx context.Context, rdb redis.UniversalClient, key, want string) error {
	t, err := rdb.Type(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if t != want && t != "none" {
		return fmt.Errorf("%w: %q is a %s, not a %s", ErrWrongType, key, t, want)
	}
	return nil
}
