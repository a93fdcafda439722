// Package apptest is the contract every example app under examples/ must
// keep, as one test suite run against each of them: the same message
// twice, or twenty times at once, has one effect and is answered 2xx every
// time; different messages have their own effects; a message that can
// never succeed is answered 4xx and leaves nothing behind; a database
// that is down is answered 5xx, leaves nothing behind, and the retry
// afterwards has the one effect.
//
// Each test runs the app against its own PostgreSQL schema (dropped at
// the end) in the database at APPTEST_PG (default 127.0.0.1:5432, user
// postgres, database test, trust authentication).
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// StartFunc starts the app against databaseURL (a postgres:// URL whose
// options select the test's schema) and returns its base URL, such as
// http://127.0.0.1:PORT. The app must be stopped by t's cleanup.
type StartFunc func(t *testing.T, databaseURL string) string

// PGAddr is the PostgreSQL the tests use.
func PGAddr() string {
	if a := os.Getenv("APPTEST_PG"); a != "" {
		return a
	}
	return "127.0.0.1:5432"
}

// DatabaseURL is the URL of database test at addr with search_path set to
// schema, in the form pgx, libpq (psycopg2) and node-postgres all read.
func DatabaseURL(addr, schema string) string {
	return fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable&options=%s",
		addr, strings.ReplaceAll(url.QueryEscape("-c search_path="+schema), "+", "%20"))
}

// DB is one test's schema.
type DB struct {
	Schema string
	conn   *pgx.Conn
}

// NewDB creates a fresh schema and drops it when t ends.
func NewDB(t *testing.T) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable", PGAddr()))
	if err != nil {
		t.Fatalf("PostgreSQL at %s (user postgres, database test) is not reachable: %v; the examples' tests need it (.ci/run checks it is up)", PGAddr(), err)
	}
	schema := testutil.UniqueName("apptest_")
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		_ = conn.Close(ctx)
	})
	return &DB{Schema: schema, conn: conn}
}

// URL is the schema's database URL at addr (the real server, or a relay
// in front of it).
func (d *DB) URL(addr string) string { return DatabaseURL(addr, d.Schema) }

// Orders counts order rows per Idempotency-Key.
func (d *DB) Orders(t *testing.T) map[string]int {
	t.Helper()
	return d.countBy(t, "SELECT idempotency_key, count(*) FROM "+d.Schema+".orders GROUP BY 1")
}

// Processed counts processed_messages rows per key (0 or 1).
func (d *DB) Processed(t *testing.T) map[string]int {
	t.Helper()
	return d.countBy(t, "SELECT idempotency_key, count(*) FROM "+d.Schema+".processed_messages GROUP BY 1")
}

// Balance is a customer's total, 0 when it has none.
func (d *DB) Balance(t *testing.T, customer string) int64 {
	t.Helper()
	var total int64
	err := d.conn.QueryRow(context.Background(), "SELECT total_cents FROM "+d.Schema+".balances WHERE customer_id = $1", customer).Scan(&total)
	if err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	return total
}

