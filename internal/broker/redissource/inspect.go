package redissource

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ListState is what an operator (dedupe-proxy doctor) wants to know of a
// list queue, read without changing anything.
type ListState struct {
	// QueueType and DeadType are Redis' TYPE of the keys ("list", "none"
	// before the first push, anything else is wrong).
	QueueType string
	Queued    int64
	DeadType  string
	Dead      int64
	// Replicas are registered replicas, Alive those whose heartbeat
	// lives, Reserved what all their processing lists hold.
	Replicas, Alive int
	Reserved        int64
	// BabelQueue is the length of BabelQueue's shared processing list.
	BabelQueue int64
}

// Inspect reads the queue's state.
func (s *Source) Inspect(ctx context.Context) (ListState, error) {
	var st ListState
	var err error
	if st.QueueType, err = s.rdb.Type(ctx, s.k.queue).Result(); err != nil {
		return st, err
	}
	if st.QueueType == "list" {
		st.Queued = s.rdb.LLen(ctx, s.k.queue).Val()
	}
	if s.k.dead != "" {
		if st.DeadType, err = s.rdb.Type(ctx, s.k.dead).Result(); err != nil {
			return st, err
		}
		if st.DeadType == "list" {
			st.Dead = s.rdb.LLen(ctx, s.k.dead).Val()
		}
	}
	ids, err := s.rdb.SMembers(ctx, s.k.replicas).Result()
	if err != nil {
		return st, err
	}
	st.Replicas = len(ids)
	for _, id := range ids {
		if s.rdb.Exists(ctx, s.k.heartbeat(id)).Val() == 1 {
			st.Alive++
		}
		st.Reserved += s.rdb.LLen(ctx, s.k.processing(id)).Val()
	}
	n, err := s.rdb.LLen(ctx, s.k.babelqueue).Result()
	if err != nil && !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return st, err
	}
	st.BabelQueue = n
	return st, nil
}

// StreamState is what an operator wants to know of a stream source.
type StreamState struct {
	StreamType string
	Length     int64
	// Group is false when the consumer group does not exist yet (the
	// proxy creates it at the start of the stream).
	Group     bool
	Consumers int64
	Pending   int64
	// Lag is the entries not yet delivered to the group, as the backlog
	// gauge reads it; LagKnown is false when neither Redis nor a cheap
	// count can tell (see backlog).
	Lag      int64
	LagKnown bool
	DeadType string
	Dead     int64
}

// Inspect reads the stream's and the group's state.
func (s *StreamSource) Inspect(ctx context.Context) (StreamState, error) {
	var st StreamState
	var err error
	if st.StreamType, err = s.rdb.Type(ctx, s.o.Stream).Result(); err != nil {
		return st, err
	}
	if s.o.DeadLetter != "" {
		if st.DeadType, err = s.rdb.Type(ctx, s.o.DeadLetter).Result(); err != nil {
			return st, err
		}
		if st.DeadType == "stream" {
			st.Dead = s.rdb.XLen(ctx, s.o.DeadLetter).Val()
		}
	}
	if st.StreamType != "stream" {
		return st, nil
	}
	st.Length = s.rdb.XLen(ctx, s.o.Stream).Val()
	groups, err := s.rdb.Do(ctx, "XINFO", "GROUPS", s.o.Stream).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("XINFO GROUPS: %w", err)
	}
	g, ok := findGroup(groups, s.o.Group)
	if !ok {
		return st, nil
	}
	st.Group, st.Consumers, st.Pending = true, g.consumers, g.pending
	st.Lag, st.LagKnown = g.lag, g.lagKnown
	if !g.lagKnown && g.hasLag {
		if st.Lag, st.LagKnown, err = s.lagFallback(ctx); err != nil {
			return st, err
		}
	}
	return st, nil
}
