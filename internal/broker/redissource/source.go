// Package redissource is the Redis source in BabelQueue's reliable-queue list
// pattern: producers RPUSH the envelope, byte for byte, and each replica
// reserves elements with BLMOVE into a processing list of its own, acks
// with LREM and keeps a heartbeat key alive. A live replica gives the
// processing list of one whose heartbeat expired back to the head of the
// queue, so a killed replica's messages are delivered again instead of
// sitting reserved forever (BabelQueue's Go runtime shares one
// "<queue>:processing" list and never recovers it).
package redissource

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/backoff"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/metrics"
	"github.com/dedupe-proxy/dedupe-proxy/internal/redisconn"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// Kind is Message.Kind of this source's deliveries.
const Kind = "redis"

// Options configure a Source (mode list, New) or a StreamSource (mode
// stream, NewStream).
type Options struct {
	// Name is the source's name, set by whoever builds the source.
	Name string `mapstructure:"-"`
	// Addrs are host:port of one server or of Cluster nodes (several
	// addresses make a Cluster client, as go-redis' UniversalClient
	// decides); URL, a redis:// or rediss:// URL, is the alternative.
	Addrs    []string `mapstructure:"addrs"`
	URL      string   `mapstructure:"url"`
	Username string   `mapstructure:"username"`
	Password string   `mapstructure:"password"`
	DB       int      `mapstructure:"db"`
	// TLS turns on TLS with the system's roots, TLS 1.2 at least.
	TLS bool `mapstructure:"tls"`
	// Mode is ModeList (New: a list, BabelQueue's reliable queue) or
	// ModeStream (NewStream: a stream through a consumer group).
	Mode string `mapstructure:"mode"`
	// Queue is the list producers RPUSH to (mode list).
	Queue string `mapstructure:"queue"`
	// Stream is the stream producers XADD to (mode stream, NewStream).
	Stream  string `mapstructure:"stream"`
	Workers int    `mapstructure:"workers"`
	// HeartbeatTTL is how long this replica's heartbeat lives; it is
	// renewed every third of it, and every renewal also looks for dead
	// replicas' processing lists. A dead replica's messages are back in
	// the queue within HeartbeatTTL plus one third of it.
	HeartbeatTTL time.Duration `mapstructure:"heartbeat_ttl"`
	// TakeBabelQueueProcessing gives the elements of BabelQueue's shared
	// "<queue>:processing" list back to the queue at every (re)connect:
	// for a queue whose BabelQueue workers are stopped, never while they
	// run (they are still working on those).
	TakeBabelQueueProcessing bool `mapstructure:"take_babelqueue_processing"`
	// An entry pending ClaimIdle with a consumer that stopped renewing it
	// is taken over (XAUTOCLAIM); one whose delivery count exceeds
	// MaxDeliveries is dead-lettered to the stream DeadLetter. BodyField
	// is the entry field that is the body.
	ClaimIdle     time.Duration `mapstructure:"claim_idle"`
	MaxDeliveries int           `mapstructure:"max_deliveries"`
	BodyField     string        `mapstructure:"body_field"`
	// DeadLetter is the dead-letter list (a stream in mode stream), ""
	// for none. A list must carry the queue's hash tag (see HashTag) so
	// one script can move an element there on Cluster; its reasons hash
	// is DeadLetter+":reasons".
	DeadLetter       string        `mapstructure:"dead_letter"`
	ReconnectInitial time.Duration `mapstructure:"reconnect_initial"`
	ReconnectMax     time.Duration `mapstructure:"reconnect_max"`
	// Group is the stream's consumer group: the proxy's consumer name, so
	// every replica of one consumer shares the entries and another
	// consumer reads them all.
	Group string `mapstructure:"-"`
	// Replica names this replica's processing list and heartbeat (its
	// consumer in mode stream); empty takes host name, pid and a random
	// suffix, so two processes never share one.
	Replica string                 `mapstructure:"-"`
	Logger  *slog.Logger           `mapstructure:"-"`
	Metrics *metrics.SourceMetrics `mapstructure:"-"`
}

// The modes of a Redis source.
const (
	ModeList   = "list"
	ModeStream = "stream"
)

