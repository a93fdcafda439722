package doctor

import (
	"fmt"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redisq"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// redisSource checks a Redis source: its queue (or stream) key holds the
// right type, the dead-letter key too, and what the replicas hold; it
// only reads.
func (c *checker) redisSource(s config.Source, consumer string) {
	o := s.RedisOptions(consumer)
	if s.Redis.Mode == "stream" {
		c.redisStream(s, o)
		return
	}
	check := fmt.Sprintf("redis queue %s (source %s)", o.Queue, s.Name)
	src, err := redisq.New(o)
	if err != nil {
		c.add(Fail, check, "%v", err)
		return
	}
	defer src.Close()
	ctx, cancel := c.context()
	defer cancel()
	st, err := src.Inspect(ctx)
	if err != nil {
		c.add(Fail, check, "not reachable: %v", err)
		return
	}
	switch st.QueueType {
	case "list":
		c.add(OK, check, "a list: %d waiting; %d replicas registered, %d alive, %d messages reserved", st.Queued, st.Replicas, st.Alive, st.Reserved)
	case "none":
		c.add(OK, check, "no such key yet (created by the first RPUSH); %d replicas registered, %d alive", st.Replicas, st.Alive)
	default:
		c.add(Fail, check, "holds a %s, not a list: the proxy would consume nothing (WRONGTYPE) until it is moved away", st.QueueType)
	}
	if st.Alive < st.Replicas {
		c.add(Warn, check, "%d registered replicas have no heartbeat: a live proxy gives their processing lists back to the queue at its next heartbeat", st.Replicas-st.Alive)
	}
	if st.BabelQueue > 0 && !s.Redis.TakeBabelQueueProcessing {
		c.add(Warn, check, "%d elements sit in BabelQueue's shared %s:processing list, which the proxy leaves alone; once BabelQueue's workers are stopped, set take_babelqueue_processing: true to give them back to the queue", st.BabelQueue, o.Queue)
	}
	c.redisDeadLetter(s, st.DeadType, st.Dead, "list")
}

func (c *checker) redisStream(s config.Source, o redisq.Options) {
	check := fmt.Sprintf("redis stream %s (source %s)", o.Stream, s.Name)
	src, err := redisq.NewStream(o)
	if err != nil {
		c.add(Fail, check, "%v", err)
		return
	}
	defer src.Close()
	ctx, cancel := c.context()
	defer cancel()
	st, err := src.Inspect(ctx)
	if err != nil {
		c.add(Fail, check, "not reachable: %v", err)
		return
	}
	switch {
	case st.StreamType == "none":
		c.add(OK, check, "no such key yet: the proxy creates the stream and its group %q", o.Group)
	case st.StreamType != "stream":
		c.add(Fail, check, "holds a %s, not a stream: the proxy cannot create its group", st.StreamType)
	case !st.Group:
		c.add(OK, check, "a stream of %d entries; group %q does not exist yet: the proxy creates it at the start of the stream, so every entry in it is delivered", st.Length, o.Group)
	default:
		c.add(OK, check, "a stream of %d entries; group %q: %d consumers, %d pending, %d not yet delivered", st.Length, o.Group, st.Consumers, st.Pending, st.Lag)
	}
	c.redisDeadLetter(s, st.DeadType, st.Dead, "stream")
}

func (c *checker) redisDeadLetter(s config.Source, typ string, n int64, want string) {
	check := fmt.Sprintf("redis dead letters (source %s)", s.Name)
	switch {
	case s.Redis.DeadLetter == "" && want == "list":
		c.add(OK, check, "none: a message that fails for good is requeued, not dead-lettered")
	case s.Redis.DeadLetter == "":
		c.add(OK, check, "none: a message that fails for good stays pending and is delivered again")
	case typ == want:
		c.add(OK, check, "%s %s holds %d", want, s.Redis.DeadLetter, n)
	case typ == "none":
		c.add(OK, check, "%s %s does not exist yet (created by the first dead letter)", want, s.Redis.DeadLetter)
	default:
		c.add(Fail, check, "%s holds a %s, not a %s: dead letters would fail and their messages be requeued", s.Redis.DeadLetter, typ, want)
	}
}
