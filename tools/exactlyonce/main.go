// Command exactlyonce shows the whole promise of dedupe-proxy end to end
// (make demo-exactly-once): two proxy replicas (the real binary) consume
// one RabbitMQ queue in front of the Go example app (examples/go), which
// writes an order row per message to PostgreSQL; 10,000 messages with 30%
// duplicates are published while a replica is SIGKILLed every few seconds
// and restarted — every other kill aimed at the moment right after the
// app's 2xx, before the proxy could record the key. It then counts the
// rows per key in the database, and does the same run again against a
// naive app that ignores the Idempotency-Key header.
//
// The app that records the key in the same transaction as its work has
// exactly one row per key; the naive app has two for the keys caught in
// that window; neither loses a message. It is a tool for seeing the
// proxy work, not part of the product.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

type options struct {
	proxy, app      string
	messages        int
	dupRatio        float64
	amqp, redis, pg string
	killEvery       time.Duration
	publishFor      time.Duration
	minKills        int
	keep, skipNaive bool
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demo-exactly-once: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	flag.StringVar(&o.proxy, "proxy", "bin/dedupe-proxy", "the dedupe-proxy binary (make build)")
	flag.StringVar(&o.app, "app", "bin/example-orders", "the Go example app's binary (go build -o bin/example-orders ./examples/go)")
	flag.IntVar(&o.messages, "messages", 10000, "messages to publish per run")
	flag.Float64Var(&o.dupRatio, "duplicates", 0.3, "fraction of the messages that are duplicates")
	flag.StringVar(&o.amqp, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	flag.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address (the seen-set)")
	flag.StringVar(&o.pg, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL; each run uses a schema of its own and drops it")
	flag.DurationVar(&o.killEvery, "kill-every", 2*time.Second, "pause between SIGKILLs")
	flag.DurationVar(&o.publishFor, "publish-for", 15*time.Second, "spread the first wave of messages over this long")
	flag.IntVar(&o.minKills, "min-kills", 8, "SIGKILLs per run at least")
	flag.BoolVar(&o.keep, "keep", false, "keep the schemas and the proxies' logs")
	flag.BoolVar(&o.skipNaive, "skip-naive", false, "run only the app that honours Idempotency-Key")
	flag.Parse()
	for _, f := range []struct{ path, how string }{{o.proxy, "make build"}, {o.app, "go build -o bin/example-orders ./examples/go"}} {
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s not found: run %s (make demo-exactly-once does it)", f.path, f.how)
		}
	}
	if o.messages < 10 || o.dupRatio < 0 || o.dupRatio >= 1 {
		return errors.New("-messages must be at least 10 and -duplicates in [0, 1)")
	}

	pl := makePlan(o.messages, o.dupRatio)
	fmt.Printf("dedupe-proxy: exactly once, end to end\n"+
		"  %d messages per run (%d keys, %d duplicates), two proxy replicas on one RabbitMQ queue,\n"+
		"  a replica SIGKILLed every %s and restarted, every other kill right after the app's 2xx\n"+
		"  RabbitMQ %s, Redis %s, PostgreSQL %s\n\n",
		o.messages, len(pl.keys), o.messages-len(pl.keys), o.killEvery, redactURL(o.amqp), o.redis, redactURL(o.pg))

	var results []result
	fmt.Println("  run 1: the Go example app (examples/go), which records Idempotency-Key in the transaction of its work")
	r, err := runOnce(o, "honouring", pl, func(dsn string) (string, func(), error) { return startProcess(o.app, dsn) })
	if err != nil {
		return err
	}
	results = append(results, r)
	if !o.skipNaive {
		fmt.Println("\n  run 2: a naive app: the same order row and balance per request, but Idempotency-Key ignored")
		r, err := runOnce(o, "naive", pl, startNaive)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	return report(results)
}

func report(rs []result) error {
	row := func(label string, f func(r result) string) {
		fmt.Printf("  %-52s", label)
		for _, r := range rs {
			fmt.Printf(" %14s", f(r))
		}
		fmt.Println()
	}
	d := func(n int) string { return fmt.Sprint(n) }
	fmt.Println()
	row("", func(r result) string { return r.name + " app" })
	row("messages published", func(r result) string { return d(r.published) })
	row("keys (messages that must have an effect)", func(r result) string { return d(r.unique) })
	row("proxy SIGKILLs", func(r result) string { return d(r.kills) })
	row("  of them aimed right after the app's 2xx", func(r result) string { return d(r.aimed) })
	row("  of them with keys in the 2xx→record window", func(r result) string { return d(r.killsInWindow) })
	row("keys in that window (effected, not recorded)", func(r result) string { return d(r.windowKeys) })
	row("keys with 0 rows (lost)", func(r result) string { return d(r.lost) })
	row("keys with exactly 1 row", func(r result) string { return d(r.once) })
	row("keys with more than 1 row", func(r result) string { return d(r.more) })
	row("  of them not caught in the window at a kill", func(r result) string { return d(r.moreOutsideWindow) })
	row("order rows", func(r result) string { return fmt.Sprint(r.rows) })
	row("balances: booked minus owed (cents)", func(r result) string {
		return fmt.Sprintf("%+d", r.booked-r.expectedCents)
	})
	row("seconds", func(r result) string { return fmt.Sprintf("%.0f", r.seconds) })
	fmt.Println()
	fmt.Println("  rows per key, from SELECT n, count(*) FROM (SELECT count(*) AS n FROM orders GROUP BY idempotency_key) t GROUP BY n:")
	for _, r := range rs {
		var parts []string
		for _, p := range r.rowsPerKey {
			parts = append(parts, fmt.Sprintf("%d row(s): %d keys", p[0], p[1]))
		}
		fmt.Printf("    %-10s %s\n", r.name, strings.Join(parts, ", "))
		if r.logs != "" {
			fmt.Printf("    %-10s proxy logs and config kept in %s\n", "", r.logs)
		}
	}
	fmt.Println()

	h := rs[0]
	var fails []string
	if h.lost != 0 || h.more != 0 || h.once != h.unique || h.booked != h.expectedCents {
		fails = append(fails, fmt.Sprintf("the honouring app has %d keys with 0 rows and %d with more than 1", h.lost, h.more))
	}
	if h.kills < 1 {
		fails = append(fails, "no proxy was killed")
	}
	var naive string
	if len(rs) > 1 {
		n := rs[1]
		if n.lost != 0 {
			fails = append(fails, fmt.Sprintf("the naive app lost %d keys", n.lost))
		}
		switch {
		case n.more > 0:
			naive = fmt.Sprintf("; the naive app has 2+ rows for %d keys (%+d cents booked too much)", n.more, n.booked-n.expectedCents)
			if n.moreOutsideWindow > 0 {
				naive += fmt.Sprintf(", %d of them not seen in the window 300 ms after a kill (a request past app.timeout, or a commit later than that)", n.moreOutsideWindow)
			}
		case n.windowKeys == 0:
			naive = "; the naive app was lucky: no kill caught a key between the app's 2xx and the proxy's record, so it shows no double rows this time"
		default:
			naive = "; the naive app shows no double rows although keys were in the window"
		}
	}
	if len(fails) > 0 {
		fmt.Printf("  VERDICT: FAIL — %s.\n", strings.Join(fails, "; "))
		return errors.New("exactly-once not shown")
	}
	fmt.Printf("  VERDICT: PASS — exactly 1 row for each of the %d keys behind %d SIGKILLs (%d keys caught between the app's 2xx and the proxy's record), lost = 0 in every run%s.\n",
		h.unique, h.kills, h.windowKeys, naive)
	return nil
}

// startProcess runs the app binary on a free port against databaseURL and
// waits until it answers /healthz.
func startProcess(bin, databaseURL string) (string, func(), error) {
	addr, err := freeAddr()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LISTEN_ADDR="+addr, "DATABASE_URL="+databaseURL)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-done:
			return "", nil, fmt.Errorf("%s exited: %s", bin, out.String())
		default:
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, stop, nil
			}
		}
	}
	stop()
	return "", nil, fmt.Errorf("%s did not answer /healthz within 30s", bin)
}

// withSearchPath points a PostgreSQL URL at schema.
func withSearchPath(dsn, schema string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set("options", "-c search_path="+schema)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}