// ErrNotReserved is returned by a settle when the element is no longer
// in this replica's processing list: another replica took the list back
// to the queue after this one's heartbeat lapsed, and the message will
// be delivered again (the seen-set recognises it).
var ErrNotReserved = errors.New("redis: the element is no longer reserved by this replica")

// ErrWrongType is reported by Ready when the queue (stream) key holds
// something other than a list (stream); nothing is consumed or changed
// until it is fixed.
var ErrWrongType = errors.New("redis: the queue key holds the wrong type")

// Source consumes one Redis list.
type Source struct {
	link
	o Options
	k keys
}

var _ broker.Source = (*Source)(nil)

// New returns a Source; it connects when Run is called.
func New(o Options) (*Source, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Workers < 1 {
		o.Workers = 1
	}
	if o.HeartbeatTTL <= 0 {
		o.HeartbeatTTL = 15 * time.Second
	}
	if o.ReconnectInitial <= 0 {
		o.ReconnectInitial = 500 * time.Millisecond
	}
	if o.ReconnectMax < o.ReconnectInitial {
		o.ReconnectMax = o.ReconnectInitial
	}
	if o.Replica == "" {
		host, _ := os.Hostname()
		o.Replica = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randHex(4))
	}
	if o.Queue == "" {
		return nil, errors.New("redis: queue must be set")
	}
	if o.DeadLetter != "" && HashTag(o.DeadLetter) != HashTag(o.Queue) {
		return nil, fmt.Errorf("redis: dead-letter list %q must carry the queue's hash tag {%s}", o.DeadLetter, HashTag(o.Queue))
	}
	rdb, err := newClient(o)
	if err != nil {
		return nil, err
	}
	s := &Source{o: o, k: newKeys(o.Queue, o.DeadLetter), link: newLink(rdb, fmt.Sprintf("redis queue %q", o.Queue))}
	s.log = o.Logger.With("source", o.Name, "queue", o.Queue, "replica", o.Replica)
	return s, nil
}

// newClient is the client of one source, list or stream.
func newClient(o Options) (redis.UniversalClient, error) {
	c, err := redisconn.New(redisconn.Conn{
		Addrs:    o.Addrs,
		URL:      o.URL,
		Username: o.Username,
		Password: o.Password,
		DB:       o.DB,
		TLS:      o.TLS,
		// A failed command must be seen: it ends the session, and the
		// processing list is given back on reconnect. A silent retry on
		// a new connection would hide a settle that never happened.
		MaxRetries:  -1,
		DialTimeout: 2 * time.Second,
		ReadTimeout: 3 * time.Second,
		// Every worker blocks one connection in BLMOVE; the heartbeat
		// another; settles and the scan need a few more.
		PoolSize: o.Workers + 8,
	})
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return c, nil
}

// Name implements broker.Source.
func (s *Source) Name() string { return s.o.Name }

// Requeues implements broker.Source: a requeued element goes back to the
// queue, where any replica may take it.
func (s *Source) Requeues() bool { return true }

// Replica is this replica's id (its processing list is
// "{<queue>}:processing:<replica>").
func (s *Source) Replica() string { return s.o.Replica }

// Run implements broker.Source.
func (s *Source) Run(ctx context.Context, h broker.Handler) error {
	return s.reconnect(ctx, backoff.Policy{Initial: s.o.ReconnectInitial, Max: s.o.ReconnectMax},
		supervise.Lines{Up: "redis consuming", Lost: "redis connection lost, reconnecting", Failing: "redis: cannot consume, retrying"},
		func(ctx context.Context, reconnect bool) (bool, error) { return s.session(ctx, h, reconnect) })
}

