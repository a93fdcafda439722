// Package demoapp is the small consumer app of the demo and of
// docker-compose: it plays an order service that charges once per request
// (a naive app, so every duplicate that reaches it shows as a duplicate
// effect) and counts effects per Idempotency-Key. It lives under tools/
// because only the demo tools use it; the product never imports it.
package demoapp

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"
)

// App counts effects. The zero value is not usable; call New.
type App struct {
	mu      sync.Mutex
	effects map[string]int
	noKey   int
	total   int
	delay   time.Duration
}

// New returns an App that takes delay per request (a database write).
func New(delay time.Duration) *App {
	return &App{effects: map[string]int{}, delay: delay}
}

// Stats is what /stats reports.
type Stats struct {
	Requests         int `json:"requests"`
	Keys             int `json:"keys"`
	DuplicateEffects int `json:"duplicate_effects"`
	NoKey            int `json:"no_key"`
}

// Handler serves POST / (any path) and GET /stats, GET /healthz.
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Stats())
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if a.delay > 0 {
			time.Sleep(a.delay)
		}
		key := r.Header.Get("Idempotency-Key")
		a.mu.Lock()
		a.total++
		if key == "" {
			a.noKey++
		} else {
			a.effects[key]++
		}
		a.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// Stats returns the counts so far.
func (a *App) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Stats{Requests: a.total, Keys: len(a.effects), NoKey: a.noKey}
	for _, n := range a.effects {
		if n > 1 {
			s.DuplicateEffects += n - 1
		}
	}
	return s
}
