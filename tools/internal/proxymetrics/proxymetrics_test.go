package proxymetrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestResultsSumsEverySource(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP dedupe_proxy_messages_total deliveries
# TYPE dedupe_proxy_messages_total counter
dedupe_proxy_messages_total{result="forwarded",source="a"} 7
dedupe_proxy_messages_total{result="forwarded",source="b"} 3
dedupe_proxy_messages_total{result="duplicate",source="a"} 2
dedupe_proxy_messages_total{result="dead_lettered",source="b"} 1
dedupe_proxy_messages_total{result="requeued",source="a"} 9
dedupe_proxy_events_total{event="busy",source="a"} 5
`)
	}))
	defer srv.Close()
	fwd, dup, dead := Results(srv.Client(), strings.TrimPrefix(srv.URL, "http://"))
	if fwd != 10 || dup != 2 || dead != 1 {
		t.Fatalf("got forwarded %v, duplicate %v, dead-lettered %v; want 10, 2, 1", fwd, dup, dead)
	}
	if f, d, x := Results(srv.Client(), "127.0.0.1:1"); f+d+x != 0 {
		t.Fatalf("an unreachable proxy read as %v %v %v", f, d, x)
	}
}
