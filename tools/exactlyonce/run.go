package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// appStarter starts an app against databaseURL and returns its base URL.
type appStarter func(databaseURL string) (base string, stop func(), err error)

// result is what one run measured.
type result struct {
	name                  string
	published, unique     int
	kills, aimed          int
	killsInWindow         int
	windowKeys            int
	lost, once, more      int
	moreOutsideWindow     int // keys with 2+ rows that no kill caught in the window
	rows                  int64
	rowsPerKey            [][2]int64 // (rows, keys), from the database
	expectedCents, booked int64
	seconds               float64
	logs                  string
}

const (
	consumer = "exactly-once"
	source   = "orders"
	lease    = 3 * time.Second
)

// runOnce runs one app behind two replicas through the whole plan and
// counts its rows per key.
func runOnce(o options, name string, pl plan, start appStarter) (res result, err error) {
	res = result{name: name, published: o.messages, unique: len(pl.keys), expectedCents: pl.expectedCents()}
	begin := time.Now()
	ctx := context.Background()
	id := randHex(4)

	// The app's own schema, dropped at the end unless -keep.
	db, err := pgx.Connect(ctx, o.pg)
	if err != nil {
		return res, fmt.Errorf("PostgreSQL at %s is not reachable (%v); the demo needs it: see README, make demo-exactly-once", redactURL(o.pg), err)
	}
	defer db.Close(ctx)
	schema := "exactlyonce_" + id + "_" + name
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return res, fmt.Errorf("create schema: %w", err)
	}
	if !o.keep {
		defer func() { _, _ = db.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") }()
	}
	appBase, stopApp, err := start(withSearchPath(o.pg, schema))
	if err != nil {
		return res, fmt.Errorf("start the %s app: %w", name, err)
	}
	defer stopApp()

	conn, err := amqp.Dial(o.amqp)
	if err != nil {
		return res, fmt.Errorf("RabbitMQ at %s is not reachable (%v); the demo needs it: see README, make demo-exactly-once", redactURL(o.amqp), err)
	}
	defer conn.Close()
	queue := "dedupe-exactly-once-" + id
	if err := declare(conn, queue); err != nil {
		return res, err
	}
	defer func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			ch.Close()
		}
	}()

	rdb := redis.NewClient(&redis.Options{Addr: o.redis})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return res, fmt.Errorf("redis at %s is not reachable (%v); the demo needs it: see README, make demo-exactly-once", o.redis, err)
	}
	prefix := "dedupe-exactly-once:" + id + ":"
	defer func() {
		// The demo's keys only: the Redis may be shared.
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	}()

	dir, err := os.MkdirTemp("", "dedupe-exactly-once-"+name+"-")
	if err != nil {
		return res, err
	}
	res.logs = dir
	cfgPath := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf(`consumer: %s
shutdown_timeout: 5s
log: {level: warn, format: text}
app:
  url: %s
  timeout: 2s
seenset:
  ttl: 1h
  lease: %s
  redis:
    addrs: ["%s"]
    prefix: "%s"
delivery:
  max_attempts: 50
  backoff_initial: 50ms
  backoff_max: 1s
  busy_delay: 200ms
sources:
  - name: %s
    type: rabbitmq
    path: /orders
    rabbitmq:
      url: %s
      queue: %s
      prefetch: 64
      workers: 16
      reconnect_initial: 100ms
      reconnect_max: 1s
`, consumer, appBase, lease, o.redis, prefix, source, o.amqp, queue)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return res, err
	}

	// Each replica reaches the app through its own gate, which can kill it
	// right after the app's 2xx.
	var reps []*replica
	var gates []*gate
	defer func() {
		for _, r := range reps {
			r.kill()
		}
		for _, g := range gates {
			g.close()
		}
	}()
	for i := range 2 {
		r := &replica{n: i, bin: o.proxy, cfg: cfgPath, dir: dir}
		g, err := newGate(appBase, r.pid)
		if err != nil {
			return res, err
		}
		r.env = []string{"DEDUPE_PROXY_APP_URL=http://" + g.addr}
		reps, gates = append(reps, r), append(gates, g)
		if err := r.start(); err != nil {
			return res, err
		}
	}
	for _, r := range reps {
		if err := r.waitReady(30 * time.Second); err != nil {
			return res, err
		}
	}

	counts := func() (map[string]int, error) { return rowsPerKey(ctx, db, schema) }
	effectedAll := func() bool {
		c, err := counts()
		if err != nil {
			return false
		}
		for _, k := range pl.keys {
			if c[k] == 0 {
				return false
			}
		}
		return true
	}

	// Publish the first wave, paced, with the concurrent duplicates on a
	// second connection at the moment their originals go out.
	pubErr := make(chan error, 1)
	go func() { pubErr <- publishWave(o, queue, pl) }()

	// Kill a replica every o.killEvery, alternately aimed at the window
	// after a 2xx and at a random moment, restarting it at once.
	var chaosErr error
	pubDone := false
	window := map[string]bool{}
	for n := 0; ; n++ {
		select {
		case err := <-pubErr:
			if err != nil {
				return res, err
			}
			pubDone = true
		case <-time.After(o.killEvery):
		}
		if pubDone && res.kills >= o.minKills {
			break
		}
		// Each replica in turn; two aimed kills, then two at random.
		i := n % 2
		r, g := reps[i], gates[i]
		killedAt := time.Now()
		aimed := (n/2)%2 == 0
		if aimed {
			g.arm()
			select {
			case killedAt = <-g.killed:
				res.aimed++
			case <-time.After(2 * time.Second):
				// No 2xx through this replica meanwhile: kill it anyway.
				g.disarm()
				aimed = false
			}
		}
		r.kill()
		res.kills++
		// Keys whose effect the app committed and that the seen-set still
		// does not hold as done 300 ms after the kill (time enough for the
		// surviving replica to record its own) were in the window.
		time.Sleep(300 * time.Millisecond)
		keys, err := unrecorded(ctx, db, rdb, schema, prefix+consumer+":"+source+":", killedAt)
		if err != nil {
			return res, err
		}
		inWindow := 0
		for _, k := range keys {
			// A key still waiting for its lease counts at the kill that
			// caught it, not again at the next.
			if !window[k] {
				window[k] = true
				inWindow++
			}
		}
		if inWindow > 0 {
			res.killsInWindow++
			res.windowKeys += inWindow
		}
		fmt.Printf("    %-9s kill %2d: proxy %d SIGKILLed %-30s %d key(s) effected by the app and not recorded by the proxy\n",
			name, res.kills, i, map[bool]string{true: "right after the app's 2xx,", false: "at a random moment,"}[aimed], inWindow)
		if err := r.start(); err != nil {
			chaosErr = err
			break
		}
	}
	if chaosErr != nil {
		return res, chaosErr
	}
	if !pubDone {
		if err := <-pubErr; err != nil {
			return res, err
		}
	}
	if !waitUntil(3*time.Minute, effectedAll) {
		return res, fmt.Errorf("not every key reached the app within 3 minutes (logs in %s)", dir)
	}
	// Duplicates of messages processed long ago: the seen-set skips them.
	if err := publish(conn, queue, pl.later); err != nil {
		return res, err
	}
	if err := drain(conn, queue, reps); err != nil {
		return res, err
	}

	c, err := counts()
	if err != nil {
		return res, err
	}
	for _, k := range pl.keys {
		switch c[k] {
		case 0:
			res.lost++
		case 1:
			res.once++
		default:
			res.more++
			if !window[k] {
				res.moreOutsideWindow++
			}
		}
	}
	for k := range c {
		if _, ok := pl.amounts[k]; !ok {
			return res, fmt.Errorf("the database has rows for key %q, which no message carried", k)
		}
	}
	if err := db.QueryRow(ctx, "SELECT count(*), coalesce(sum(amount_cents), 0) FROM "+schema+".orders").Scan(&res.rows, new(int64)); err != nil {
		return res, err
	}
	if err := db.QueryRow(ctx, "SELECT coalesce(sum(total_cents), 0) FROM "+schema+".balances").Scan(&res.booked); err != nil {
		return res, err
	}
	rows, err := db.Query(ctx, "SELECT n, count(*) FROM (SELECT count(*) AS n FROM "+schema+".orders GROUP BY idempotency_key) t GROUP BY n ORDER BY n")
	if err != nil {
		return res, err
	}
	for rows.Next() {
		var n, keys int64
		if err := rows.Scan(&n, &keys); err != nil {
			return res, err
		}
		res.rowsPerKey = append(res.rowsPerKey, [2]int64{n, keys})
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	res.seconds = time.Since(begin).Seconds()
	if !o.keep {
		_ = os.RemoveAll(dir)
		res.logs = ""
	}
	return res, nil
}

