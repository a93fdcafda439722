package kafka

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// An outage that flickers out: a failure from a second connection comes
// after the first success, and another success before the "back" line was
// due. The successes that follow must still report fetching again. CI
// caught the source down for good after a cut of three brokers: the
// success that came while the "back" line was pending had used up the
// news that anything had failed.
func TestFetchBackAfterAFlicker(t *testing.T) {
	var logs testutil.LogBuffer
	s, err := New(Options{Name: "s", Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Group: "g",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.fetching.Settle = 50 * time.Millisecond
	h := &hooks{s: s}
	b1 := kgo.BrokerMetadata{Host: "b1", Port: 9092}
	b2 := kgo.BrokerMetadata{Host: "b2", Port: 9092}
	h.broke(b1, errors.New("connection reset"))
	h.works()                                   // the first success: the "back" line is pending
	h.broke(b2, errors.New("connection reset")) // a late failure: same outage
	h.works()                                   // before the pending line was due
	time.Sleep(2 * s.fetching.Settle)           // the pending line is dropped
	for range 10 {
		h.works()
		time.Sleep(s.fetching.Settle / 2)
	}
	testutil.Eventually(t, 5*time.Second, "fetching again", func() bool {
		return strings.Contains(logs.String(), "kafka fetching again")
	})
	if n := strings.Count(logs.String(), "kafka fetch failing"); n != 1 {
		t.Fatalf("%d \"fetch failing\" lines, want 1:\n%s", n, logs.String())
	}
}
