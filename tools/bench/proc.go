package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// child is one row's consumer process: the proxy, or this binary in a
// bare mode. Both serve their progress on an admin address.
type child struct {
	pid     int
	admin   string
	logPath string
	proxy   bool
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	once    sync.Once
	stopErr error
	hc      *http.Client
}

func startChild(ctx context.Context, bin string, args, env []string, admin, logPath string, proxy bool) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &child{
		pid: cmd.Process.Pid, admin: admin, logPath: logPath, proxy: proxy, cmd: cmd,
		done: make(chan struct{}),
		// No gzip: compressing /metrics would cost the measured process.
		hc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2, Proxy: nil, DisableCompression: true}},
	}
	go func() { c.exitErr = cmd.Wait(); logf.Close(); close(c.done) }()
	return c, nil
}

// stop sends SIGTERM and waits; it reports a non-zero exit (the proxy
// must shut down cleanly) or a process that had to be killed.
func (c *child) stop() error {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
			if c.exitErr != nil {
				c.stopErr = fmt.Errorf("%s exited with %v after SIGTERM (log: %s)", filepath.Base(c.cmd.Path), c.exitErr, c.logPath)
			}
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
			c.stopErr = fmt.Errorf("%s did not stop within 30s of SIGTERM (log: %s)", filepath.Base(c.cmd.Path), c.logPath)
		}
		c.hc.CloseIdleConnections()
	})
	return c.stopErr
}

func (c *child) exited() error {
	select {
	case <-c.done:
		out, _ := os.ReadFile(c.logPath)
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		return fmt.Errorf("%s exited early: %v\n%s", filepath.Base(c.cmd.Path), c.exitErr, out)
	default:
		return nil
	}
}

// sample is one progress reading.
type sample struct {
	t        time.Time
	settled  int64   // acked (or dead-lettered) messages so far
	inflight float64 // proxy only
	requeued int64   // proxy only: result="requeued"
	busy     int64   // proxy only: event="busy"
}

// poll reads the child's progress: the proxy's /metrics (messages
// forwarded, skipped as duplicates or dead-lettered), a bare child's
// /stats.
func (c *child) poll(ctx context.Context) (sample, error) {
	path := "/stats"
	if c.proxy {
		path = "/metrics"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.admin+path, nil)
	if err != nil {
		return sample{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return sample{}, fmt.Errorf("%s: status %d", path, resp.StatusCode)
	}
	s := sample{}
	if !c.proxy {
		var st bareStatus
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return sample{}, err
		}
		s.settled = st.Settled
		s.t = time.Now()
		return s, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("dedupe_proxy_messages_total{")):
			if bytes.Contains(line, []byte(`result="requeued"`)) {
				s.requeued += int64(lastFloat(line))
				continue
			}
			s.settled += int64(lastFloat(line))
		case bytes.HasPrefix(line, []byte("dedupe_proxy_events_total{")) && bytes.Contains(line, []byte(`event="busy"`)):
			s.busy += int64(lastFloat(line))
		case bytes.HasPrefix(line, []byte("dedupe_proxy_inflight_messages{")):
			s.inflight += lastFloat(line)
		}
	}
	s.t = time.Now()
	return s, sc.Err()
}

// scrape reads every series of the proxy's /metrics whose name starts
// with one of prefixes, by its full name with labels.
func (c *child) scrape(ctx context.Context, prefixes ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		for _, p := range prefixes {
			if bytes.HasPrefix(line, []byte(p)) {
				i := bytes.LastIndexByte(line, ' ')
				out[string(line[:i])] = lastFloat(line)
				break
			}
		}
	}
	return out, sc.Err()
}

func lastFloat(line []byte) float64 {
	i := bytes.LastIndexByte(line, ' ')
	v, _ := strconv.ParseFloat(string(line[i+1:]), 64)
	return v
}

