//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// proxyBinary builds the real binary once per test process.
func proxyBinary(t *testing.T) string {
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dedupe-chaos-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "dedupe-proxy")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/dedupe-proxy")
		cmd.Dir = testutil.RepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// effectApp is the consumer. With faults on it fails 5% of requests with
// 503 and lets 1% run past the proxy's app.timeout (slow) before a 503 —
// both before any effect, as a database transaction that did not commit
// — and hangs on 0.5% (setHangShare) for hang (longer than app.timeout
// and the lease) before it acts and answers 204, as an app stuck on a lock that then
// commits. Otherwise it records the request's effect durably (append +
// fsync) and answers 204. Every recorded effect counts for a naive app;
// an honouring app applies only the first effect per Idempotency-Key
// (its own dedupe table), which the suites work out from the records.
//
// Each proxy is given its own app.url, http://addr/p<n>, so every
// request says which proxy sent it.
type effectApp struct {
	srv      *http.Server
	addr     string
	file     *os.File
	mu       sync.Mutex
	effects  map[string]int // per message (the body's meta.id)
	records  []effect
	recent   []keyAt
	faults   bool
	slow     time.Duration
	hang     time.Duration
	hangPerM int // hung requests per thousand
	total    int
	failed   int
	timeout  int
	hangs    int
	inflight int
}

// effect is one request the app acted on.
type effect struct {
	key        string // its Idempotency-Key
	id         string // the message's own key, meta.id in its body
	proxy      int    // which proxy sent it (-1: unknown)
	attempt    string // X-Dedupe-Attempt
	start, end time.Time
	hung       bool // the app hung on it before acting
}

type keyAt struct {
	key string
	at  time.Time
}

func newEffectApp(t *testing.T, slow, hang time.Duration) *effectApp {
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "effects.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &effectApp{file: f, effects: map[string]int{}, addr: ln.Addr().String(), slow: slow, hang: hang, hangPerM: 5, faults: true}
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	t.Cleanup(func() { _ = a.srv.Close(); _ = f.Close() })
	return a
}

// url is the app.url for proxy n.
func (a *effectApp) url(n int) string { return fmt.Sprintf("http://%s/p%d", a.addr, n) }

func (a *effectApp) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	a.mu.Lock()
	a.inflight++
	a.total++
	faults, hangPerM := a.faults, a.hangPerM
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inflight--
		a.mu.Unlock()
	}()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	key := r.Header.Get("Idempotency-Key")
	var env struct{ Meta struct{ ID string } }
	id := key
	if json.Unmarshal(body, &env) == nil && env.Meta.ID != "" {
		id = env.Meta.ID
	}
	proxy := -1
	if rest, ok := strings.CutPrefix(r.URL.Path, "/p"); ok {
		if i := strings.IndexByte(rest, '/'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				proxy = n
			}
		}
	}
	hung := false
	if faults {
		switch n := mrand.IntN(1000); {
		case n < 50:
			a.mu.Lock()
			a.failed++
			a.mu.Unlock()
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case n < 60:
			a.mu.Lock()
			a.timeout++
			a.mu.Unlock()
			time.Sleep(a.slow)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case n < 60+hangPerM && a.hang > 0:
			// Acts after the hang whether or not the proxy is still
			// there: a transaction does not notice its client went away.
			a.mu.Lock()
			a.hangs++
			a.mu.Unlock()
			time.Sleep(a.hang)
			hung = true
		}
	}
	a.mu.Lock()
	if _, err := a.file.WriteString(key + "\n"); err == nil {
		_ = a.file.Sync()
	}
	a.effects[id]++
	a.records = append(a.records, effect{key: key, id: id, proxy: proxy, attempt: r.Header.Get("X-Dedupe-Attempt"),
		start: start, end: time.Now(), hung: hung})
	a.recent = append(a.recent, keyAt{key, time.Now()})
	if len(a.recent) > 20000 {
		a.recent = a.recent[len(a.recent)-10000:]
	}
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// effectedSince lists keys effected after t.
func (a *effectApp) effectedSince(t time.Time) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var keys []string
	for i := len(a.recent) - 1; i >= 0 && a.recent[i].at.After(t); i-- {
		keys = append(keys, a.recent[i].key)
	}
	return keys
}

// counts is the naive app's effects per message.
func (a *effectApp) counts() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[string]int, len(a.effects))
	for k, v := range a.effects {
		m[k] = v
	}
	return m
}

// effectsOf returns every effect, grouped by message, each group in the
// order the requests arrived.
func (a *effectApp) effectsOf() map[string][]effect {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[string][]effect{}
	for _, e := range a.records {
		m[e.id] = append(m[e.id], e)
	}
	for _, es := range m {
		sort.SliceStable(es, func(i, j int) bool { return es[i].start.Before(es[j].start) })
	}
	return m
}

