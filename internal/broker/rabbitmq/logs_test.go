package rabbitmq_test

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The broker gone for several reconnect attempts, then back: one warning
// when consuming stops, one info line when it resumes; the retries in
// between are debug.
func TestBrokerDownAndUpLoggedOnce(t *testing.T) {
	r := testutil.NewRabbit(t)
	uri, err := amqp.ParseURI(testutil.RabbitURL())
	if err != nil {
		t.Fatal(err)
	}
	relay := testutil.NewRelay(t, net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	host, port, _ := net.SplitHostPort(relay.Addr())
	uri.Host = host
	uri.Port, _ = strconv.Atoi(port)

	var logs testutil.LogBuffer
	o := options(r.Queue("dptest.logs.", nil))
	o.URL = uri.String()
	o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src := start(t, o)

	relay.SetDown(true)
	relay.Cut()
	testutil.Eventually(t, 10*time.Second, "several reconnect attempts", func() bool {
		return strings.Count(logs.String(), "cannot consume, retrying") >= 4
	})
	relay.SetDown(false)
	testutil.Eventually(t, 10*time.Second, "consuming again", func() bool { return src.s.Ready() == nil })

	out := logs.String()
	var warn, back int
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "level=WARN"):
			warn++
			if !strings.Contains(line, "connection lost") || !strings.Contains(line, "err=") {
				t.Errorf("warning: %s", line)
			}
		case strings.Contains(line, `msg="rabbitmq consuming"`) && strings.Contains(line, "down_for="):
			back++
		}
	}
	if warn != 1 || back != 1 {
		t.Fatalf("%d warnings and %d back lines, want 1 and 1:\n%s", warn, back, out)
	}
}