// session is one stretch of consuming between connection failures. It
// starts by giving this replica's own processing list back to the queue
// (what an earlier session left reserved there was never settled), and
// ends, on a failed command or on ctx, only after every worker returned.
func (s *Source) session(ctx context.Context, h broker.Handler, reconnect bool) (connected bool, err error) {
	// The commands of a session run under a context that stopping does
	// not cancel: a BLMOVE cut short could leave an element moved and
	// not handed out. Each waits at most a second (or a read timeout).
	bg := context.WithoutCancel(ctx)
	if err := s.rdb.Ping(bg).Err(); err != nil {
		return false, fmt.Errorf("ping: %w", err)
	}
	if err := s.beat(bg); err != nil {
		return false, fmt.Errorf("heartbeat: %w", err)
	}
	if _, err := s.giveBack(bg, s.o.Replica, true); err != nil {
		return false, fmt.Errorf("give back own processing list: %w", err)
	}
	if s.o.TakeBabelQueueProcessing {
		if err := s.takeBabelQueue(bg); err != nil {
			return false, fmt.Errorf("take %s: %w", s.k.babelqueue, err)
		}
	}
	ss := s.started(reconnect, s.o.Metrics, "workers", s.o.Workers, "heartbeat_ttl", s.o.HeartbeatTTL.String())

	// The heartbeat outlives the workers: a handler still finishing on
	// stop holds its element, and an expired heartbeat would let another
	// replica give it back meanwhile.
	stop, stopBeat := make(chan struct{}), make(chan struct{})
	var workers, beat sync.WaitGroup
	beat.Add(1)
	go func() { defer beat.Done(); s.heartbeat(bg, ss, stopBeat) }()
	s.consume(bg, ss, stop, h, &workers)
	defer func() { close(stopBeat); beat.Wait() }()
	select {
	case <-ctx.Done():
		close(stop)
		workers.Wait()
		// Deliveries a handler handed on (a busy key waiting in the
		// pipeline) are requeued by it, before the list is given back.
		if !ss.out.Wait(broker.SettleGrace) {
			s.log.Warn("redis: stopping with deliveries not settled; they go back with the processing list", "waited", broker.SettleGrace.String())
		}
		s.stopped(nil)
		// Every handler returned: what is still reserved was fetched and
		// never handed out, or not settled. Back to the head of the queue
		// now rather than after the heartbeat expired.
		if _, err := s.giveBack(bg, s.o.Replica, true); err != nil {
			s.log.Warn("redis: giving back the processing list on stop failed; another replica takes it after the heartbeat expires", "err", err)
		} else if err := s.forget(bg); err != nil {
			s.log.Debug("redis: removing the heartbeat", "err", err)
		}
		return true, nil
	case <-ss.failed:
	}
	err = ss.cause()
	s.stopped(err)
	close(ss.lost)
	close(stop)
	workers.Wait()
	return true, err
}

// session is what the deliveries of one session share.
type session struct {
	// out counts the deliveries handed out and not settled yet.
	out    broker.Unsettled
	lost   chan struct{} // closed once the session failed
	failed chan struct{}
	once   sync.Once
	err    error
}

func (ss *session) fail(err error) {
	ss.once.Do(func() { ss.err = err; close(ss.failed) })
}

func (ss *session) cause() error { return ss.err }

// beat renews the heartbeat and registers the replica, in one
// transaction (both keys are in the queue's slot).
func (s *Source) beat(ctx context.Context) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k.heartbeat(s.o.Replica), time.Now().UTC().Format(time.RFC3339Nano), s.o.HeartbeatTTL)
		p.SAdd(ctx, s.k.replicas, s.o.Replica)
		return nil
	})
	return err
}

// forget removes this replica's heartbeat and registration after a clean
// stop that gave its processing list back.
func (s *Source) forget(ctx context.Context) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SRem(ctx, s.k.replicas, s.o.Replica)
		p.Del(ctx, s.k.heartbeat(s.o.Replica), s.k.processing(s.o.Replica))
		return nil
	})
	return err
}

// heartbeat renews the heartbeat every third of its TTL, gives dead
// replicas' lists back, and in between blocks on a key nobody writes: a
// cut connection fails that command, and the session ends.
func (s *Source) heartbeat(ctx context.Context, ss *session, stop <-chan struct{}) {
	every := s.o.HeartbeatTTL / 3
	next := time.Now().Add(every)
	s.scan(ctx, ss)
	for {
		select {
		case <-stop:
			return
		default:
		}
		if !time.Now().Before(next) {
			next = time.Now().Add(every)
			if err := s.beat(ctx); err != nil {
				ss.fail(fmt.Errorf("heartbeat: %w", err))
				return
			}
			s.scan(ctx, ss)
			s.lengths(ctx)
		}
		err := s.rdb.BLPop(ctx, time.Second, s.k.session(s.o.Replica)).Err()
		if err != nil && !errors.Is(err, redis.Nil) {
			ss.fail(fmt.Errorf("connection check: %w", err))
			return
		}
	}
}