// honouring replays the recorded effects, in the order the app made them,
// through an app that honours Idempotency-Key: it acts on a request only
// if no earlier one carried the same key, and on every request without
// one. It returns how often that app acted per message (meta.id). Its
// doubles can only come from two requests for one message with different
// keys (or none); a key shared by two messages shows as a message it
// never acted on.
func (a *effectApp) honouring() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	done := map[string]bool{}
	acted := map[string]int{}
	for _, e := range a.records {
		if e.key != "" && done[e.key] {
			continue
		}
		done[e.key] = e.key != ""
		acted[e.id]++
	}
	return acted
}

// idle waits until no request is open at the app.
func (a *effectApp) idle(ctx context.Context) bool {
	return waitUntil(ctx, 50*time.Millisecond, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.inflight == 0
	})
}

// setHangShare sets how many requests per thousand the app hangs on.
func (a *effectApp) setHangShare(perThousand int) {
	a.mu.Lock()
	a.hangPerM = perThousand
	a.mu.Unlock()
}

func (a *effectApp) setFaults(on bool) {
	a.mu.Lock()
	a.faults = on
	a.mu.Unlock()
}

// proc is one dedupe-proxy process.
type proc struct {
	bin, cfg, logDir string
	env              []string
	n                int
	mu               sync.Mutex
	cmd              *exec.Cmd
	done             chan struct{}
	starts           int
	admin            string
	started          []time.Time // every start, before the process exists
	stops            []time.Time // every SIGKILL and SIGTERM the suite sent it
}

func (p *proc) start(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts++
	p.started = append(p.started, time.Now())
	logf, err := os.Create(filepath.Join(p.logDir, fmt.Sprintf("proxy-%d-%03d.log", p.n, p.starts)))
	if err != nil {
		t.Fatal(err)
	}
	p.admin = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	cmd := exec.Command(p.bin, "run", "--config", p.cfg)
	cmd.Env = append(append(os.Environ(), p.env...), "DEDUPE_PROXY_ADMIN_LISTEN="+p.admin)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done = cmd, done
}

func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.stops = append(p.stops, time.Now())
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.cmd = nil
}

// term sends SIGTERM and reports the exit code.
func (p *proc) term(t *testing.T) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	p.stops = append(p.stops, time.Now())
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Errorf("proxy %d did not exit within 60s of SIGTERM", p.n)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	code := p.cmd.ProcessState.ExitCode()
	p.cmd = nil
	return code
}

