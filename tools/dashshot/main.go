// Command dashshot makes docs/img/dashboard.png, the README's picture of
// the Grafana dashboard, without Grafana: it runs dedupe-proxy on the
// local RabbitMQ and Redis under a few minutes of traffic with faults,
// lets a real Prometheus scrape it, evaluates every query of the
// dashboard file as it is (its variables on All) over that run, draws
// the panels where the file's gridPos puts them with uPlot, and
// screenshots the page with headless Chromium. `make dashboard-picture`
// runs it. It is a tool for the docs, not part of the product.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/tools/internal/proxymetrics"
)

type options struct {
	proxy, prometheus, chromium string
	uplotDir, dashboard, out    string
	redis, amqpURL              string
	duration                    time.Duration
	keep                        bool
}

// scrapeInterval is Prometheus's; Grafana's $__rate_interval is four of
// them (at least), so the dashboard's rates see four samples.
const scrapeInterval = 2 * time.Second

func main() {
	var o options
	flag.StringVar(&o.proxy, "proxy", "bin/dedupe-proxy", "dedupe-proxy binary (make build)")
	flag.StringVar(&o.prometheus, "prometheus", "", "Prometheus server binary (make dashboard-picture installs one into bin/tools)")
	flag.StringVar(&o.chromium, "chromium", "chromium", "Chromium binary for the headless screenshot")
	flag.StringVar(&o.uplotDir, "uplot", "tools/dashshot/node_modules/uplot/dist", "directory holding uPlot.iife.min.js and uPlot.min.css (npm package uplot)")
	flag.StringVar(&o.dashboard, "dashboard", "helm/dedupe-proxy/dashboards/dedupe-proxy.json", "the dashboard file whose queries are drawn")
	flag.StringVar(&o.out, "out", "docs/img/dashboard.png", "the PNG to write")
	flag.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis for the seen-set and the list source (keys under a prefix of this run, removed at the end)")
	flag.StringVar(&o.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ (queues of this run, deleted at the end)")
	flag.DurationVar(&o.duration, "duration", 3*time.Minute+30*time.Second, "how long the traffic runs")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (config, logs, Prometheus data, the HTML page)")
	flag.Parse()
	if o.prometheus == "" {
		fmt.Fprintln(os.Stderr, "dashshot: -prometheus is required (make dashboard-picture installs one)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashshot:", err)
		os.Exit(1)
	}
}

// phase is a stretch of the run in which the app behaves one way.
type phase struct {
	from float64 // share of the duration at which it starts
	mode appMode
}

var phases = []phase{{0, appNormal}, {0.28, appFailing}, {0.43, appNormal}, {0.55, appSlow}, {0.70, appNormal}, {0.76, appDown}, {0.86, appNormal}}

func run(ctx context.Context, o options) (err error) {
	begun := time.Now()
	// Everything that can be checked before starting anything is.
	for _, f := range []struct{ what, path string }{{"-proxy", o.proxy}, {"-prometheus", o.prometheus}} {
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %w", f.what, err)
		}
	}
	chromium, err := exec.LookPath(o.chromium)
	if err != nil {
		return fmt.Errorf("-chromium: %w (apt-get install chromium)", err)
	}
	ujs, err := os.ReadFile(filepath.Join(o.uplotDir, "uPlot.iife.min.js"))
	if err != nil {
		return fmt.Errorf("uPlot (npm install, see make dashboard-picture): %w", err)
	}
	ucss, err := os.ReadFile(filepath.Join(o.uplotDir, "uPlot.min.css"))
	if err != nil {
		return fmt.Errorf("uPlot (npm install, see make dashboard-picture): %w", err)
	}
	dash, err := loadDashboard(o.dashboard)
	if err != nil {
		return err
	}
	vars := dash.variables(4 * scrapeInterval)
	for _, p := range dash.Panels {
		for _, t := range p.Targets {
			if _, err := substitute(t.Expr, vars); err != nil {
				return fmt.Errorf("%s: panel %q: %w", o.dashboard, p.Title, err)
			}
		}
	}

	id := randHex(3)
	name := "dashshot-" + id
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return err
	}
	proxyLog := filepath.Join(dir, "proxy.log")
	defer func() {
		if err != nil {
			if t := tail(proxyLog, 15); t != "" {
				fmt.Fprintf(os.Stderr, "last lines of the proxy's log:\n%s", t)
			}
		}
		if o.keep {
			fmt.Printf("kept %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	fmt.Printf("dashshot %s: temporary files in %s\n", name, dir)

	// The shared Redis and RabbitMQ: only this run's keys and queues,
	// all named after it, are created and removed.
	rdb := redis.NewClient(&redis.Options{Addr: o.redis})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", o.redis, err)
	}
	listQueue := name + "-payments"
	defer func() {
		n := deleteKeys(rdb, name+"*", "{"+listQueue+"}*")
		fmt.Printf("removed %d Redis keys of %s\n", n, name)
	}()
	conn, err := amqp.Dial(o.amqpURL)
	if err != nil {
		return fmt.Errorf("rabbitmq at %s: %w", redactURL(o.amqpURL), err)
	}
	defer conn.Close()
	ordersQueue, deadQueue := name+"-orders", name+"-orders-dead"
	if err := declareQueues(conn, ordersQueue, deadQueue); err != nil {
		return err
	}
	defer func() {
		if err := deleteQueues(conn, ordersQueue, deadQueue); err != nil {
			fmt.Fprintf(os.Stderr, "dashshot: deleting the queues %s, %s: %v\n", ordersQueue, deadQueue, err)
		} else {
			fmt.Printf("deleted the RabbitMQ queues %s, %s\n", ordersQueue, deadQueue)
		}
	}()

	app, err := startTestApp()
	if err != nil {
		return err
	}
	defer app.close()

	admin, err := freePort()
	if err != nil {
		return err
	}
	hook, err := freePort()
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(proxyConfig(name, admin, hook, app.addr, o.redis, o.amqpURL, ordersQueue, deadQueue, listQueue)), 0o600); err != nil {
		return err
	}
	secret := []byte(randHex(24))
	proxy, err := startProcess("dedupe-proxy", proxyLog, o.proxy, []string{"run", "--config", cfgPath},
		"DASHSHOT_WEBHOOK_SECRET=whsec_"+base64.StdEncoding.EncodeToString(secret))
	if err != nil {
		return err
	}
	defer proxy.stop()
	if err := waitHTTP(ctx, proxy, "http://"+admin+"/readyz?deps=1", 30*time.Second); err != nil {
		return err
	}
	fmt.Printf("dedupe-proxy ready: admin %s, sources orders (RabbitMQ queue %s), payments (Redis list %s), hooks (webhook on %s)\n",
		admin, ordersQueue, listQueue, hook)

	promAddr, err := freePort()
	if err != nil {
		return err
	}
	promDir := filepath.Join(dir, "prometheus")
	if err := os.MkdirAll(promDir, 0o700); err != nil {
		return err
	}
	promCfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promCfg, []byte(prometheusConfig(admin)), 0o600); err != nil {
		return err
	}
	prometheus, err := startProcess("prometheus", filepath.Join(dir, "prometheus.log"), o.prometheus, []string{
		"--config.file=" + promCfg, "--storage.tsdb.path=" + promDir, "--web.listen-address=" + promAddr, "--log.level=warn",
	})
	if err != nil {
		return err
	}
	defer prometheus.stop()
	if err := waitHTTP(ctx, prometheus, "http://"+promAddr+"/-/ready", 60*time.Second); err != nil {
		return err
	}
	pc := prom{base: "http://" + promAddr, client: &http.Client{Timeout: 30 * time.Second}}
	if err := waitScraped(ctx, pc, prometheus, 30*time.Second); err != nil {
		return err
	}
	fmt.Printf("prometheus at %s scrapes %s/metrics every %s\n", promAddr, admin, scrapeInterval)

	start := time.Now()
	fmt.Printf("traffic for %s: RabbitMQ 30/s (15%% duplicates), Redis list 15/s (10%% duplicates), webhooks 5/s (20%% redeliveries, 1 in 25 badly signed, 1 in 60 unsigned)\n", o.duration)
	c, err := drive(ctx, o.duration, conn, rdb, ordersQueue, listQueue, "http://"+hook+"/webhook", secret, app, admin)
	if err != nil {
		return err
	}
	// The backlog drains and the rates fall back in the picture.
	if err := sleep(ctx, 12*time.Second); err != nil {
		return err
	}
	end := time.Now()
	fwd, dup, dead := proxymetrics.Results(metricsClient, admin)

	w := window{start: start.Add(-4 * time.Second).Truncate(scrapeInterval), end: end.Truncate(scrapeInterval), step: scrapeInterval}
	panels, err := evaluate(ctx, pc, dash, vars, w)
	if err != nil {
		return fmt.Errorf("prometheus: %w", err)
	}
	proxy.stop()
	prometheus.stop()

	page, height, err := renderPage(pageInput{
		Title:    dash.Title,
		Vars:     [][2]string{{"Data source", "Prometheus"}, {"Namespace", "All"}, {"Job (Service)", "All"}},
		Caption:  "Not a Grafana screenshot: the dashboard file's queries, evaluated by Prometheus over a real run and drawn by tools/dashshot with uPlot",
		Window:   w,
		Panels:   panels,
		UPlotJS:  string(ujs),
		UPlotCSS: string(ucss),
	})
	if err != nil {
		return fmt.Errorf("page: %w", err)
	}
	htmlPath := filepath.Join(dir, "dashboard.html")
	if err := os.WriteFile(htmlPath, page, 0o600); err != nil {
		return err
	}
	if err := screenshot(ctx, chromium, htmlPath, o.out, dir, height); err != nil {
		return err
	}
	st, err := os.Stat(o.out)
	if err != nil {
		return err
	}

	fmt.Printf("\nsummary\n")
	fmt.Printf("  %-34s %s\n", "traffic", o.duration)
	fmt.Printf("  %-34s %d (%d duplicates, %d reused ids)\n", "published to RabbitMQ", c.published.Load(), c.duplicates.Load(), c.reused.Load())
	fmt.Printf("  %-34s %d (%d duplicates)\n", "pushed to the Redis list", c.listPushed.Load(), c.listDuplicates.Load())
	fmt.Printf("  %-34s %d (%d redeliveries, %d badly signed, %d unsigned; %d not 2xx)\n", "webhook requests", c.hooksSent.Load(),
		c.hookRedeliveries.Load(), c.hooksBadSig.Load(), c.hooksUnsigned.Load(), c.hookNon2xx.Load())
	fmt.Printf("  %-34s %d (%d answered 500, %d slow)\n", "app requests", app.requests.Load(), app.failed.Load(), app.slow.Load())
	fmt.Printf("  %-34s forwarded %.0f, duplicate %.0f, dead-lettered %.0f\n", "proxy results", fwd, dup, dead)
	var empty []string
	for _, p := range panels {
		if !hasData(p.Series) {
			empty = append(empty, p.Title)
		}
	}
	fmt.Printf("  %-34s %d of %d; No data: %s\n", "panels with data", len(panels)-len(empty), len(panels), orNone(empty))
	fmt.Printf("  %-34s %s, %d KB, 1600x%d\n", "picture", o.out, (st.Size()+1023)/1024, height)
	fmt.Printf("  %-34s %s\n", "took", time.Since(begun).Round(time.Second))
	return nil
}

