package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Instructions per message (-only instructions): a figure that does not
// move with the machine's load, for before/after comparisons that the
// ±20% run-to-run noise of the rates would drown. Each consumer process
// drains a fixed backlog under valgrind --tool=callgrind, which counts
// the instructions it executed (every thread, the runtime and the
// kernel's share excluded: syscalls count as the instructions around
// them). Two drains of different sizes are taken and their difference
// divided by the difference in messages, so start-up, the group join and
// shutdown cancel out. Go's asynchronous preemption is switched off
// (GODEBUG=asyncpreemptoff=1): callgrind aborts on the signal it uses,
// and the cooperative scheduling that remains is what the process does
// under load anyway. RDTSCP is switched off too (cpu.rdtscp=off): the
// runtime reads the clock with it on CPUs that have it (AMD EPYC here),
// and valgrind 3.19 does not know the instruction.
//
// Each size is drained -instr-runs times and the lowest count kept. The
// noise in a Go process's count is only ever added work: the background
// sweeper yielding to the scheduler after each span while no P is idle
// (one bare Kafka drain of 3,000 counted 203,000 such yields, a third of
// its instructions, where another of the same size counted 2,500) and
// spinning on runtime locks, both of which depend on how the threads
// interleave.

// instrRow is one consumer's count.
type instrRow struct {
	kind    rowKind
	perMsg  float64    // instructions per message, from the two drains
	totals  [2]uint64  // the lowest of the runs
	spread  [2]float64 // the highest run over the lowest, minus 1
	elapsed [2]time.Duration
	err     error
}

type instrSection struct {
	broker  string
	sizes   [2]int
	rows    []*instrRow
	missing string
}

// instrKinds are the rows counted: the bare forwarder and the proxy, and
// the -baseline binary when given.
func (b *bench) instrKinds() []rowKind {
	out := []rowKind{bareForwarder, proxyUnique}
	if b.o.baseline != "" {
		out = append(out, proxyBaseline)
	}
	return out
}

func (b *bench) measureInstructions(ctx context.Context, br broker) *instrSection {
	s := &instrSection{broker: br.name(), sizes: b.o.instrSizes}
	if _, err := exec.LookPath("valgrind"); err != nil {
		s.missing = "not measured: valgrind is not installed (apt-get install valgrind)"
		return s
	}
	for _, k := range b.instrKinds() {
		if ctx.Err() != nil {
			break
		}
		r := &instrRow{kind: k}
	sizes:
		for i, n := range s.sizes {
			var high uint64
			for j := range b.o.instrRuns {
				total, elapsed, err := b.countDrain(ctx, br, k, n, i*b.o.instrRuns+j)
				if err != nil {
					r.err = err
					b.log.Warn("instruction count failed", "broker", br.short(), "row", k.letter(), "err", r.err)
					break sizes
				}
				b.log.Info("counted", "broker", br.short(), "row", k.letter(), "messages", n, "run", j+1, "instructions", total)
				if j == 0 || total < r.totals[i] {
					r.totals[i], r.elapsed[i] = total, elapsed
				}
				high = max(high, total)
			}
			r.spread[i] = float64(high)/float64(r.totals[i]) - 1
		}
		if r.err == nil {
			r.perMsg = float64(int64(r.totals[1])-int64(r.totals[0])) / float64(s.sizes[1]-s.sizes[0])
		}
		s.rows = append(s.rows, r)
	}
	return s
}

