package pipeline

import (
	"fmt"
	"testing"
)

func TestBouncesCountPerKeyAndEnd(t *testing.T) {
	var b bounces
	for want := 1; want <= 3; want++ {
		if n := b.add("k"); n != want {
			t.Fatalf("add #%d = %d", want, n)
		}
	}
	if n := b.add("other"); n != 1 {
		t.Fatalf("another key starts at %d, want 1", n)
	}
	if n := b.add(""); n != 1 || b.n.Load() != 2 {
		t.Fatalf("no key: %d, %d counted; want 1 and nothing kept", n, b.n.Load())
	}
	b.end("k")
	if n := b.add("k"); n != 1 {
		t.Fatalf("after end, add = %d, want 1", n)
	}
	b.end("never-added")
	if b.n.Load() != 2 {
		t.Fatalf("%d keys counted, want 2", b.n.Load())
	}
}

// Past maxBounced keys a new key is not kept (its wait stays at the
// first), and the keys already counted go on counting.
func TestBouncesAreBounded(t *testing.T) {
	var b bounces
	for i := range maxBounced {
		b.add(fmt.Sprint(i))
	}
	if n := b.add("new"); n != 1 || b.n.Load() != maxBounced {
		t.Fatalf("add past the bound = %d with %d kept; want 1 with %d", n, b.n.Load(), maxBounced)
	}
	if n := b.add("0"); n != 2 {
		t.Fatalf("a counted key at the bound = %d, want 2", n)
	}
	b.end("0")
	if n := b.add("new"); n != 1 || b.n.Load() != maxBounced {
		t.Fatalf("after one ended, a new key = %d with %d kept", n, b.n.Load())
	}
	if n := b.add("new"); n != 2 {
		t.Fatalf("the new key counted on = %d, want 2", n)
	}
}