func (p *proc) ready() bool {
	p.mu.Lock()
	admin := p.admin
	p.mu.Unlock()
	resp, err := http.Get("http://" + admin + "/readyz?deps=1")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stopOf is when the suite stopped the run of proxy n that sent a
// request the app began to read at sent: the run started last before
// sent, since a request can reach the app after its sender was killed
// (it was already on the wire) but not before its sender started. ok is
// false if that run was not stopped before until.
func stopOf(procs []*proc, n int, sent, until time.Time) (at time.Time, ok bool) {
	if n < 0 || n >= len(procs) {
		return time.Time{}, false
	}
	p := procs[n]
	p.mu.Lock()
	defer p.mu.Unlock()
	run := -1
	for i, st := range p.started {
		if !st.After(sent) {
			run = i
		}
	}
	// Starts and stops alternate: run i ends with stop i.
	if run < 0 || run >= len(p.stops) || !p.stops[run].Before(until) {
		return time.Time{}, false
	}
	return p.stops[run], true
}

// runs lists proxy n's starts and stops between from and to, for a
// failure message.
func runs(procs []*proc, n int, from, to time.Time) string {
	if n < 0 || n >= len(procs) {
		return ""
	}
	p := procs[n]
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for i, st := range p.started {
		if i < len(p.stops) && p.stops[i].Before(from) || st.After(to) {
			continue
		}
		fmt.Fprintf(&b, " started %s", st.Format("15:04:05.000"))
		if i < len(p.stops) {
			fmt.Fprintf(&b, " stopped %s;", p.stops[i].Format("15:04:05.000"))
		}
	}
	return strings.TrimSpace(b.String())
}

// Why a message was acted on twice, from its first two requests (in the
// order they reached the app) and what the suite did to the proxy that
// sent the first.
const (
	// The first request's proxy was stopped after the app had acted and
	// answered, before the second request: the success→commit window.
	causeCrashWindow = "crash window"
	// It was stopped before the app had answered the first request
	// (while the request was open, or still on the wire): the app acted
	// after its client was gone (a SIGKILL mid-request).
	causeStoppedOpen = "stopped mid-request"
	// Nothing stopped it, and the first request took longer than
	// app.timeout: the proxy let go of a request it should have waited
	// for (the hang-past-timeout overlap).
	causeHang = "hang"
	// Nothing stopped it and the first request was quick.
	causeOther = "other"
)

// classify also returns, for a stop, how long after it the second
// request came: a claim held to the end renewed at most a third of a
// lease before the stop, so it outlives it by two thirds of a lease.
func classify(es []effect, procs []*proc, timeout time.Duration) (string, time.Duration) {
	first, second := es[0], es[1]
	if at, ok := stopOf(procs, first.proxy, first.start, second.start); ok {
		if at.Before(first.end) {
			return causeStoppedOpen, second.start.Sub(at)
		}
		return causeCrashWindow, second.start.Sub(at)
	}
	if first.end.Sub(first.start) > timeout {
		return causeHang, 0
	}
	return causeOther, 0
}

func (e effect) String() string {
	return fmt.Sprintf("proxy %d attempt %s at %s took %v (hung: %v)", e.proxy, e.attempt, e.start.Format("15:04:05.000"),
		e.end.Sub(e.start).Round(time.Millisecond), e.hung)
}

// proxyEvents are the proxies' log lines about open requests and leases.
type proxyEvents struct {
	slow, abandoned, noAnswer int // past app.timeout; past app.max_request_time; connection lost or cut short, key kept
	leaseLost, commitFailed   int
}

func (e proxyEvents) timeouts() string {
	return fmt.Sprintf("%d / %d / %d", e.slow, e.abandoned, e.noAnswer)
}

func countEvents(dir string) proxyEvents {
	var e proxyEvents
	eachLogLine(dir, func(l string) {
		switch {
		case strings.Contains(l, "the app has not answered within app.timeout"):
			e.slow++
		case strings.Contains(l, "no answer from the app within app.max_request_time"):
			e.abandoned++
		case strings.Contains(l, "no answer from the app; the key stays claimed"):
			e.noAnswer++
		case strings.Contains(l, "lease lost"), strings.Contains(l, "commit refused"):
			e.leaseLost++
		case strings.Contains(l, "commit failed after the app succeeded"):
			e.commitFailed++
		}
	})
	return e
}

// keyLines returns up to max log lines that name key.
func keyLines(dir, key string, max int) []string {
	var out []string
	needle := `"key":"` + key + `"`
	eachLogLine(dir, func(l string) {
		if len(out) < max && strings.Contains(l, needle) {
			out = append(out, l)
		}
	})
	return out
}

// keyLinesWith returns the log lines that name key and contain s.
func keyLinesWith(dir, key, s string) []string {
	var out []string
	needle := `"key":"` + key + `"`
	eachLogLine(dir, func(l string) {
		if strings.Contains(l, needle) && strings.Contains(l, s) {
			out = append(out, l)
		}
	})
	return out
}

func eachLogLine(dir string, f func(string)) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(files)
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			f(filepath.Base(name) + ": " + sc.Text())
		}
		fh.Close()
	}
}

// plan: unique keys and their duplicates.
type plan struct {
	unique     []string
	main       [][]byte // originals, "soon" duplicates a few messages after their original
	concurrent map[int][]byte
	later      [][]byte // duplicates of processed keys, published after wave one drained
}

func makePlan(total int, dupRatio float64) plan {
	dups := int(float64(total) * dupRatio)
	uniq := total - dups
	run := randHex(3)
	p := plan{concurrent: map[int][]byte{}}
	for i := range uniq {
		p.unique = append(p.unique, fmt.Sprintf("pay-%s-%06d", run, i))
	}
	nConc, nLater := dups/3, dups/3
	nSoon := dups - nConc - nLater
	soon := map[int]int{}
	for range nSoon {
		soon[mrand.IntN(uniq)]++
	}
	var pending [][]byte
	for i, k := range p.unique {
		p.main = append(p.main, envelope(k))
		p.main = append(p.main, pending...)
		pending = pending[:0]
		for range soon[i] {
			pending = append(pending, envelope(k))
		}
	}
	p.main = append(p.main, pending...)
	for _, i := range mrand.Perm(uniq)[:nConc] {
		p.concurrent[i] = envelope(p.unique[i])
	}
	for range nLater {
		p.later = append(p.later, envelope(p.unique[mrand.IntN(uniq)]))
	}
	return p
}

func envelope(key string) []byte {
	b, _ := json.Marshal(map[string]any{
		"job":      "urn:babel:payments:captured",
		"trace_id": randHex(8),
		"data":     map[string]any{"amount_cents": mrand.IntN(100000)},
		"meta":     map[string]any{"id": key, "schema_version": 1, "lang": "go", "created_at": time.Now().UnixMilli()},
		"attempts": 0,
	})
	return b
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func waitUntil(ctx context.Context, every time.Duration, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
	}
	return true
}
