package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// A BabelQueue producer written with a real client library — node-redis
// or redis-py, run as the process a user would run — RPUSHes (mode list)
// or XADDs (mode stream, field body plus bq-message-id) every envelope
// of BabelQueue's conformance fixtures, each twice. The proxy has one
// source per fixture (four of them share one meta.id, and a source is
// its own key space), so each must reach the app once, byte for byte,
// keyed by its meta.id, and its second copy be skipped as a duplicate.
func TestRedisProducerLibraries(t *testing.T) {
	fixtures := bqFixtures(t)
	// Each returns the producer's command line and its folder.
	producers := map[string]func(t *testing.T) (args []string, dir string){
		"node-redis": func(t *testing.T) ([]string, string) {
			dir := testutil.NodeModules(t, filepath.Join("testdata", "redis-producers"), "redis-producers-js", "the node-redis producer test")
			run := t.TempDir()
			copyFile(t, filepath.Join("testdata", "redis-producers", "produce.mjs"), filepath.Join(run, "produce.mjs"))
			if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(run, "node_modules")); err != nil {
				t.Fatal(err)
			}
			return []string{"node", "produce.mjs"}, run
		},
		"redis-py": func(t *testing.T) ([]string, string) {
			python := testutil.PythonWith("DPTEST_PYTHON", "redis")
			if python == "" {
				t.Skip("no python3 that can import redis, so the redis-py producer is not tested (.ci/run installs it: apt-get install python3-redis)")
			}
			// -B: write no __pycache__ into the tree.
			return []string{python, "-B", "produce.py"}, filepath.Join("testdata", "redis-producers")
		},
	}
	for _, lib := range []string{"node-redis", "redis-py"} {
		for _, mode := range []string{"list", "stream"} {
			t.Run(lib+"/"+mode, func(t *testing.T) {
				t.Parallel()
				args, dir := producers[lib](t)
				producerInterop(t, args, dir, mode, fixtures)
			})
		}
	}
}

// bqFixture is one envelope file of BabelQueue's conformance suite.
type bqFixture struct {
	name, path, id string
	body           []byte
}

func bqFixtures(t *testing.T) []bqFixture {
	t.Helper()
	dir := filepath.Join(testutil.BabelQueueDir(t), "fixtures")
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 2 {
		t.Fatalf("%d fixtures in %s, want several", len(paths), dir)
	}
	sort.Strings(paths)
	var fs []bqFixture
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Meta struct {
				ID string `json:"id"`
			} `json:"meta"`
		}
		if err := json.Unmarshal(b, &env); err != nil || env.Meta.ID == "" {
			t.Fatalf("fixture %s: no meta.id (%v)", p, err)
		}
		fs = append(fs, bqFixture{name: strings.TrimSuffix(filepath.Base(p), ".json"), path: p, id: env.Meta.ID, body: b})
	}
	return fs
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func producerInterop(t *testing.T, args []string, dir, mode string, fixtures []bqFixture) {
	// Every source's queue or stream carries the harness queue's hash
	// tag, so the harness' cleanup removes them with the rest.
	var queue string
	keyOf := func(i int) string { return fmt.Sprintf("{%s}.f%d", queue, i) }
	sources := func(c *config.Config) {
		base := c.Sources[0]
		queue = base.Redis.Queue + base.Redis.Stream // the harness' name, one of them set
		c.Sources = nil
		for i := range fixtures {
			s := base
			s.Name, s.Path = fmt.Sprintf("f%d", i), fmt.Sprintf("/f%d", i)
			if mode == "list" {
				s.Redis.Queue = keyOf(i)
			} else {
				s.Redis.Stream = keyOf(i)
			}
			c.Sources = append(c.Sources, s)
		}
	}
	var h *redisHarness
	if mode == "list" {
		h = newRedisHarness(t, testutil.RedisAddr(), sources)
	} else {
		h = newRedisStreamHarness(t, sources)
	}
	p := h.start()

	args = append(args, mode, "redis://"+testutil.RedisAddr())
	for i, f := range fixtures {
		args = append(args, keyOf(i), f.path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	if got, want := strings.TrimSpace(string(out)), fmt.Sprintf("pushed %d", 2*len(fixtures)); got != want {
		t.Fatalf("producer printed %q, want %q", got, want)
	}

	n := float64(len(fixtures))
	testutil.Eventually(t, 20*time.Second, "every envelope forwarded once and its copy skipped", func() bool {
		return p.result(t, "forwarded") == n && p.result(t, "duplicate") == n
	})
	reqs := h.app.Requests()
	if len(reqs) != len(fixtures) {
		t.Fatalf("app got %d requests, want %d (one per fixture)", len(reqs), len(fixtures))
	}
	got := map[string]bool{}
	for _, r := range reqs {
		var i int
		if _, err := fmt.Sscanf(r.Path, "/f%d", &i); err != nil || i < 0 || i >= len(fixtures) {
			t.Fatalf("app got a request on %q", r.Path)
		}
		f := fixtures[i]
		if got[f.name] {
			t.Errorf("%s reached the app twice", f.name)
		}
		got[f.name] = true
		if !bytes.Equal(r.Body, f.body) {
			t.Errorf("%s: app got %q, want the fixture byte for byte", f.name, r.Body)
		}
		if r.Key != f.id {
			t.Errorf("%s: Idempotency-Key %q, want its meta.id %q", f.name, r.Key, f.id)
		}
	}
	// Both copies settled: nothing waits or is reserved.
	rctx := context.Background()
	testutil.Eventually(t, 10*time.Second, "nothing left pending", func() bool {
		for i := range fixtures {
			k := keyOf(i)
			if mode == "list" {
				if h.rq.LLen(rctx, k).Val() != 0 {
					return false
				}
				continue
			}
			if h.rq.XLen(rctx, k).Val() != 2 || h.rq.XPending(rctx, k, h.cfg.Consumer).Val().Count != 0 {
				return false
			}
		}
		return mode != "list" || h.reserved() == 0
	})
}
