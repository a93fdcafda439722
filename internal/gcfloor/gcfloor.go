// Package gcfloor keeps the Go heap's collection target from falling
// below a floor.
//
// The proxy's live heap is small (a few MiB on RabbitMQ and the Redis
// sources), and Go collects when the heap has grown by GOGC percent of
// it: every 4–8 MiB allocated, many times a second at full load, each
// cycle scanning every goroutine's stack. A floor lets the heap grow to
// a fixed size before a cycle instead, which cuts those cycles by the
// ratio of the floor to the live heap. A ballast (a large never-touched
// allocation) would do the same for a small heap but add its size to
// every target, so a process whose live heap is already large (Kafka's
// fetched records) would grow by the ballast's size for nothing. The
// floor changes nothing once twice the live heap is above it.
//
// The runtime has no floor setting: GOGC multiplies the live heap, and
// GOMEMLIMIT is a ceiling. So the percentage is set after each cycle
// from the live heap that cycle measured: the smallest GOGC that puts
// the next target at the floor, and never less than the GOGC the
// process was started with.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// minHeap is the runtime's smallest heap target at GOGC=100
// (defaultHeapMinimum); the runtime scales it with GOGC, so while the
// live heap is tiny a GOGC of 100×floor/minHeap puts the target at the
// floor.
const minHeap = 4 << 20

// Floor keeps the collection target at or above its size. The setting is
// the process's: while one Floor runs, Start returns it again (several
// proxies in one test binary share it), and the last Stop restores the
// GOGC the process started with.
type Floor struct {
	users int // under running's lock

	floor int64
	base  int // GOGC at start
	max   int // the GOGC that puts the runtime's minimum target at the floor

	stopped atomic.Bool
	mu      sync.Mutex
	percent int
	samples []metrics.Sample
	cycles  atomic.Int64
}

// Start sets the floor, in bytes. It returns nil, and changes nothing,
// when floor is not positive or GOGC=off (the operator took the
// collector's pacing over; GOMEMLIMIT alone then decides).
func Start(floor int64) *Floor {
	base, ok := envGOGC(os.Getenv("GOGC"))
	if floor <= 0 || !ok {
		return nil
	}
	running.Lock()
	defer running.Unlock()
	if running.f != nil {
		running.f.users++
		return running.f
	}
	f := &Floor{
		users: 1,
		floor: floor,
		base:  base,
		max:   max(base, int(floor*100/minHeap)),
		samples: []metrics.Sample{
			{Name: "/gc/heap/live:bytes"},
			{Name: "/gc/scan/stack:bytes"},
			{Name: "/gc/scan/globals:bytes"},
		},
	}
	f.adjust()
	f.arm()
	running.f = f
	return f
}

var running struct {
	sync.Mutex
	f *Floor
}

// envGOGC reads GOGC as the runtime does: unset or empty is 100, "off"
// is no collector pacing at all (ok false).
func envGOGC(s string) (int, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 100, true
	}
	if s == "off" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 100, true // the runtime ignores a GOGC it cannot read
	}
	if n < 0 {
		return 0, false
	}
	return n, true
}

// Stop ends this user's floor; the last one restores the starting GOGC,
// and later cycles leave it alone.
func (f *Floor) Stop() {
	if f == nil {
		return
	}
	running.Lock()
	defer running.Unlock()
	if f.users--; f.users > 0 || !f.stopped.CompareAndSwap(false, true) {
		return
	}
	running.f = nil
	f.mu.Lock()
	defer f.mu.Unlock()
	debug.SetGCPercent(f.base)
	f.percent = f.base
}

// Percent is the GOGC the floor set last.
func (f *Floor) Percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent
}

// Cycles counts the collections the floor was recomputed after.
func (f *Floor) Cycles() int64 { return f.cycles.Load() }

// arm schedules adjust after the next collection: a finalizer runs once
// the object it is set on was found unreachable, which a cycle does, and
// re-arming from it follows every cycle without polling.
func (f *Floor) arm() {
	s := new(sentinel)
	s.f = f
	runtime.SetFinalizer(s, func(s *sentinel) {
		if s.f.stopped.Load() {
			return
		}
		s.f.cycles.Add(1)
		s.f.adjust()
		s.f.arm()
	})
}

// sentinel holds a pointer, which keeps it out of the tiny allocator: a
// tiny object shares its block with others and is finalized late.
type sentinel struct{ f *Floor }

// adjust sets GOGC so that the next target is at least the floor: the
// target is live + (live + stacks + globals) × GOGC/100.
func (f *Floor) adjust() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Load() {
		return
	}
	metrics.Read(f.samples)
	var v [3]int64
	for i, s := range f.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = int64(s.Value.Uint64())
		}
	}
	live, roots := v[0], v[0]+v[1]+v[2]
	p := f.max
	if live > 0 && roots > 0 && live < f.floor {
		p = int((f.floor - live) * 100 / roots)
	} else if live >= f.floor {
		p = f.base
	}
	p = min(max(p, f.base), f.max)
	if p != f.percent {
		debug.SetGCPercent(p)
		f.percent = p
	}
}
