package backoff

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestDelayIsExponentialAndCapped(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 100, 100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		attempt := i - 1 // -1 and 0 count as 1
		if got := p.Delay(attempt, 0); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %s, want %s", attempt, got, w*time.Millisecond)
		}
	}
	// No overflow, however many attempts: the cap holds.
	huge := Policy{Initial: time.Second, Max: time.Duration(math.MaxInt64)}
	for _, n := range []int{62, 63, 64, 100, math.MaxInt32} {
		if got := huge.Delay(n, 0); got <= 0 {
			t.Errorf("Delay(%d) with Max MaxInt64 = %s", n, got)
		}
	}
	if got := (Policy{Initial: time.Second, Max: time.Millisecond}).Delay(5, 0); got != time.Second {
		t.Errorf("Max below Initial: Delay = %s, want Initial", got)
	}
	if got := (Policy{}).Delay(3, 0); got != MinDelay {
		t.Errorf("zero Policy: Delay = %s, want MinDelay", got)
	}
}

func TestFloorIsCappedAtMax(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for _, tc := range []struct {
		floor, want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{50 * time.Millisecond, 100 * time.Millisecond}, // the exponential delay is longer
		{2 * time.Second, 2 * time.Second},
		{time.Hour, 5 * time.Second}, // a Retry-After of an hour parks no worker
	} {
		if got := p.Delay(1, tc.floor); got != tc.want {
			t.Errorf("Delay(1, %s) = %s, want %s", tc.floor, got, tc.want)
		}
	}
}

func TestJitterStaysInItsBandAndVaries(t *testing.T) {
	p := Policy{Initial: time.Second, Max: time.Second, Jitter: 0.2}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := p.Delay(1, 0)
		if d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("Delay = %s, outside 1s ± 20%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("1000 jittered delays took only %d values", len(seen))
	}
	// A floor wins over jitter: a Retry-After is honoured exactly.
	if got := p.Delay(1, 1500*time.Millisecond); got != time.Second {
		t.Errorf("floor above Max: Delay = %s, want Max", got)
	}
}

func TestBackoffNextAndReset(t *testing.T) {
	b := New(Policy{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond})
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
	}
	want := []time.Duration{10, 20, 40, 40}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("Next sequence %v, want %v ms", got, want)
		}
	}
	if b.Attempts() != 4 {
		t.Errorf("Attempts = %d, want 4", b.Attempts())
	}
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond {
		t.Errorf("after Reset, Next = %s, want Initial", d)
	}
}

func TestWait(t *testing.T) {
	start := time.Now()
	if !Wait(context.Background(), nil, 20*time.Millisecond) {
		t.Error("Wait with nothing to end it returned false")
	}
	if e := time.Since(start); e < 20*time.Millisecond {
		t.Errorf("Wait returned after %s, want at least 20ms", e)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	start = time.Now()
	if Wait(ctx, nil, time.Minute) {
		t.Error("Wait returned true although ctx ended")
	}
	if e := time.Since(start); e > 10*time.Second {
		t.Errorf("Wait took %s to see ctx end", e)
	}
	if Wait(ctx, nil, 0) {
		t.Error("Wait on an ended ctx returned true")
	}

	stop := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(stop) }()
	if Wait(context.Background(), stop, time.Minute) {
		t.Error("Wait returned true although stop closed")
	}
	if Wait(context.Background(), stop, 0) {
		t.Error("Wait on a closed stop returned true")
	}
}