// countDrain publishes n messages, drains them with the row's consumer
// under callgrind, stops it and returns the instructions it executed.
func (b *bench) countDrain(ctx context.Context, br broker, k rowKind, n, run int) (uint64, time.Duration, error) {
	id := fmt.Sprintf("bench-%s-%s-%s-ir%d", b.runID, br.short(), k.letter(), run)
	d, err := br.newDest(ctx, id)
	if err != nil {
		return 0, 0, fmt.Errorf("create queue/topic: %w", err)
	}
	defer d.cleanup()
	key := func(i int) string { return id + "-" + strconv.Itoa(i) }
	if err := d.publish(ctx, n, key, b.body); err != nil {
		return 0, 0, fmt.Errorf("publish backlog: %w", err)
	}
	b.app.reset()
	out := filepath.Join(b.dir, id+".callgrind")
	bin, args, admin, err := b.childCommand(br, d, k, id, false)
	if err != nil {
		return 0, 0, err
	}
	vg := append([]string{"--tool=callgrind", "--callgrind-out-file=" + out, "--", bin}, args...)
	c, err := startChild(ctx, "valgrind", vg, []string{"GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off"}, admin, filepath.Join(b.dir, id+".log"), k.isProxy())
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	deadline := start.Add(b.o.instrTimeout)
	for b.app.count() < int64(n) {
		if err := c.exited(); err != nil {
			return 0, 0, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = c.cmd.Process.Kill()
			<-c.done
			return 0, 0, fmt.Errorf("%d of %d messages reached the app within %s (log: %s)", b.app.count(), n, b.o.instrTimeout, c.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	// Callgrind aborts on any signal a Go program handles (SIGTERM
	// included), so the counts are dumped while it runs (callgrind_control
	// -d, which writes out.1) and the process is then killed.
	dump := exec.CommandContext(ctx, "callgrind_control", "-d", strconv.Itoa(c.pid))
	msg, derr := dump.CombinedOutput()
	_ = c.cmd.Process.Kill()
	<-c.done
	if derr != nil {
		return 0, 0, fmt.Errorf("callgrind_control -d: %v: %s", derr, msg)
	}
	if got := b.app.count(); got != int64(n) {
		return 0, 0, fmt.Errorf("the app received %d requests, want %d", got, n)
	}
	total, err := callgrindTotal(out + ".1")
	return total, elapsed, err
}

// callgrindTotal reads the instruction count from a callgrind output
// file: its "summary:" line (or "totals:", which newer versions write).
func callgrindTotal(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("callgrind output: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"summary:", "totals:"} {
			if v, ok := strings.CutPrefix(line, p); ok {
				fields := strings.Fields(v)
				if len(fields) == 0 {
					continue
				}
				return strconv.ParseUint(fields[0], 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("callgrind output " + path + " has no summary line")
}

func (s *instrSection) rowOf(k rowKind) *instrRow {
	for _, r := range s.rows {
		if r.kind == k {
			return r
		}
	}
	return nil
}

func printInstructions(w io.Writer, sections []*instrSection) {
	if len(sections) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Instructions per message (valgrind --tool=callgrind, the consumer process, every thread):")
	const head = "%-42s %14s %14s %14s %12s\n"
	fmt.Fprintf(w, head, "", "instructions", "drain of", "drain of", "vs (b)")
	fmt.Fprintf(w, head, "", "per message", fmt.Sprintf("%d msgs", sections[0].sizes[0]), fmt.Sprintf("%d msgs", sections[0].sizes[1]), "")
	var noisy []string
	for _, s := range sections {
		fmt.Fprintln(w, s.broker)
		if s.missing != "" {
			fmt.Fprintln(w, "  "+s.missing)
			continue
		}
		bare := s.rowOf(bareForwarder)
		for _, r := range s.rows {
			name := fmt.Sprintf("  (%s) %s", r.kind.letter(), r.kind.label())
			if r.err != nil {
				fmt.Fprintf(w, "%-42s error: %v\n", name, r.err)
				continue
			}
			for i, sp := range r.spread {
				if sp > 0.02 {
					noisy = append(noisy, fmt.Sprintf("%s (%s) %d msgs +%.0f%%", s.broker, r.kind.letter(), s.sizes[i], 100*sp))
				}
			}
			ratio := ""
			if bare != nil && bare.err == nil && bare.perMsg > 0 && r != bare {
				ratio = fmt.Sprintf("%.2f× %+.0f", r.perMsg/bare.perMsg, r.perMsg-bare.perMsg)
			}
			fmt.Fprintf(w, "%-42s %14s %14s %14s %12s\n", name, thousands(r.perMsg),
				thousands(float64(r.totals[0])), thousands(float64(r.totals[1])), ratio)
		}
	}
	fmt.Fprintln(w, "  per message: (total of the larger drain − total of the smaller) / the difference in messages,")
	fmt.Fprintln(w, "  so start-up, the group join and shutdown cancel out; each drain is the lowest of its runs, as")
	fmt.Fprintln(w, "  the noise only adds work (the GC's sweeper yielding, lock spinning: how the threads interleave).")
	if len(noisy) > 0 {
		fmt.Fprintln(w, "  runs of one drain that differed by more than 2%: "+strings.Join(noisy, "; "))
	}
	fmt.Fprintln(w, "  vs (b): the ratio to the bare forwarder and the instructions the proxy adds per message.")
}

// brokersNamed are the brokers a -brokers name stands for (redis: the
// list and the stream), started if need be; nil and why when they cannot
// be measured.
func (b *bench) brokersNamed(name string) ([]broker, string) {
	switch name {
	case "rabbitmq":
		if b.rabbit == nil {
			return nil, "not measured: RabbitMQ is not set up"
		}
		return []broker{b.rabbit}, ""
	case "kafka":
		if why := b.startKafka(context.Background()); why != "" {
			return nil, why
		}
		return []broker{b.kafka}, ""
	case "redis":
		if b.redisList == nil || b.redisStream == nil {
			return nil, "not measured: the broker Redis is not set up"
		}
		return []broker{b.redisList, b.redisStream}, ""
	}
	return nil, fmt.Sprintf("not measured: unknown broker %q", name)
}
