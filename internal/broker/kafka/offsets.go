package kafka

import (
	"sort"
	"sync"
)

// tracker follows one partition's offsets for one generation: which fetched
// messages are finished, and so which offset may be committed.
//
// Kafka stores one offset per partition, and committing offset N says
// "everything below N is done". So the committable offset is the contiguous
// finished mark: one past the last finished message that has no unfinished
// message before it. A message finished out of order (key mode) is
// remembered until every message before it is finished too.
//
// Two rules keep the committed offset safe, whatever order messages finish
// in and however often commit is called:
//   - never past an unfinished message: candidate() ≤ the lowest
//     unfinished offset;
//   - never backwards: candidate() only offers an offset above the last
//     committed one (a commit is stored as sent, lower or not).
type tracker struct {
	mu sync.Mutex
	// entries[head:] are the fetched offsets not yet passed by mark, in
	// fetch order (ascending).
	entries []entry
	head    int
	// mark is one past the last contiguously finished offset; -1 until a
	// message at the front of the window finished.
	mark int64
	// committed is the offset the group holds for this partition as far as
	// this generation knows (the assignment's offset, then every commit
	// that succeeded); -1 when the group had none.
	committed int64
	// last is the highest offset added, so add can refuse going backwards.
	last int64
	// passedSinceCommit counts messages the mark passed since the last
	// successful commit, for commit_every: finishing a message behind an
	// unfinished one gives nothing to commit yet.
	passedSinceCommit int
	// space is signalled when the window shrinks.
	space chan struct{}
}

type entry struct {
	off  int64
	done bool
}

func newTracker(committed int64) *tracker {
	if committed < 0 {
		committed = -1
	}
	return &tracker{mark: -1, committed: committed, last: -1, space: make(chan struct{}, 1)}
}

// add records a fetched message. Offsets must be added in increasing order
// (a partition reader delivers them so); a lower or repeated offset is
// ignored and reported false.
func (t *tracker) add(off int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if off <= t.last {
		return false
	}
	t.last = off
	if t.head > 0 && t.head == len(t.entries) {
		t.entries, t.head = t.entries[:0], 0
	}
	t.entries = append(t.entries, entry{off: off})
	return true
}

// finish marks off finished and advances the mark over every finished
// message at the front of the window. It reports how many messages the
// mark passed since the last commit. Finishing an unknown or already
// finished offset does nothing.
func (t *tracker) finish(off int64) (sinceCommit int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.entries[t.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].off >= off })
	if i == len(live) || live[i].off != off || live[i].done {
		return t.passedSinceCommit
	}
	live[i].done = true
	advanced := false
	for t.head < len(t.entries) && t.entries[t.head].done {
		t.mark = t.entries[t.head].off + 1
		t.head++
		t.passedSinceCommit++
		advanced = true
	}
	if t.head > 1024 && t.head*2 > len(t.entries) {
		n := copy(t.entries, t.entries[t.head:])
		t.entries, t.head = t.entries[:n], 0
	}
	if advanced {
		select {
		case t.space <- struct{}{}:
		default:
		}
	}
	return t.passedSinceCommit
}

// candidate is the offset to commit now, if there is one: the mark, when
// it is above what the group already holds.
func (t *tracker) candidate() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mark < 0 || t.mark <= t.committed {
		return 0, false
	}
	return t.mark, true
}

// committedTo records a successful commit of off; it never lowers the
// committed offset.
func (t *tracker) committedTo(off int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if off > t.committed {
		t.committed = off
		t.passedSinceCommit = 0
	}
}

// committedOffset is the offset the group holds, -1 when unknown.
func (t *tracker) committedOffset() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.committed
}

// window is the number of fetched messages not yet passed by the mark:
// running, waiting for their key, or finished after an unfinished one.
func (t *tracker) window() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries) - t.head
}

// lowestUnfinished is the offset a restart would resume from at best, or
// -1 when every fetched message is finished.
func (t *tracker) lowestUnfinished() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head == len(t.entries) {
		return -1
	}
	return t.entries[t.head].off
}
