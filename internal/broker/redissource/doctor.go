package redissource

import (
	"fmt"

	"github.com/dedupe-proxy/dedupe-proxy/internal/probe"
)

// Check is doctor's check of a Redis source: its queue (or stream) key holds the
// right type, the dead-letter key too, and what the replicas hold; it
// only reads.
func Check(c *probe.Checker, o Options) {
	if o.Mode == ModeStream {
		checkStream(c, o)
		return
	}
	check := fmt.Sprintf("redis queue %s (source %s)", o.Queue, o.Name)
	src, err := New(o)
	if err != nil {
		c.Add(probe.Fail, check, "%v", err)
		return
	}
	defer src.Close()
	ctx, cancel := c.Context()
	defer cancel()
	st, err := src.Inspect(ctx)
	if err != nil {
		c.Add(probe.Fail, check, "not reachable: %v", err)
		return
	}
	switch st.QueueType {
	case "list":
		c.Add(probe.OK, check, "a list: %d waiting; %d replicas registered, %d alive, %d messages reserved", st.Queued, st.Replicas, st.Alive, st.Reserved)
	case "none":
		c.Add(probe.OK, check, "no such key yet (created by the first RPUSH); %d replicas registered, %d alive", st.Replicas, st.Alive)
	default:
		c.Add(probe.Fail, check, "holds a %s, not a list: the proxy would consume nothing (WRONGTYPE) until it is moved away", st.QueueType)
	}
	if st.Alive < st.Replicas {
		c.Add(probe.Warn, check, "%d registered replicas have no heartbeat: a live proxy gives their processing lists back to the queue at its next heartbeat", st.Replicas-st.Alive)
	}
	if st.BabelQueue > 0 && !o.TakeBabelQueueProcessing {
		c.Add(probe.Warn, check, "%d elements sit in BabelQueue's shared %s:processing list, which the proxy leaves alone; once BabelQueue's workers are stopped, set take_babelqueue_processing: true to give them back to the queue", st.BabelQueue, o.Queue)
	}
	checkDeadLetter(c, o, st.DeadType, st.Dead, "list")
}

func checkStream(c *probe.Checker, o Options) {
	check := fmt.Sprintf("redis stream %s (source %s)", o.Stream, o.Name)
	src, err := NewStream(o)
	if err != nil {
		c.Add(probe.Fail, check, "%v", err)
		return
	}
	defer src.Close()
	ctx, cancel := c.Context()
	defer cancel()
	st, err := src.Inspect(ctx)
	if err != nil {
		c.Add(probe.Fail, check, "not reachable: %v", err)
		return
	}
	switch {
	case st.StreamType == "none":
		c.Add(probe.OK, check, "no such key yet: the proxy creates the stream and its group %q", o.Group)
	case st.StreamType != "stream":
		c.Add(probe.Fail, check, "holds a %s, not a stream: the proxy cannot create its group", st.StreamType)
	case !st.Group:
		c.Add(probe.OK, check, "a stream of %d entries; group %q does not exist yet: the proxy creates it at the start of the stream, so every entry in it is delivered", st.Length, o.Group)
	case !st.LagKnown:
		c.Add(probe.OK, check, "a stream of %d entries; group %q: %d consumers, %d pending, an unknown number not yet delivered (Redis gives no lag: entries after the group's position were deleted, or Redis is older than 7.0)", st.Length, o.Group, st.Consumers, st.Pending)
	default:
		c.Add(probe.OK, check, "a stream of %d entries; group %q: %d consumers, %d pending, %d not yet delivered", st.Length, o.Group, st.Consumers, st.Pending, st.Lag)
	}
	checkDeadLetter(c, o, st.DeadType, st.Dead, "stream")
}

func checkDeadLetter(c *probe.Checker, o Options, typ string, n int64, want string) {
	check := fmt.Sprintf("redis dead letters (source %s)", o.Name)
	switch {
	case o.DeadLetter == "" && want == "list":
		c.Add(probe.OK, check, "none: a message that fails for good is requeued, not dead-lettered")
	case o.DeadLetter == "":
		c.Add(probe.OK, check, "none: a message that fails for good stays pending and is delivered again")
	case typ == want:
		c.Add(probe.OK, check, "%s %s holds %d", want, o.DeadLetter, n)
	case typ == "none":
		c.Add(probe.OK, check, "%s %s does not exist yet (created by the first dead letter)", want, o.DeadLetter)
	default:
		c.Add(probe.Fail, check, "%s holds a %s, not a %s: dead letters would fail and their messages be requeued", o.DeadLetter, typ, want)
	}
}