// publishWave publishes pl.main in chunks over o.publishFor, each
// chunk's concurrent duplicates at the same time on another connection.
func publishWave(o options, queue string, pl plan) error {
	c1, err := amqp.Dial(o.amqp)
	if err != nil {
		return err
	}
	defer c1.Close()
	c2, err := amqp.Dial(o.amqp)
	if err != nil {
		return err
	}
	defer c2.Close()
	const chunk = 100
	tick := o.publishFor / time.Duration(len(pl.main)/chunk+1)
	for i := 0; i < len(pl.main); i += chunk {
		time.Sleep(tick)
		var orig, conc [][]byte
		for _, m := range pl.main[i:min(i+chunk, len(pl.main))] {
			orig = append(orig, m.body)
			if d, ok := pl.concurrent[m.first]; ok && m.first >= 0 {
				conc = append(conc, d)
			}
		}
		var wg sync.WaitGroup
		var concErr error
		wg.Go(func() { concErr = publish(c2, queue, conc) })
		err := publish(c1, queue, orig)
		wg.Wait()
		if err = errors.Join(err, concErr); err != nil {
			return err
		}
	}
	return nil
}

// publish returns once RabbitMQ confirmed every body.
func publish(conn *amqp.Connection, queue string, bodies [][]byte) error {
	if len(bodies) == 0 {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var pending []*amqp.DeferredConfirmation
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: b})
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		pending = append(pending, dc)
	}
	for _, dc := range pending {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
	}
	return nil
}

