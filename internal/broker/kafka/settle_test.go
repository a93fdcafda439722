package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/kafka/kafkatest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// A delivery settles once: after the first Ack every further Ack,
// Requeue or DeadLetter returns broker.ErrAlreadySettled. A DeadLetter
// that failed (no topic) settled nothing, so the Ack after it counts.
func TestSecondSettleReturnsErrAlreadySettled(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders"})
	c.Produce(t, "orders", records(1, 2)...)
	o := options(c, "orders")
	errs := make(chan error, 10)
	start(t, o, func(d broker.Delivery) {
		ctx := context.Background()
		if d.Message().Offset != 0 {
			_ = d.Ack(ctx)
			return
		}
		check := func(what string, err, want error) {
			if !errors.Is(err, want) {
				errs <- fmt.Errorf("%s = %v, want %v", what, err, want)
			}
		}
		check("DeadLetter without a topic", d.DeadLetter(ctx, broker.DeadLetterInfo{Reason: "x"}), broker.ErrNoDeadLetter)
		check("first Ack", d.Ack(ctx), nil)
		check("second Ack", d.Ack(ctx), broker.ErrAlreadySettled)
		check("Requeue after Ack", d.Requeue(ctx), broker.ErrAlreadySettled)
		check("DeadLetter after Ack", d.DeadLetter(ctx, broker.DeadLetterInfo{Reason: "x"}), broker.ErrAlreadySettled)
		errs <- nil
	})
	select {
	case err := <-errs:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("offset 0 never delivered")
	}
	testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(1, 2)))
}

// Two DeadLetters racing on one delivery: exactly one produces to the
// dead-letter topic, the other returns broker.ErrAlreadySettled.
func TestConcurrentDeadLettersProduceOnce(t *testing.T) {
	c := kafkatest.Start(t, 1, []string{"orders", "orders.dlq"})
	c.Produce(t, "orders", records(1, 2)...)
	o := options(c, "orders")
	o.DeadLetterTopic = "orders.dlq"
	results := make(chan []error, 1)
	start(t, o, func(d broker.Delivery) {
		if d.Message().Offset != 0 {
			_ = d.Ack(context.Background())
			return
		}
		const n = 4
		errs := make([]error, n)
		var ready, wg sync.WaitGroup
		ready.Add(n)
		wg.Add(n)
		for i := range n {
			go func() {
				defer wg.Done()
				ready.Done()
				ready.Wait()
				errs[i] = d.DeadLetter(context.Background(), broker.DeadLetterInfo{Reason: "permanent: status 400"})
			}()
		}
		wg.Wait()
		results <- errs
	})
	var errs []error
	select {
	case errs = <-results:
	case <-time.After(15 * time.Second):
		t.Fatal("offset 0 never delivered")
	}
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, broker.ErrAlreadySettled):
			t.Errorf("DeadLetter = %v, want nil or ErrAlreadySettled", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d racing DeadLetters succeeded, want 1", ok, len(errs))
	}
	testutil.Eventually(t, 10*time.Second, "committed to the end", allCommitted(t, c, o.Group, "orders", uniform(1, 2)))
	// Read waits for one more than was produced, so a second dead letter
	// would show up here.
	if msgs := c.Read(t, "orders.dlq", 0, 2, 2*time.Second); len(msgs) != 1 {
		t.Fatalf("dead-letter topic holds %d messages, want 1", len(msgs))
	}
}