// lengths sets the queue and processing-length gauges; a failure only
// leaves them stale (the heartbeat is what watches the connection).
func (s *Source) lengths(ctx context.Context) {
	m := s.o.Metrics
	if m == nil || m.Queued == nil {
		return
	}
	var q, p *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		q = pl.LLen(ctx, s.k.queue)
		p = pl.LLen(ctx, s.k.processing(s.o.Replica))
		return nil
	})
	if err == nil {
		m.Queued.Set(float64(q.Val()))
		m.Reserved.Set(float64(p.Val()))
	}
}

// scan gives back the processing list of every registered replica whose
// heartbeat expired.
func (s *Source) scan(ctx context.Context, ss *session) {
	ids, err := s.rdb.SMembers(ctx, s.k.replicas).Result()
	if err != nil {
		if !isReply(err) {
			ss.fail(fmt.Errorf("list replicas: %w", err))
		}
		return
	}
	for _, id := range ids {
		if id == s.o.Replica {
			continue
		}
		n, err := s.giveBack(ctx, id, false)
		if err != nil {
			if !isReply(err) {
				ss.fail(fmt.Errorf("give back %s: %w", s.k.processing(id), err))
				return
			}
			s.log.Warn("redis: giving back a dead replica's processing list failed", "dead_replica", id, "err", err)
			continue
		}
		if n > 0 {
			s.log.Warn("redis: gave a dead replica's reserved messages back to the queue", "dead_replica", id, "messages", n)
		}
	}
}

// giveBack moves replica's processing list to the head of the queue: when
// its heartbeat expired, or always when it is this replica (force). It
// returns how many elements moved, -1 when the replica is alive.
func (s *Source) giveBack(ctx context.Context, replica string, force bool) (int64, error) {
	f := "0"
	if force {
		f = "1"
	}
	n, err := giveBackScript.Run(ctx, s.rdb,
		[]string{s.k.heartbeat(replica), s.k.processing(replica), s.k.queue, s.k.replicas, s.k.redelivered},
		replica, f).Int64()
	if err != nil {
		return 0, err
	}
	if n > 0 && s.o.Metrics != nil && s.o.Metrics.Reclaimed != nil {
		s.o.Metrics.Reclaimed.Add(float64(n))
	}
	return n, nil
}

// takeBabelQueue moves BabelQueue's shared processing list to the head of
// the queue. On Cluster the two lists may be in different slots, so it
// copies and then removes, element by element: a crash in between leaves
// a second copy (the seen-set's to recognise), never none.
func (s *Source) takeBabelQueue(ctx context.Context) error {
	n := 0
	for {
		v, err := s.rdb.LIndex(ctx, s.k.babelqueue, 0).Result()
		if errors.Is(err, redis.Nil) {
			break
		}
		if err != nil {
			return err
		}
		if err := s.rdb.LPush(ctx, s.k.queue, v).Err(); err != nil {
			return err
		}
		if err := s.rdb.LRem(ctx, s.k.babelqueue, 1, v).Err(); err != nil {
			return err
		}
		n++
	}
	if n > 0 {
		s.log.Warn("redis: took BabelQueue's processing list back to the queue", "list", s.k.babelqueue, "messages", n)
	}
	return nil
}

// reserved is one element reserved into this replica's processing list.
type reserved struct {
	elem        []byte
	redelivered bool
}

// maxReserve bounds one reservation: the script pushes its elements in
// one LPUSH, and Lua's unpack takes a few thousand values at most.
const maxReserve = 256

