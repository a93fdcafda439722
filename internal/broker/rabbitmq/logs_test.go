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

// The start line says what the queue does past its delivery limit: a
// quorum queue with x-delivery-limit and no dead-letter exchange gets a
// warning of its own naming the limit and what could not be read
// (policies); a classic queue says it has no limit.
func TestStartLineWarnsOfDeliveryLimitWithoutDeadLetterExchange(t *testing.T) {
	r := testutil.NewRabbit(t)
	for _, tc := range []struct {
		name string
		args amqp.Table
		line string
		warn bool
	}{
		{"quorum", amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(10)},
			"quorum queue, x-delivery-limit 10, and no x-dead-letter-exchange argument: RabbitMQ drops a message past its delivery limit", true},
		{"classic", nil, "queue type classic (no x-queue-type argument): no delivery limit", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testutil.LogBuffer
			o := options(r.Queue("dptest.limit.", tc.args))
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			start(t, o)
			testutil.Eventually(t, 10*time.Second, "the start line", func() bool {
				return strings.Contains(logs.String(), `msg="rabbitmq consuming"`)
			})
			out := logs.String()
			var consuming, warn string
			for _, line := range strings.Split(out, "\n") {
				switch {
				case strings.Contains(line, `msg="rabbitmq consuming"`):
					consuming = line
				case strings.Contains(line, "level=WARN"):
					warn = line
				}
			}
			if !strings.Contains(consuming, "delivery_limit=") || !strings.Contains(consuming, tc.line) {
				t.Errorf("start line lacks delivery_limit %q:\n%s", tc.line, consuming)
			}
			switch {
			case tc.warn && (!strings.Contains(warn, "drops messages past its delivery limit") || !strings.Contains(warn, tc.line) || !strings.Contains(warn, "AMQP cannot read")):
				t.Errorf("no warning naming the limit and what was not read:\n%s", out)
			case !tc.warn && warn != "":
				t.Errorf("a warning for a queue without a delivery limit: %s", warn)
			}
		})
	}
}
