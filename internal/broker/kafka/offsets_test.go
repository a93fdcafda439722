package kafka

import (
	"math/rand/v2"
	"testing"
)

func TestTrackerContiguousMark(t *testing.T) {
	tr := newTracker(10)
	if _, ok := tr.candidate(); ok {
		t.Fatal("candidate before anything finished")
	}
	for off := int64(10); off < 15; off++ {
		tr.add(off)
	}
	// Out of order: 12 and 14 first; 10 unfinished holds the mark.
	tr.finish(12)
	tr.finish(14)
	if off, ok := tr.candidate(); ok {
		t.Fatalf("candidate %d past unfinished offset 10", off)
	}
	tr.finish(10)
	if off, _ := tr.candidate(); off != 11 {
		t.Fatalf("candidate = %d, want 11 (11 unfinished)", off)
	}
	tr.finish(11)
	if off, _ := tr.candidate(); off != 13 {
		t.Fatalf("candidate = %d, want 13 (13 unfinished)", off)
	}
	tr.finish(13)
	if off, _ := tr.candidate(); off != 15 {
		t.Fatalf("candidate = %d, want 15", off)
	}
	if w := tr.window(); w != 0 {
		t.Fatalf("window = %d, want 0", w)
	}
}

func TestTrackerNeverBackwards(t *testing.T) {
	tr := newTracker(100)
	// A reader that reset below the committed offset (log truncated and
	// refilled): finished work below 100 must not move the group back.
	for off := int64(50); off < 60; off++ {
		tr.add(off)
		tr.finish(off)
	}
	if off, ok := tr.candidate(); ok {
		t.Fatalf("candidate %d below committed 100", off)
	}
	tr.committedTo(120)
	tr.committedTo(80) // an out-of-date success must not lower it
	if got := tr.committedOffset(); got != 120 {
		t.Fatalf("committed = %d, want 120", got)
	}
}

func TestTrackerGaps(t *testing.T) {
	// Compacted topics and transaction markers leave holes in the offsets.
	tr := newTracker(-1)
	for _, off := range []int64{3, 7, 8, 20} {
		tr.add(off)
	}
	tr.finish(20)
	tr.finish(7)
	if _, ok := tr.candidate(); ok {
		t.Fatal("candidate while 3 is unfinished")
	}
	tr.finish(3)
	if off, _ := tr.candidate(); off != 8 {
		t.Fatalf("candidate = %d, want 8", off)
	}
	tr.finish(8)
	if off, _ := tr.candidate(); off != 21 {
		t.Fatalf("candidate = %d, want 21", off)
	}
	if tr.add(20) || tr.add(5) {
		t.Fatal("add accepted an offset not above the last one")
	}
	if n := tr.finish(999); n != 4 {
		t.Fatalf("finish of an unknown offset changed the count to %d", n)
	}
	tr.committedTo(21)
	tr.add(30)
	tr.add(31)
	if n := tr.finish(31); n != 0 {
		t.Fatalf("a finish behind an unfinished message counts %d toward commit_every, want 0", n)
	}
	if n := tr.finish(30); n != 2 {
		t.Fatalf("count = %d once the mark passed both, want 2", n)
	}
}

// Random finishing orders and commits at random moments: the committed
// offset never decreases and never passes an unfinished message.
func TestTrackerRandomOrder(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		start := int64(r.IntN(1000))
		tr := newTracker(start)
		n := 1 + r.IntN(300)
		offs := make([]int64, 0, n)
		next := start
		for range n {
			next += 1 + int64(r.IntN(3)) // gaps
			offs = append(offs, next)
			tr.add(next)
		}
		finished := map[int64]bool{}
		committed := start
		for _, i := range r.Perm(n) {
			tr.finish(offs[i])
			finished[offs[i]] = true
			if r.IntN(3) == 0 {
				off, ok := tr.candidate()
				if !ok {
					continue
				}
				if off <= committed {
					t.Fatalf("seed %d: candidate %d not above committed %d", seed, off, committed)
				}
				for _, o := range offs {
					if o < off && !finished[o] {
						t.Fatalf("seed %d: candidate %d passes unfinished %d", seed, off, o)
					}
				}
				tr.committedTo(off)
				committed = off
			}
		}
		if off, ok := tr.candidate(); ok {
			committed = off
		}
		if want := offs[n-1] + 1; committed != want {
			t.Fatalf("seed %d: all finished, commit at %d, want %d", seed, committed, want)
		}
	}
}