func declare(conn *amqp.Connection, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	return nil
}

// ready is the number of messages waiting in queue (unacked ones not
// counted: exact only while no proxy runs).
func ready(conn *amqp.Connection, queue string) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("inspect queue %s: %w", queue, err)
	}
	return q.Messages, nil
}

// drain waits until the queue stays empty for longer than a lease (a
// message waiting on a dead replica's lease is unacked, not ready), stops
// both replicas gracefully — a stop must exit 0 and requeue what it did
// not finish — and checks the queue again, running them once more if a
// message came back.
func drain(conn *amqp.Connection, queue string, reps []*replica) error {
	for round := 0; round < 5; round++ {
		quietSince := time.Now()
		deadline := time.Now().Add(2 * time.Minute)
		for time.Since(quietSince) < lease+time.Second {
			if time.Now().After(deadline) {
				return fmt.Errorf("queue %s did not drain within 2 minutes", queue)
			}
			n, err := ready(conn, queue)
			if err != nil {
				return err
			}
			if n > 0 {
				quietSince = time.Now()
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, r := range reps {
			code, err := r.term()
			if err != nil {
				return err
			}
			if code != 0 {
				return fmt.Errorf("proxy %d exited %d after SIGTERM (logs in %s)", r.n, code, r.dir)
			}
		}
		n, err := ready(conn, queue)
		if err != nil || n == 0 {
			return err
		}
		for _, r := range reps {
			if err := r.start(); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("messages still in queue %s after 5 rounds", queue)
}

func rowsPerKey(ctx context.Context, db *pgx.Conn, schema string) (map[string]int, error) {
	rows, err := db.Query(ctx, "SELECT idempotency_key, count(*) FROM "+schema+".orders GROUP BY 1")
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		m[k] = n
	}
	return m, rows.Err()
}

// unrecorded lists the keys with an order row from the 5 s before the
// kill (a request of the killed replica started before it) that the
// seen-set does not hold as done.
func unrecorded(ctx context.Context, db *pgx.Conn, rdb *redis.Client, schema, keyPrefix string, killedAt time.Time) ([]string, error) {
	rows, err := db.Query(ctx, "SELECT DISTINCT idempotency_key FROM "+schema+".orders WHERE created_at BETWEEN $1 AND $2",
		killedAt.Add(-5*time.Second), killedAt.Add(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	pipe := rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, keyPrefix+k)
	}
	_, _ = pipe.Exec(ctx)
	var out []string
	for i, g := range gets {
		v, err := g.Result()
		switch {
		case errors.Is(err, redis.Nil), err == nil && !strings.HasPrefix(v, "done:"):
			out = append(out, keys[i])
		case err != nil:
			return nil, fmt.Errorf("redis: %w", err)
		}
	}
	return out, nil
}

func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
}
