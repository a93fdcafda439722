package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schema is the app's tables. processed_messages is what makes the work
// happen once: its primary key rejects a second row for one
// Idempotency-Key, and it is written in the same transaction as the work,
// so either both are committed or neither is.
const schema = `
CREATE TABLE IF NOT EXISTS processed_messages (
    idempotency_key text PRIMARY KEY,
    processed_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS orders (
    id              bigserial PRIMARY KEY,
    idempotency_key text NOT NULL,
    customer_id     text NOT NULL,
    amount_cents    bigint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS balances (
    customer_id  text PRIMARY KEY,
    total_cents  bigint NOT NULL
);`

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, schema)
	return err
}

// requestTimeout bounds one request's database work. Keep it under the
// proxy's app.timeout (10s by default): a request the proxy gave up on
// should roll back rather than commit unseen.
const requestTimeout = 8 * time.Second

func newMux(pool *pgxpool.Pool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) { handleOrder(pool, w, r) })
	// The process is up; a database outage is answered per message (503).
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

// order is the part of the message the work needs.
type order struct {
	Data struct {
		CustomerID  string `json:"customer_id"`
		AmountCents *int64 `json:"amount_cents"`
	} `json:"data"`
}

func handleOrder(pool *pgxpool.Pool, w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		// The proxy forwards a message it found no key in without one.
		// Acting on it could not be made safe, so it goes to the dead
		// letter, where someone can look at it.
		reply(w, http.StatusBadRequest, map[string]any{"error": "no Idempotency-Key header"})
		return
	}
	var o order
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		reply(w, http.StatusServiceUnavailable, map[string]any{"error": "reading body: " + err.Error()})
		return
	}
	if err := json.Unmarshal(body, &o); err != nil {
		reply(w, http.StatusBadRequest, map[string]any{"error": "body is not a JSON order: " + err.Error()})
		return
	}
	if o.Data.CustomerID == "" || o.Data.AmountCents == nil || *o.Data.AmountCents <= 0 {
		reply(w, http.StatusBadRequest, map[string]any{"error": "data.customer_id (non-empty) and data.amount_cents (> 0) are required"})
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	orderID, duplicate, err := placeOrder(ctx, pool, key, o.Data.CustomerID, *o.Data.AmountCents)
	if err != nil {
		// Whatever failed, the transaction did not commit (or, if COMMIT
		// itself failed, a retry finds the key): retrying is safe, and the
		// proxy dead-letters after its max_attempts.
		log.Printf("order %q: %v", key, err)
		reply(w, http.StatusServiceUnavailable, map[string]any{"error": "database: " + err.Error()})
		return
	}
	if duplicate {
		reply(w, http.StatusOK, map[string]any{"duplicate": true})
		return
	}
	reply(w, http.StatusOK, map[string]any{"duplicate": false, "order_id": orderID})
}

// placeOrder records key and does the work in one transaction. When key
// is already recorded it does nothing and reports duplicate. Two requests
// with one key at the same moment are serialised by the primary key: the
// second INSERT waits for the first transaction and then inserts nothing.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, key, customer string, amount int64) (orderID int64, duplicate bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO processed_messages (idempotency_key) VALUES ($1) ON CONFLICT DO NOTHING`, key)
		if err != nil {
			return fmt.Errorf("record key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			duplicate = true
			return nil // BeginFunc commits an empty transaction
		}
		if err := tx.QueryRow(ctx,
			`INSERT INTO orders (idempotency_key, customer_id, amount_cents) VALUES ($1, $2, $3) RETURNING id`,
			key, customer, amount).Scan(&orderID); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if _, err := tx.Exec(ctx,
			`INSERT INTO balances (customer_id, total_cents) VALUES ($1, $2)
			 ON CONFLICT (customer_id) DO UPDATE SET total_cents = balances.total_cents + EXCLUDED.total_cents`,
			customer, amount); err != nil {
			return fmt.Errorf("update balance: %w", err)
		}
		return nil
	})
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("took longer than %s: %w", requestTimeout, err)
	}
	return orderID, duplicate, err
}

func reply(w http.ResponseWriter, status int, v map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