// consume starts the workers and the one goroutine that reserves for
// them: as many elements at once as there are workers waiting, and no
// more, so a dead replica's list given back to the head of the queue is
// what the next idle worker gets, as if each worker reserved for itself.
// wg counts them all.
func (s *Source) consume(ctx context.Context, ss *session, stop <-chan struct{}, h broker.Handler, wg *sync.WaitGroup) {
	l := &lineup{work: make(chan reserved), wake: make(chan struct{}, 1)}
	var workers sync.WaitGroup
	for range s.o.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l.idle.Add(1)
				select {
				case l.wake <- struct{}{}:
				default:
				}
				select {
				case r := <-l.work:
					ss.out.Add()
					h(&delivery{s: s, ss: ss, msg: broker.Message{
						Body:        r.elem,
						Source:      s.o.Name,
						Kind:        Kind,
						Queue:       s.o.Queue,
						Redelivered: r.redelivered,
						Received:    time.Now(),
					}})
				case <-stop:
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.fetch(ctx, ss, stop, l)
		workers.Wait()
	}()
}

// lineup is how the workers wait for the fetcher: idle counts the
// workers waiting on work (a worker counts itself in, the fetcher counts
// out each it hands an element to), wake tells the fetcher one came.
type lineup struct {
	work chan reserved
	idle atomic.Int32
	wake chan struct{}
}