// drive runs the traffic and the app's phases for d, printing a progress
// line every 15 seconds.
func drive(ctx context.Context, d time.Duration, conn *amqp.Connection, rdb *redis.Client,
	ordersQueue, listQueue, hookURL string, secret []byte, app *testApp, admin string) (*counts, error) {
	c := &counts{}
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	errs := make(chan error, 3)
	go func() { errs <- publishRabbit(tctx, conn, ordersQueue, c) }()
	go func() { errs <- pushList(tctx, rdb, listQueue, c) }()
	go func() { errs <- sendWebhooks(tctx, hookURL, secret, c) }()
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastLine := time.Now()
	running := 3
	for running > 0 {
		select {
		case err := <-errs:
			running--
			if err != nil {
				cancel()
				// The others stop with the context: what they say
				// beyond that is added to the first error.
				for ; running > 0; running-- {
					if e := <-errs; e != nil && !errors.Is(e, context.Canceled) {
						err = errors.Join(err, e)
					}
				}
				return nil, err
			}
		case <-tick.C:
			share := float64(time.Since(start)) / float64(d)
			mode := appNormal
			for _, p := range phases {
				if share >= p.from {
					mode = p.mode
				}
			}
			if appMode(app.mode.Swap(int32(mode))) != mode {
				fmt.Printf("  %s  app: %s\n", clock(time.Since(start)), mode)
			}
			if time.Since(lastLine) >= 15*time.Second {
				lastLine = time.Now()
				fwd, dup, dead := proxymetrics.Results(metricsClient, admin)
				fmt.Printf("  %s  sent: RabbitMQ %d, list %d, webhooks %d | app: %d requests, %d × 500, %d slow | proxy: forwarded %.0f, duplicate %.0f, dead-lettered %.0f\n",
					clock(time.Since(start)), c.published.Load(), c.listPushed.Load(), c.hooksSent.Load(),
					app.requests.Load(), app.failed.Load(), app.slow.Load(), fwd, dup, dead)
			}
		}
	}
	app.mode.Store(int32(appNormal))
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted")
	}
	return c, nil
}

