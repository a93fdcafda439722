package main

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedupe-proxy/dedupe-proxy/examples/apptest"
)

func TestOrdersApp(t *testing.T) {
	apptest.Run(t, func(t *testing.T, databaseURL string) string {
		pool, err := pgxpool.New(context.Background(), databaseURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if err := migrate(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(newMux(pool))
		t.Cleanup(srv.Close)
		return srv.URL
	})
}
