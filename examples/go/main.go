// Command orders is an app behind dedupe-proxy that acts exactly once per
// message: it records each request's Idempotency-Key under a unique
// constraint in the same PostgreSQL transaction as its work (an order row
// and a customer balance), so a message the proxy delivers twice — the
// proxy was killed after this app answered and before it recorded the key
// — finds its key and changes nothing the second time.
//
//	LISTEN_ADDR=127.0.0.1:8080 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/go
//
// It answers POST /orders with the JSON envelope
// {"meta": {"id": "..."}, "data": {"customer_id": "c-1", "amount_cents": 1250}}:
//
//   - 200 once the work is committed, or when the key was already
//     processed (the proxy then acks the message);
//   - 400 for a message that can never succeed — no Idempotency-Key, not
//     JSON, a missing or bad field (the proxy dead-letters it at once);
//   - 503 when the database failed or is unreachable (the proxy retries
//     later; the transaction rolled back, so nothing was recorded).
package main

import (
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	addr := getenv("LISTEN_ADDR", "127.0.0.1:8080")
	dsn := getenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		log.Fatalf("DATABASE_URL: %v", err)
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		log.Fatalf("create tables: %v", err)
	}

	srv := &http.Server{Addr: addr, Handler: newMux(pool), ReadHeaderTimeout: 5 * time.Second}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		<-ctx.Done()
		// Let requests in flight commit or roll back and answer before
		// exiting: the proxy retries whatever gets no answer.
		shutdown, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("listening on %s", addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	// ListenAndServe returns as soon as Shutdown begins; wait for it to end.
	<-drained
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