// waitFirst polls until the first message is settled.
func (c *child) waitFirst(ctx context.Context, deadline time.Time) (sample, error) {
	for {
		if err := c.exited(); err != nil {
			return sample{}, err
		}
		s, err := c.poll(ctx)
		if err == nil && s.settled > 0 {
			return s, nil
		}
		if ctx.Err() != nil {
			return sample{}, ctx.Err()
		}
		if time.Now().After(deadline) {
			return sample{}, fmt.Errorf("no message settled before the row timeout (last poll error: %v; log: %s)", err, c.logPath)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// drain polls until target messages are settled and returns the samples
// from first (when set) to the one that saw the target. It polls every
// 50 ms, and faster as the end nears, so the end time is precise without
// polling the child (whose CPU is being measured) hundreds of times.
func (c *child) drain(ctx context.Context, target int64, deadline time.Time, first sample) ([]sample, error) {
	var out []sample
	if !first.t.IsZero() {
		out = append(out, first)
	}
	for {
		s, err := c.poll(ctx)
		if err != nil {
			if e := c.exited(); e != nil {
				return out, e
			}
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
		} else {
			out = append(out, s)
			if s.settled >= target {
				return out, nil
			}
		}
		if time.Now().After(deadline) {
			got := int64(0)
			if len(out) > 0 {
				got = out[len(out)-1].settled
			}
			return out, fmt.Errorf("only %d of %d messages settled in time", got, target)
		}
		wait := 50 * time.Millisecond
		if len(out) >= 2 {
			a, z := out[0], out[len(out)-1]
			if rate := float64(z.settled-a.settled) / z.t.Sub(a.t).Seconds(); rate > 0 {
				eta := time.Duration(float64(target-z.settled) / rate * float64(time.Second))
				wait = min(max(eta/5, 2*time.Millisecond), 50*time.Millisecond)
			}
		}
		time.Sleep(wait)
	}
}

func (c *child) latencyStart(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.admin+"/latency/start", nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func (c *child) latency(ctx context.Context) ([]time.Duration, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.admin+"/latency", nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ns []int64
	if err := json.NewDecoder(resp.Body).Decode(&ns); err != nil {
		return nil, err
	}
	out := make([]time.Duration, len(ns))
	for i, v := range ns {
		out[i] = time.Duration(v)
	}
	return out, nil
}

// cpuTime is utime+stime of every thread of pid, from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	// The command name (field 2) may hold spaces; count from after it.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("cpu time: short /proc/<pid>/stat")
	}
	// Fields 14 and 15 (utime, stime) are at 11 and 12 after field 2, in
	// clock ticks; USER_HZ is 100 on Linux.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("cpu time: unreadable utime/stime")
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// machineBusy is the CPU time all cores spent not idle, from /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, errors.New("unexpected /proc/stat")
	}
	// user nice system idle iowait irq softirq steal; guest time is
	// already in user.
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond, nil
}

// listenerPID finds the process listening on 127.0.0.1/0.0.0.0 TCP port
// (the local RabbitMQ) by matching the socket inode of /proc/net/tcp in
// /proc/<pid>/fd; 0 when it cannot be found (another user's process).
func listenerPID(port int) int {
	inode := ""
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			fs := strings.Fields(line)
			// sl local_address rem_address st ... inode(9)
			if len(fs) < 10 || fs[3] != "0A" {
				continue
			}
			if _, p, ok := strings.Cut(fs[1], ":"); ok {
				if n, err := strconv.ParseInt(p, 16, 32); err == nil && int(n) == port {
					inode = fs[9]
					break
				}
			}
		}
		if inode != "" {
			break
		}
	}
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, fd := range fds {
			if l, _ := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); l == want {
				return pid
			}
		}
	}
	return 0
}

// peakRSS is VmHWM of pid in MiB.
func peakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			kb, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, errors.New("peak RSS: no VmHWM")
}

// redisServer is the private seen-set Redis: its INFO counters belong to
// the benchmark alone.
type redisServer struct {
	addr    string
	version string
	cmd     *exec.Cmd
	done    chan struct{}
	c       *redis.Client
}

func startRedis(ctx context.Context, bin, dir string) (*redisServer, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (%v): install it or pass -redis-server", err)
	}
	var errs []error
	for range 3 { // a free port can be taken before redis binds it
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(path, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		s := &redisServer{addr: addr, cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(s.done) }()
		// One connection: every INFO is exactly one read on the server.
		s.c = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MinIdleConns: 1})
		deadline := time.Now().Add(10 * time.Second)
		for {
			err = s.c.Ping(ctx).Err()
			if err == nil || time.Now().After(deadline) {
				break
			}
			select {
			case <-s.done:
				deadline = time.Time{}
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err == nil {
			info, _ := s.c.Info(ctx, "server").Result()
			s.version = infoField(info, "redis_version")
			return s, nil
		}
		errs = append(errs, err)
		s.stop()
	}
	return nil, fmt.Errorf("private redis-server did not start: %w", errors.Join(errs...))
}

func (s *redisServer) stop() {
	_ = s.c.Close()
	_ = s.cmd.Process.Kill()
	<-s.done
}

// redisStats is one INFO reading.
type redisStats struct {
	reads int64            // total_reads_processed: one per request batch a client sent
	cpu   time.Duration    // used_cpu_sys + used_cpu_user
	calls map[string]int64 // commandstats calls, scripts' inner calls included
}

// redisDelta is what one phase cost Redis.
type redisDelta struct {
	trips   int64 // network round trips (reads), the benchmark's own INFO excluded
	cmds    int64 // commands executed, inner calls of scripts included, INFO excluded
	scripts int64 // EVAL/EVALSHA/FCALL calls
	cpu     time.Duration
	calls   map[string]int64 // per command, INFO excluded
}

