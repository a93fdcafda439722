//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// effectApp is the consumer: it fails 5% of requests with 503 and lets 1%
// run past the proxy's timeout — both before any effect, as a database
// transaction that did not commit — and otherwise records the request's
// Idempotency-Key durably (append + fsync) and answers 204. Every recorded
// request is an effect for a naive app; an honouring app applies only the
// first effect per key (its own dedupe table).
type effectApp struct {
	srv     *http.Server
	addr    string
	file    *os.File
	mu      sync.Mutex
	effects map[string]int
	recent  []keyAt
	faults  bool
	slow    time.Duration
	total   int
	failed  int
	timeout int
}

type keyAt struct {
	key string
	at  time.Time
}

func newEffectApp(t *testing.T, slow time.Duration) *effectApp {
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "effects.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &effectApp{file: f, effects: map[string]int{}, addr: ln.Addr().String(), slow: slow, faults: true}
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	t.Cleanup(func() { _ = a.srv.Close(); _ = f.Close() })
	return a
}

func (a *effectApp) serve(w http.ResponseWriter, r *http.Request) {
	var body [512]byte
	for {
		if _, err := r.Body.Read(body[:]); err != nil {
			break
		}
	}
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.total++
	faults := a.faults
	a.mu.Unlock()
	if faults {
		switch n := mrand.IntN(100); {
		case n < 5:
			a.mu.Lock()
			a.failed++
			a.mu.Unlock()
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case n < 6:
			a.mu.Lock()
			a.timeout++
			a.mu.Unlock()
			time.Sleep(a.slow)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
	}
	a.mu.Lock()
	if _, err := a.file.WriteString(key + "\n"); err == nil {
		_ = a.file.Sync()
	}
	a.effects[key]++
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

func (a *effectApp) counts() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[string]int, len(a.effects))
	for k, v := range a.effects {
		m[k] = v
	}
	return m
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
}

func (p *proc) start(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts++
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
	resp, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// logLines counts lines containing s across every proxy log.
func logLines(dir, s string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	n := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), s) {
				n++
			}
		}
		fh.Close()
	}
	return n
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
