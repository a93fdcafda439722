package testutil

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Request is one request the test app received.
type Request struct {
	Path    string
	Header  http.Header
	Body    []byte
	Key     string // Idempotency-Key
	Status  int    // what the app answered
	Attempt string
}

// App is a recording HTTP app. Respond decides each answer; by default
// every request succeeds with 200. Effects counts successful requests per
// Idempotency-Key (or per body when there is no key): what a naive app
// would do, charge once per 2xx.
type App struct {
	*httptest.Server
	mu       sync.Mutex
	requests []Request
	// Respond returns the status for a request; nil answers 200.
	Respond func(r *Request, n int) int
}

// NewApp starts a recording app, closed when the test ends.
func NewApp(t testing.TB) *App {
	a := &App{}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.Close)
	return a
}

func (a *App) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := Request{Path: r.URL.Path, Header: r.Header.Clone(), Body: body,
		Key: r.Header.Get("Idempotency-Key"), Attempt: r.Header.Get("X-Dedupe-Attempt")}
	a.mu.Lock()
	n := len(a.requests)
	respond := a.Respond
	a.mu.Unlock()
	status := http.StatusOK
	if respond != nil {
		status = respond(&req, n)
	}
	req.Status = status
	a.mu.Lock()
	a.requests = append(a.requests, req)
	a.mu.Unlock()
	w.WriteHeader(status)
}

// SetRespond swaps the response function safely.
func (a *App) SetRespond(f func(r *Request, n int) int) {
	a.mu.Lock()
	a.Respond = f
	a.mu.Unlock()
}

// Requests returns a copy of everything received so far.
func (a *App) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.requests...)
}

// Count is the number of requests received.
func (a *App) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.requests)
}

// Effects returns successful (2xx) requests per Idempotency-Key.
func (a *App) Effects() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[string]int{}
	for _, r := range a.requests {
		if r.Status >= 200 && r.Status < 300 {
			m[r.Key]++
		}
	}
	return m
}
