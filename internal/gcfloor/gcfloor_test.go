package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

var sink []byte

// churn allocates total bytes of garbage in 64 KiB pieces and returns
// how many collections ran meanwhile.
func churn(total int) uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for n := 0; n < total; n += 64 << 10 {
		sink = make([]byte, 64<<10)
	}
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

// The floor is what cuts the collector's work: with a small live heap,
// a floor of 64 MiB collects about once per 64 MiB allocated instead of
// once per few MiB.
func TestFloorCutsCollections(t *testing.T) {
	t.Setenv("GOGC", "")
	runtime.GC()
	without := churn(256 << 20)

	f := Start(64 << 20)
	if f == nil {
		t.Fatal("Start returned nil with GOGC unset")
	}
	defer f.Stop()
	runtime.GC() // the floor is recomputed after each cycle
	with := churn(256 << 20)
	t.Logf("collections while allocating 256 MiB: %d without the floor, %d with 64 MiB; GOGC now %d after %d cycles", without, with, f.Percent(), f.Cycles())
	if with > 8 || with*4 > without {
		t.Fatalf("collections with a 64 MiB floor: %d, without: %d; want at most 8 and a quarter of those without", with, without)
	}
	if f.Cycles() == 0 {
		t.Fatal("the floor was never recomputed after a collection")
	}
}

// A live heap above the floor leaves GOGC as it was: the floor must not
// grow a process whose heap is already large (Kafka's fetched records).
func TestFloorLeavesALargeHeapAlone(t *testing.T) {
	t.Setenv("GOGC", "")
	live := make([][]byte, 0, 48)
	for range 48 {
		live = append(live, make([]byte, 1<<20))
	}
	f := Start(32 << 20)
	defer f.Stop()
	runtime.GC()
	runtime.GC()
	churn(8 << 20)
	if p := f.Percent(); p != 100 {
		t.Fatalf("GOGC with 48 MiB live and a 32 MiB floor: %d, want 100", p)
	}
	runtime.KeepAlive(live)
}

func TestStopRestoresAndOffIsOff(t *testing.T) {
	t.Setenv("GOGC", "150")
	old := debug.SetGCPercent(150)
	defer debug.SetGCPercent(old)
	runtime.GC() // the live heap of earlier tests is gone
	f := Start(64 << 20)
	g := Start(64 << 20)
	if f != g {
		t.Fatal("a second Start made a second floor")
	}
	if p := f.Percent(); p <= 150 {
		t.Fatalf("GOGC under a 64 MiB floor with a tiny heap: %d, want above 150", p)
	}
	f.Stop()
	if p := debug.SetGCPercent(150); p == 150 {
		t.Fatal("the first of two Stops restored GOGC while the other user runs")
	}
	g.Stop()
	if p := debug.SetGCPercent(150); p != 150 {
		t.Fatalf("GOGC after the last Stop: %d, want the starting 150", p)
	}

	t.Setenv("GOGC", "off")
	if Start(64<<20) != nil {
		t.Fatal("Start with GOGC=off changed the collector's pacing")
	}
	if Start(0) != nil {
		t.Fatal("Start(0) started a floor")
	}
}

func TestEnvGOGC(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{{"", 100, true}, {"200", 200, true}, {" 50 ", 50, true}, {"off", 0, false}, {"-1", 0, false}, {"x", 100, true}} {
		if got, ok := envGOGC(c.in); got != c.want || ok != c.ok {
			t.Errorf("envGOGC(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
