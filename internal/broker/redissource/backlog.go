package redissource

import (
	"context"
	"math"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// backlog sets the gauges mode list sets from LLEN, from what the group
// says: Queued is the group's lag (entries not yet delivered to it),
// Reserved the entries pending for this replica's consumer, so both
// modes add up the same way across replicas (one lag, a sum of what each
// holds). One transaction reads both, so no read or ack of another
// replica lands between them. A failure only leaves them stale, as in
// mode list: the renewal loop is what watches the connection.
func (s *StreamSource) backlog(ctx context.Context) {
	m := s.o.Metrics
	if m == nil || m.Queued == nil {
		return
	}
	var groups *redis.Cmd
	var pend *redis.XPendingCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		// Raw: go-redis reads a lag field that is absent (before Redis
		// 7.0) as 0, which would be a made-up number.
		groups = p.Do(ctx, "XINFO", "GROUPS", s.o.Stream)
		pend = p.XPending(ctx, s.o.Stream, s.o.Group)
		return nil
	})
	if err != nil {
		s.log.Debug("redis stream: reading the backlog", "err", err)
		return
	}
	g, ok := findGroup(groups.Val(), s.o.Group)
	if !ok {
		// Deleted under us: the fetcher sees NOGROUP and the next session
		// creates it again; until then the gauges say what they said.
		return
	}
	lag, known := g.lag, g.lagKnown
	if !known && g.hasLag {
		if lag, known, err = s.lagFallback(ctx); err != nil {
			s.log.Debug("redis stream: reading the backlog", "err", err)
			return
		}
	}
	if known {
		m.Queued.Set(float64(lag))
	} else {
		m.Queued.Set(math.NaN())
	}
	m.Reserved.Set(float64(pend.Val().Consumers[s.o.Replica]))
}

// lagFallback counts the entries after the group's position when Redis
// could not (XINFO's lag is nil once an entry after it was deleted), in
// the one case that costs no scan: a group behind the stream's first
// entry is owed every entry the stream holds. The position, the first
// entry and the length are read in one transaction, so they describe
// one moment. Otherwise the lag is unknown; an error is a read that
// failed, not an unknown lag.
func (s *StreamSource) lagFallback(ctx context.Context) (int64, bool, error) {
	var groups *redis.Cmd
	var first *redis.XMessageSliceCmd
	var n *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		groups = p.Do(ctx, "XINFO", "GROUPS", s.o.Stream)
		first = p.XRangeN(ctx, s.o.Stream, "-", "+", 1)
		n = p.XLen(ctx, s.o.Stream)
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	g, ok := findGroup(groups.Val(), s.o.Group)
	if !ok {
		return 0, false, nil
	}
	if g.lagKnown {
		return g.lag, true, nil
	}
	last, ok := parseID(g.lastID)
	if !ok || len(first.Val()) == 0 {
		return 0, false, nil
	}
	f, ok := parseID(first.Val()[0].ID)
	if !ok || !f.after(last) {
		return 0, false, nil
	}
	return n.Val(), true, nil
}

// groupInfo is what XINFO GROUPS says of one group. hasLag is false
// before Redis 7.0, which has no lag field; lagKnown is false when the
// field is nil (Redis cannot compute it).
type groupInfo struct {
	consumers, pending int64
	lastID             string
	lag                int64
	hasLag             bool
	lagKnown           bool
}

// findGroup reads group's record from an XINFO GROUPS reply, a list of
// maps (RESP3) or of flat field, value lists (RESP2).
func findGroup(reply any, group string) (groupInfo, bool) {
	list, _ := reply.([]any)
	for _, r := range list {
		fields := map[string]any{}
		switch r := r.(type) {
		case map[any]any:
			for k, v := range r {
				if ks, ok := k.(string); ok {
					fields[ks] = v
				}
			}
		case []any:
			for i := 0; i+1 < len(r); i += 2 {
				if ks, ok := r[i].(string); ok {
					fields[ks] = r[i+1]
				}
			}
		}
		if name, _ := fields["name"].(string); name != group {
			continue
		}
		var g groupInfo
		g.consumers, _ = fields["consumers"].(int64)
		g.pending, _ = fields["pending"].(int64)
		g.lastID, _ = fields["last-delivered-id"].(string)
		v, has := fields["lag"]
		g.hasLag = has
		if n, ok := v.(int64); ok {
			g.lag, g.lagKnown = n, true
		}
		return g, true
	}
	return groupInfo{}, false
}

// streamID is a stream entry ID, ms-seq.
type streamID struct{ ms, seq uint64 }

func (a streamID) after(b streamID) bool {
	return a.ms > b.ms || (a.ms == b.ms && a.seq > b.seq)
}

// parseID reads a stream entry ID, ms-seq.
func parseID(s string) (streamID, bool) {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok {
		return streamID{}, false
	}
	a, err1 := strconv.ParseUint(ms, 10, 64)
	b, err2 := strconv.ParseUint(seq, 10, 64)
	return streamID{a, b}, err1 == nil && err2 == nil
}
