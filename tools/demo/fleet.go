package main

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/tools/internal/demoapp"
)

// fleet is the proxy replicas of one demo run.
type fleet []*replica

// stop stops every replica concurrently: with Kafka, a replica stopping
// alone would make the other rejoin the group just before it stops too.
func (f fleet) stop() {
	var wg sync.WaitGroup
	for _, p := range f {
		wg.Go(p.stop)
	}
	wg.Wait()
}

func (f fleet) waitReady(d time.Duration) error {
	for _, p := range f {
		if err := p.waitReady(d); err != nil {
			return err
		}
	}
	return nil
}

// settled sums the replicas' message results.
func (f fleet) settled() (fwd, dup, dead float64) {
	for _, p := range f {
		a, b, c := p.results()
		fwd, dup, dead = fwd+a, dup+b, dead+c
	}
	return
}

// stopClean stops the replicas and reports one that did not exit 0.
func (f fleet) stopClean() error {
	f.stop()
	for _, p := range f {
		if p.exitErr != nil {
			return fmt.Errorf("proxy %d exited with %v (log: %s)", p.n, p.exitErr, p.logPath)
		}
	}
	return nil
}

// startApp serves the demo app on a free loopback port.
func startApp(delay time.Duration) (app *demoapp.App, addr string, stop func(), err error) {
	app = demoapp.New(delay)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	srv := &http.Server{Handler: app.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return app, ln.Addr().String(), func() { _ = srv.Close() }, nil
}