func (s *redisServer) snapshot(ctx context.Context) (redisStats, error) {
	info, err := s.c.Info(ctx, "stats", "cpu", "commandstats").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("private redis INFO: %w", err)
	}
	st := redisStats{calls: map[string]int64{}}
	st.reads, _ = strconv.ParseInt(infoField(info, "total_reads_processed"), 10, 64)
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, _ := strconv.ParseFloat(infoField(info, f), 64)
		st.cpu += time.Duration(v * float64(time.Second))
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, vals, _ := strings.Cut(rest, ":")
		for kv := range strings.SplitSeq(vals, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				st.calls[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return st, nil
}

func (a redisStats) sub(b redisStats) redisDelta {
	d := redisDelta{trips: a.reads - b.reads - 1, cpu: a.cpu - b.cpu, calls: map[string]int64{}} // a's own INFO was read before it ran
	for name, n := range a.calls {
		n -= b.calls[name]
		if n != 0 && name != "info" {
			d.calls[name] = n
		}
		switch name {
		case "info":
			continue
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			d.scripts += n
		}
		d.cmds += n
	}
	return d
}

func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// app is the no-op app: it reads the body, takes the publish time from
// its first field, counts, and answers 204 (after delay, when set: a
// slow app).
type app struct {
	url       string
	delay     time.Duration
	srv       *http.Server
	n         atomic.Int64
	mark      atomic.Int64
	markNanos atomic.Int64
	rec       atomic.Bool
	mu        sync.Mutex
	lat       []time.Duration
}

var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func startApp(delay time.Duration) (*app, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &app{url: "http://" + ln.Addr().String(), delay: delay}
	a.srv = &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	buf := bodyBufs.Get().(*bytes.Buffer)
	buf.Reset()
	_, _ = buf.ReadFrom(r.Body)
	ts := publishTime(buf.Bytes())
	bodyBufs.Put(buf)
	now := time.Now().UnixNano()
	if n := a.n.Add(1); n == a.mark.Load() {
		a.markNanos.Store(now)
	}
	if ts > 0 && a.rec.Load() {
		a.mu.Lock()
		a.lat = append(a.lat, time.Duration(now-ts))
		a.mu.Unlock()
	}
	if a.delay > 0 {
		// After the arrival was recorded: latency stays publish→app.
		time.Sleep(a.delay)
	}
	w.WriteHeader(http.StatusNoContent)
}

// publishTime reads the leading {"ts":<unix nanos> of a bench message.
func publishTime(b []byte) int64 {
	const pfx = `{"ts":`
	if !bytes.HasPrefix(b, []byte(pfx)) {
		return 0
	}
	var ts int64
	for _, c := range b[len(pfx):] {
		if c < '0' || c > '9' {
			break
		}
		ts = ts*10 + int64(c-'0')
	}
	return ts
}

func (a *app) reset() {
	a.n.Store(0)
	a.mark.Store(0)
	a.markNanos.Store(0)
}

func (a *app) count() int64 { return a.n.Load() }

// markAt records the time the n-th request of this row arrives.
func (a *app) markAt(n int64) { a.mark.Store(n) }

func (a *app) markTime() time.Time {
	if ns := a.markNanos.Load(); ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// record starts (on) or stops recording latencies; stopping returns them.
func (a *app) record(on bool) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.lat
	a.lat = nil
	a.rec.Store(on)
	return out
}

func (a *app) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
}

// profiler fetches a CPU profile and two heap snapshots (allocations
// from the start of the drain to its end are their difference) from the
// proxy's pprof endpoints.
type profiler struct {
	admin string
	base  []byte
	err   error
	cpu   chan []byte
	cerr  chan error
	hc    *http.Client
}

func startProfile(ctx context.Context, admin string, d time.Duration) *profiler {
	p := &profiler{admin: admin, cpu: make(chan []byte, 1), cerr: make(chan error, 1), hc: &http.Client{Timeout: d + 30*time.Second}}
	p.base, p.err = p.get(ctx, "/debug/pprof/allocs")
	go func() {
		b, err := p.get(ctx, "/debug/pprof/profile?seconds="+strconv.Itoa(int(d.Seconds())))
		p.cpu <- b
		p.cerr <- err
	}()
	return p
}

func (p *profiler) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", path, resp.StatusCode)
	}
	return io.ReadAll(resp.Body)
}

func (p *profiler) finish(ctx context.Context, dir, name string) error {
	allocs, err := p.get(ctx, "/debug/pprof/allocs")
	cpu, cerr := <-p.cpu, <-p.cerr
	if err := errors.Join(p.err, err, cerr); err != nil {
		return err
	}
	for file, b := range map[string][]byte{"cpu": cpu, "allocs-base": p.base, "allocs": allocs} {
		if err := os.WriteFile(filepath.Join(dir, name+"-"+file+".pprof"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}