// fetch reserves elements for the idle workers and hands them out until
// stop.
func (s *Source) fetch(ctx context.Context, ss *session, stop <-chan struct{}, l *lineup) {
	retry := backoff.New(backoff.Policy{Initial: s.o.ReconnectInitial, Max: s.o.ReconnectMax})
	proc := s.k.processing(s.o.Replica)
	for {
		n := int(min(l.idle.Load(), maxReserve))
		if n == 0 {
			select {
			case <-stop:
				return
			case <-l.wake:
				continue
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		rs, err := s.reserve(ctx, proc, n)
		if errors.Is(err, redis.Nil) {
			s.reading("redis: reserving again")
			continue
		}
		if err != nil {
			if !isReply(err) {
				ss.fail(fmt.Errorf("reserve: %w", err))
				return
			}
			if e := wrongType(err, s.k.queue, "list"); e != nil {
				err = e
			} else {
				err = fmt.Errorf("redis: reserve from %q: %w", s.k.queue, err)
			}
			if !s.refused(ctx, stop, retry, err, "redis: cannot reserve") {
				return
			}
			continue
		}
		retry.Reset()
		s.reading("redis: reserving again")
		for i, r := range rs {
			select {
			case l.work <- r:
				l.idle.Add(-1)
			case <-stop:
				// Reserved and never handed out: back to the head of the
				// queue unmarked, or with the processing list (after a
				// failed connection, by the next session).
				select {
				case <-ss.failed:
				default:
					s.unreserve(ctx, rs[i:])
				}
				return
			}
		}
	}
}

// reserve moves up to n elements into the processing list in one script
// when the queue has some, else waits up to a second for one (Redis'
// smallest whole timeout, which bounds how long stopping waits for an
// idle replica). redis.Nil when nothing came.
func (s *Source) reserve(ctx context.Context, proc string, n int) ([]reserved, error) {
	res, err := reserveScript.Run(ctx, s.rdb, []string{s.k.queue, proc, s.k.redelivered}, n).Slice()
	if err == nil && len(res) == 2 {
		vs, _ := res[0].([]any)
		marks, _ := res[1].([]any)
		rs := make([]reserved, len(vs))
		for i, v := range vs {
			e, _ := v.(string)
			rs[i].elem = []byte(e)
			if i < len(marks) {
				m, _ := marks[i].(int64)
				rs[i].redelivered = m == 1
			}
		}
		return rs, nil
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	v, err := s.rdb.BLMove(ctx, s.k.queue, proc, "LEFT", "LEFT", time.Second).Bytes()
	if err != nil {
		return nil, err
	}
	// The element is reserved here now and must be handed out: when the
	// mark cannot be read, it is taken as redelivered (the mark only
	// informs the app; a broken connection fails the settle after).
	marked, err := s.rdb.HExists(ctx, s.k.redelivered, digest(v)).Result()
	return []reserved{{elem: v, redelivered: marked || err != nil}}, nil
}

// unreserve moves elements reserved and never handed out back to the
// head of the queue, in their order, without a redelivery mark: they
// never reached the app. What it cannot move stays in the processing
// list, which the session's end gives back.
func (s *Source) unreserve(ctx context.Context, rs []reserved) {
	if len(rs) == 0 {
		return
	}
	args := make([]any, len(rs))
	for i, r := range rs {
		args[i] = r.elem
	}
	if err := unreserveScript.Run(ctx, s.rdb, []string{s.k.processing(s.o.Replica), s.k.queue}, args...).Err(); err != nil {
		s.log.Debug("redis: giving back elements read ahead", "elements", len(rs), "err", err)
	}
}

type delivery struct {
	s       *Source
	ss      *session
	msg     broker.Message
	settled atomic.Bool
	done    atomic.Bool // counted settled in ss.out
}

// counted counts the delivery settled once a settle held (a failed dead
// letter clears settled for the requeue that follows).
func (d *delivery) counted() {
	if d.settled.Load() {
		d.ss.out.Done(&d.done)
	}
}

func (d *delivery) Message() *broker.Message { return &d.msg }
func (d *delivery) Lost() <-chan struct{}    { return d.ss.lost }

func (d *delivery) Ack(ctx context.Context) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	if !d.msg.Redelivered {
		// Unmarked when reserved: no mark to remove, so a plain LREM
		// instead of the script. From the tail, where the oldest
		// reservations are.
		n, err := d.s.batch.DoInt(ctx, "LREM", d.s.k.processing(d.s.o.Replica), -1, d.msg.Body)
		return d.answer("ack", n, err)
	}
	return d.run(ctx, "ack", ackScript, []string{d.s.k.processing(d.s.o.Replica), d.s.k.redelivered}, d.msg.Body)
}

func (d *delivery) Requeue(ctx context.Context) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	return d.run(ctx, "requeue", requeueScript, []string{d.s.k.processing(d.s.o.Replica), d.s.k.queue, d.s.k.redelivered}, d.msg.Body)
}

func (d *delivery) DeadLetter(ctx context.Context, info broker.DeadLetterInfo) error {
	defer d.counted()
	if !d.settled.CompareAndSwap(false, true) {
		return broker.ErrAlreadySettled
	}
	if d.s.k.dead == "" {
		d.settled.Store(false)
		return broker.ErrNoDeadLetter
	}
	why, _ := json.Marshal(d.s.reasons(info))
	err := d.run(ctx, "dead-letter", deadLetterScript,
		[]string{d.s.k.processing(d.s.o.Replica), d.s.k.dead, d.s.k.reasons, d.s.k.redelivered}, d.msg.Body, why)
	if err != nil {
		// Settled nothing, as the contract says; if the script ran and
		// only its answer was lost, the requeue after it finds nothing
		// to move (ErrNotReserved) rather than a second copy.
		d.settled.Store(false)
	}
	return err
}

// run runs one settle script. A failed connection ends the session, so
// the element, still reserved, is given back on reconnect.
func (d *delivery) run(ctx context.Context, what string, sc *redis.Script, keys []string, args ...any) error {
	n, err := d.s.batch.Do(ctx, sc, keys, args...)
	return d.answer(what, n, err)
}

// answer is a settle's outcome from its reply: how many elements it took
// from the processing list.
func (d *delivery) answer(what string, n int64, err error) error {
	if err != nil {
		if !isReply(err) {
			d.ss.fail(fmt.Errorf("%s: %w", what, err))
		}
		return fmt.Errorf("redis %s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("redis %s: %w", what, ErrNotReserved)
	}
	return nil
}

// reasons is the dead letter's record in the reasons hash, under the
// element's digest: the same names as other sources' dead-letter
// headers, since a list element has no room for headers.
func (s *Source) reasons(info broker.DeadLetterInfo) map[string]string {
	m := map[string]string{}
	info.Headers(s.o.Name, []string{broker.HeaderOriginalQueue, s.o.Queue}, func(k string, v any) { m[k] = fmt.Sprint(v) })
	return m
}

// DeadLetterReason reads the reason record of a dead-lettered element
// (nil, nil when there is none).
func DeadLetterReason(ctx context.Context, rdb redis.Cmdable, deadList string, elem []byte) (map[string]string, error) {
	raw, err := rdb.HGet(ctx, deadList+":reasons", digest(elem)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// isReply: the server answered with an error (WRONGTYPE, NOSCRIPT,
// LOADING), as opposed to a connection that failed.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
