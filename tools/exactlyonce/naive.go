package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// naiveApp is the example app without its processed_messages table: the
// same order row and balance per request, the same answers, but it never
// looks at Idempotency-Key (it stores it only so the demo can count rows
// per key). Every delivery that reaches it is an effect. Do not copy it.
type naiveApp struct {
	pool *pgxpool.Pool
	srv  *http.Server
}

const naiveSchema = `
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

// startNaive serves the naive app on a free loopback port.
func startNaive(databaseURL string) (base string, stop func(), err error) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return "", nil, err
	}
	if _, err := pool.Exec(ctx, naiveSchema); err != nil {
		pool.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return "", nil, err
	}
	a := &naiveApp{pool: pool}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", a.order)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = a.srv.Close(); pool.Close() }, nil
}

func (a *naiveApp) order(w http.ResponseWriter, r *http.Request) {
	var o struct {
		Data struct {
			CustomerID  string `json:"customer_id"`
			AmountCents int64  `json:"amount_cents"`
		} `json:"data"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &o); err != nil || o.Data.CustomerID == "" || o.Data.AmountCents <= 0 {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 8*time.Second)
	defer cancel()
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `INSERT INTO orders (idempotency_key, customer_id, amount_cents) VALUES ($1, $2, $3)`,
		r.Header.Get("Idempotency-Key"), o.Data.CustomerID, o.Data.AmountCents); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if _, err := tx.Exec(ctx, `INSERT INTO balances (customer_id, total_cents) VALUES ($1, $2)
		ON CONFLICT (customer_id) DO UPDATE SET total_cents = balances.total_cents + EXCLUDED.total_cents`,
		o.Data.CustomerID, o.Data.AmountCents); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}