// proxyConfig is the run's config: one replica, three sources, an app
// timeout the slow stretch outlasts, a health URL the down stretch fails,
// and few attempts so the failing stretch dead-letters some messages.
func proxyConfig(name, admin, hook, app, redisAddr, amqpURL, ordersQueue, deadQueue, listQueue string) string {
	return fmt.Sprintf(`consumer: %[1]s
log: {level: warn, format: text}
admin:
  listen: %[2]s
app:
  url: http://%[4]s
  timeout: 1s
  health_url: /healthz
  health_interval: 1s
seenset:
  ttl: 80h
  lease: 10s
  redis:
    addrs: ["%[5]s"]
    prefix: "%[1]s:"
delivery:
  max_attempts: 3
  backoff_initial: 200ms
  backoff_max: 2s
  busy_delay: 100ms
sources:
  - name: orders
    path: /orders
    type: rabbitmq
    key: ["json:meta.id"]
    rabbitmq:
      url: %[6]s
      queue: %[7]s
      prefetch: 64
      workers: 16
      dead_letter:
        mode: publish
        routing_key: %[8]s
  - name: payments
    path: /payments
    type: redis
    key: ["json:meta.id"]
    redis:
      addrs: ["%[5]s"]
      mode: list
      queue: %[9]s
      dead_letter: "{%[9]s}:dead"
      workers: 8
  - name: hooks
    type: webhook
    webhook:
      listen: %[3]s
      profile: standard-webhooks
      secrets: ["env:DASHSHOT_WEBHOOK_SECRET"]
      mode: enqueue
      target:
        broker: rabbitmq
        rabbitmq:
          url: %[6]s
          routing_key: %[7]s
`, name, admin, hook, app, redisAddr, amqpURL, ordersQueue, deadQueue, listQueue)
}