func (d *DB) countBy(t *testing.T, q string) map[string]int {
	rows, err := d.conn.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		m[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

var client = &http.Client{Timeout: 20 * time.Second}

// Order is the body of one message, as the proxy forwards it.
func Order(key, customer string, amount int64) []byte {
	b, _ := json.Marshal(map[string]any{
		"meta": map[string]any{"id": key},
		"data": map[string]any{"customer_id": customer, "amount_cents": amount},
	})
	return b
}

// Post sends what the proxy sends for one message and returns the status.
// An empty key sends no Idempotency-Key header.
func Post(t *testing.T, base, key string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/orders", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("X-Dedupe-Attempt", "1")
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("POST %s key %q: %v", base, key, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 == 2 {
		// The proxy reads a 2xx JSON answer's "status" as Dapr's verdict;
		// an example must not trip it by accident.
		var v struct {
			Status *string `json:"status"`
		}
		if json.Unmarshal(b, &v) == nil && v.Status != nil && *v.Status != "SUCCESS" {
			t.Errorf("2xx answer %s has a \"status\" field the proxy would read as RETRY or DROP", b)
		}
	}
	return resp.StatusCode, string(b)
}

// WaitHealthy polls base/healthz until it answers 200.
func WaitHealthy(t *testing.T, base string, exited <-chan struct{}, output func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("the app exited before it was healthy; its output:\n%s", output())
		default:
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the app did not answer %s/healthz within 30s; its output:\n%s", base, output())
}

// Run is the suite.
func Run(t *testing.T, start StartFunc) {
	t.Run("SameKeyTwice", func(t *testing.T) {
		db := NewDB(t)
		base := start(t, db.URL(PGAddr()))
		for i := range 2 {
			if code, body := Post(t, base, "k-1", Order("k-1", "c-1", 1250)); code/100 != 2 {
				t.Fatalf("delivery %d: status %d (%s), want 2xx", i+1, code, body)
			}
		}
		expectOnce(t, db, []string{"k-1"})
		if got := db.Balance(t, "c-1"); got != 1250 {
			t.Errorf("balance %d, want 1250 (one effect)", got)
		}
	})

	t.Run("ConcurrentSameKey", func(t *testing.T) {
		db := NewDB(t)
		base := start(t, db.URL(PGAddr()))
		var wg sync.WaitGroup
		codes := make([]int, 20)
		for i := range codes {
			wg.Go(func() { codes[i], _ = Post(t, base, "k-conc", Order("k-conc", "c-1", 700)) })
		}
		wg.Wait()
		for i, c := range codes {
			if c/100 != 2 {
				t.Errorf("request %d: status %d, want 2xx", i, c)
			}
		}
		expectOnce(t, db, []string{"k-conc"})
		if got := db.Balance(t, "c-1"); got != 700 {
			t.Errorf("balance %d, want 700 (one effect)", got)
		}
	})

	t.Run("DifferentKeys", func(t *testing.T) {
		db := NewDB(t)
		base := start(t, db.URL(PGAddr()))
		var keys []string
		var wg sync.WaitGroup
		for i := range 30 {
			key := fmt.Sprintf("k-%02d", i)
			keys = append(keys, key)
			// Pairs at once, to also see one key's wait not block another.
			wg.Go(func() {
				if code, body := Post(t, base, key, Order(key, "c-2", 100)); code/100 != 2 {
					t.Errorf("key %s: status %d (%s), want 2xx", key, code, body)
				}
			})
			if i%2 == 1 {
				wg.Wait()
			}
		}
		wg.Wait()
		expectOnce(t, db, keys)
		if got := db.Balance(t, "c-2"); got != 3000 {
			t.Errorf("balance %d, want 3000 (30 effects of 100)", got)
		}
	})

	t.Run("BadMessage", func(t *testing.T) {
		db := NewDB(t)
		base := start(t, db.URL(PGAddr()))
		for _, c := range []struct{ name, key, body string }{
			{"not JSON", "bad-1", "not json"},
			{"no amount", "bad-2", `{"meta":{"id":"bad-2"},"data":{"customer_id":"c-1"}}`},
			{"negative amount", "bad-3", `{"meta":{"id":"bad-3"},"data":{"customer_id":"c-1","amount_cents":-5}}`},
			{"no customer", "bad-4", `{"meta":{"id":"bad-4"},"data":{"amount_cents":5}}`},
			{"no Idempotency-Key", "", string(Order("bad-5", "c-1", 5))},
		} {
			code, body := Post(t, base, c.key, []byte(c.body))
			// 408 and 429 are retried by the proxy, so they are not "bad".
			if code/100 != 4 || code == 408 || code == 429 {
				t.Errorf("%s: status %d (%s), want a 4xx the proxy dead-letters", c.name, code, body)
			}
		}
		if n := len(db.Orders(t)) + len(db.Processed(t)); n != 0 {
			t.Errorf("rejected messages left %d rows, want none", n)
		}
	})

	t.Run("DatabaseDown", func(t *testing.T) {
		db := NewDB(t)
		relay := testutil.NewRelay(t, PGAddr())
		base := start(t, db.URL(relay.Addr()))
		if code, body := Post(t, base, "k-before", Order("k-before", "c-3", 10)); code/100 != 2 {
			t.Fatalf("before the outage: status %d (%s), want 2xx", code, body)
		}
		relay.SetDown(true)
		relay.Cut()
		code, body := Post(t, base, "k-down", Order("k-down", "c-3", 20))
		if code/100 != 5 {
			t.Fatalf("database down: status %d (%s), want 5xx so the proxy retries", code, body)
		}
		if p := db.Processed(t)["k-down"]; p != 0 {
			t.Fatalf("database down: key recorded although the app answered %d", code)
		}
		relay.SetDown(false)
		// As the proxy would: retry until 2xx. A pooled connection the
		// outage broke may fail one more request; that is a 5xx too.
		ok := false
		for try := 0; try < 20 && !ok; try++ {
			code, body = Post(t, base, "k-down", Order("k-down", "c-3", 20))
			switch code / 100 {
			case 2:
				ok = true
			case 5:
				time.Sleep(100 * time.Millisecond)
			default:
				t.Fatalf("after the outage: status %d (%s)", code, body)
			}
		}
		if !ok {
			t.Fatalf("after the outage: still %d (%s) after 20 tries", code, body)
		}
		if code, body := Post(t, base, "k-down", Order("k-down", "c-3", 20)); code/100 != 2 {
			t.Fatalf("redelivery: status %d (%s), want 2xx", code, body)
		}
		expectOnce(t, db, []string{"k-before", "k-down"})
		if got := db.Balance(t, "c-3"); got != 30 {
			t.Errorf("balance %d, want 30", got)
		}
	})
}

// expectOnce fails unless each key has exactly one order and one
// processed_messages row, and no other key has any.
func expectOnce(t *testing.T, db *DB, keys []string) {
	t.Helper()
	orders, processed := db.Orders(t), db.Processed(t)
	for _, k := range keys {
		if orders[k] != 1 || processed[k] != 1 {
			t.Errorf("key %s: %d order rows and %d processed rows, want 1 and 1", k, orders[k], processed[k])
		}
	}
	if len(orders) != len(keys) || len(processed) != len(keys) {
		t.Errorf("%d keys with orders and %d processed, want %d", len(orders), len(processed), len(keys))
	}
}
