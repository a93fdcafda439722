package pipeline

import (
	"fmt"
	"testing"
	"time"
)

func TestBouncesCountPerKeyAndEnd(t *testing.T) {
	b := bounces{stale: time.Minute}
	now := time.Now()
	for want := 1; want <= 3; want++ {
		if n := b.add("k", now); n != want {
			t.Fatalf("add #%d = %d", want, n)
		}
	}
	if n := b.add("other", now); n != 1 {
		t.Fatalf("another key starts at %d, want 1", n)
	}
	if n := b.add("", now); n != 1 || b.n.Load() != 2 {
		t.Fatalf("no key: %d, %d counted; want 1 and nothing kept", n, b.n.Load())
	}
	b.end("k")
	if n := b.add("k", now); n != 1 {
		t.Fatalf("after end, add = %d, want 1", n)
	}
	b.end("never-added")
	if b.n.Load() != 2 || !b.counting() {
		t.Fatalf("%d keys counted, want 2", b.n.Load())
	}
}

// A message can leave without a settle here (another replica, a
// delivery limit, a purge): a count not added to for longer than stale
// starts again at one.
func TestBouncesGoStale(t *testing.T) {
	b := bounces{stale: time.Minute}
	now := time.Now()
	b.add("k", now)
	b.add("k", now.Add(50*time.Second))
	if n := b.add("k", now.Add(100*time.Second)); n != 3 {
		t.Fatalf("bounces within stale of each other = %d, want 3", n)
	}
	if n := b.add("k", now.Add(200*time.Second)); n != 1 {
		t.Fatalf("a bounce past stale = %d, want 1", n)
	}
}

// Past maxBounced keys a new key is not kept (its wait stays at the
// first) unless stale counts make room, and the keys already counted go
// on counting.
func TestBouncesAreBounded(t *testing.T) {
	b := bounces{stale: time.Minute}
	now := time.Now()
	for i := range maxBounced {
		b.add(fmt.Sprint(i), now)
	}
	if n := b.add("new", now); n != 1 || b.n.Load() != maxBounced {
		t.Fatalf("add past the bound = %d with %d kept; want 1 with %d", n, b.n.Load(), maxBounced)
	}
	if n := b.add("0", now); n != 2 {
		t.Fatalf("a counted key at the bound = %d, want 2", n)
	}
	b.end("0")
	if n := b.add("new", now); n != 1 || b.n.Load() != maxBounced {
		t.Fatalf("after one ended, a new key = %d with %d kept", n, b.n.Load())
	}
	if n := b.add("new", now); n != 2 {
		t.Fatalf("the new key counted on = %d, want 2", n)
	}
	// Later, every count has gone stale, new's too (it restarts at one
	// and is live again): a full map drops the stale ones.
	later := now.Add(2 * time.Minute)
	if n := b.add("new", later.Add(-time.Second)); n != 1 {
		t.Fatalf("new, past stale = %d, want 1", n)
	}
	if n := b.add("newer", later); n != 1 || b.n.Load() != 2 {
		t.Fatalf("past stale, a new key = %d with %d kept; want 1 with 2 (new's and its own)", n, b.n.Load())
	}
	if n := b.add("new", later); n != 2 {
		t.Fatalf("the live count = %d, want 2", n)
	}
}