func prometheusConfig(target string) string {
	return fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
scrape_configs:
  - job_name: dedupe-proxy
    static_configs:
      - targets: ["%[2]s"]
`, promDuration(scrapeInterval), target)
}

// process is a child started by the tool, in a process group of its own
// so a Ctrl-C reaches the tool, which stops it in order.
type process struct {
	name, logPath string
	cmd           *exec.Cmd
	done          chan struct{}
	err           error
	stopped       bool
}

func startProcess(name, logPath, bin string, args []string, env ...string) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// exited reports an exit before stop asked for one.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, tail(p.logPath, 15))
	default:
		return nil
	}
}

func (p *process) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		fmt.Fprintf(os.Stderr, "dashshot: %s did not stop within 40s of SIGTERM; killing it\n", p.name)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func waitHTTP(ctx context.Context, p *process, target string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if err := p.exited(); err != nil {
			return err
		}
		resp, err := client.Get(target)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not 200 after %s (last: %v; log %s)", p.name, target, timeout, statusOrErr(resp, err), p.logPath)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitScraped waits until Prometheus has scraped the proxy once, so the
// run's window starts with data.
func waitScraped(ctx context.Context, pc prom, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := p.exited(); err != nil {
			return err
		}
		now := time.Now().Truncate(time.Second)
		s, err := pc.queryRange(ctx, `up{job="dedupe-proxy"} == 1`, "", window{start: now, end: now, step: time.Second})
		if err == nil && hasData(s) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("prometheus has not scraped the proxy after %s (%v; log %s)", timeout, err, p.logPath)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

func screenshot(ctx context.Context, chromium, page, out, dir string, height int) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(sctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--force-device-scale-factor=1", "--user-data-dir="+filepath.Join(dir, "chromium"),
		"--virtual-time-budget=5000", "--window-size="+strconv.Itoa(pageWidth)+","+strconv.Itoa(height),
		"--screenshot="+abs, "file://"+page)
	// The time axis is labelled in UTC, as the page's header says.
	cmd.Env = append(os.Environ(), "TZ=UTC")
	before, _ := os.Stat(abs)
	outp, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chromium screenshot: %w\n%s", err, outp)
	}
	after, err := os.Stat(abs)
	if err != nil || (before != nil && after.ModTime().Equal(before.ModTime())) {
		return fmt.Errorf("chromium wrote no screenshot to %s\n%s", abs, outp)
	}
	return nil
}

func declareQueues(conn *amqp.Connection, queues ...string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq channel: %w", err)
	}
	defer ch.Close()
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare RabbitMQ queue %s: %w", q, err)
		}
	}
	return nil
}

func deleteQueues(conn *amqp.Connection, queues ...string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var errs []error
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteKeys removes the keys matching the patterns (this run's only: the
// Redis is shared) and returns how many.
func deleteKeys(rdb *redis.Client, patterns ...string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for _, pat := range patterns {
		iter := rdb.Scan(ctx, 0, pat, 1000).Iterator()
		for iter.Next(ctx) {
			if rdb.Del(ctx, iter.Val()).Val() > 0 {
				n++
			}
		}
		if err := iter.Err(); err != nil {
			fmt.Fprintf(os.Stderr, "dashshot: removing Redis keys %s: %v\n", pat, err)
		}
	}
	return n
}

// metricsClient reads the proxy's /metrics for the progress lines.
var metricsClient = &http.Client{Timeout: 2 * time.Second}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("interrupted")
	case <-time.After(d):
		return nil
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "") + "\n"
}

func statusOrErr(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

func clock(d time.Duration) string {
	s := int(d.Seconds())
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}
