// Command demoapp is the demo's consumer: it answers 204 to every POST,
// counts one effect per request by Idempotency-Key, and reports the counts
// on GET /stats. docker-compose runs it next to the proxy. It is a tool for
// trying the proxy, not part of the product (the Dockerfile builds it only
// for --target demoapp).
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/tools/internal/demoapp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	delay := flag.Duration("delay", time.Millisecond, "time each request takes (a database write)")
	flag.Parse()
	app := demoapp.New(*delay)
	srv := &http.Server{Addr: *listen, Handler: app.Handler(), ReadHeaderTimeout: 5 * time.Second}
	log.Printf("demoapp listening on %s; counts at GET /stats", *listen)
	log.Fatal(srv.ListenAndServe())
}
