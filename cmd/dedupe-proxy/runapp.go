package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
	"github.com/dedupe-proxy/dedupe-proxy/internal/forward"
	"github.com/dedupe-proxy/dedupe-proxy/internal/supervise"
)

// defaultAppReadyTimeout is how long `run -- APP` waits for the app's
// health URL to answer 2xx by default.
const defaultAppReadyTimeout = 30 * time.Second

// appPollEvery is how often the starting app's health URL is asked.
const appPollEvery = 200 * time.Millisecond

// runWithApp is `dedupe-proxy run --config FILE -- APP...`, for local
// development: it starts APP as a child process, waits until app.health_url
// answers 2xx (through the forward client's Probe, the daemon's own app
// health check), then runs the proxy as `run` does. SIGINT and SIGTERM stop
// the proxy first, so forwards in progress finish at a live app, and then
// reach the app; the app is stopped whenever the proxy stops. The app
// exiting first, or not answering within readyTimeout, is exit status 1.
func runWithApp(cfg *config.Config, argv []string, readyTimeout time.Duration, stdout, stderr io.Writer) error {
	if cfg.App.HealthURL == "" {
		fmt.Fprintln(stderr, "run: app.health_url is not set; run -- APP starts the proxy once the app's health URL answers 2xx: set it (e.g. health_url: /healthz under app, or DEDUPE_PROXY_APP_HEALTH_URL)")
		return exitCode(1)
	}
	// Before the app starts, so a signal during its start is ours.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)

	app, err := startApp(argv, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "run: %v\n", err)
		return exitCode(1)
	}
	// How long the app may take to exit once signalled: the same bound
	// the proxy has for its own stop.
	grace := cfg.ShutdownTimeout
	fmt.Fprintf(stderr, "run: started the app (%s, pid %d); waiting for app.health_url %s\n", app.name, app.cmd.Process.Pid, cfg.App.HealthURL)

	if sig, err := waitHealthy(cfg.App, app, readyTimeout, sigs); err != nil || sig != nil {
		s := os.Signal(syscall.SIGTERM)
		if sig != nil {
			s = sig
		}
		if err != nil {
			fmt.Fprintf(stderr, "run: %v\n", err)
		}
		if stopErr := app.stop(s, grace); stopErr != nil {
			fmt.Fprintf(stderr, "run: %v\n", stopErr)
			return exitCode(1)
		}
		if err != nil {
			return exitCode(1)
		}
		return nil // stopped by a signal before the proxy started
	}

	fmt.Fprintln(stderr, "run: the app is up; starting the proxy")
	d, err := daemon.New(cfg, daemon.Deps{})
	if err != nil {
		fmt.Fprintf(stderr, "dedupe-proxy: %v\n", err)
		_ = app.stop(syscall.SIGTERM, grace)
		return exitCode(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- d.Run(ctx) }()

	var (
		sig        os.Signal = syscall.SIGTERM
		runErr     error
		appExitErr error
		failed     bool
	)
	select {
	case sig = <-sigs:
		cancel()
		runErr = <-runDone
	case <-app.exited:
		failed = true
		appExitErr = fmt.Errorf("the app (%s) exited while the proxy was running: %s; stopping the proxy", app.name, exitStatus(app.err))
		fmt.Fprintf(stderr, "run: %v\n", appExitErr)
		cancel()
		runErr = <-runDone
	case runErr = <-runDone:
		// The proxy stopped by itself (a source that failed for good).
	}
	if runErr != nil {
		failed = true
		fmt.Fprintf(stderr, "dedupe-proxy: %v\n", runErr)
	}
	if err := app.stop(sig, grace); err != nil {
		failed = true
		fmt.Fprintf(stderr, "run: %v\n", err)
	}
	if failed {
		return exitCode(1)
	}
	return nil
}

// appProcess is the child process of `run -- APP`.
type appProcess struct {
	name   string // the command line, for messages
	cmd    *exec.Cmd
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's error, once exited is closed
}

func startApp(argv []string, stdout, stderr io.Writer) (*appProcess, error) {
	a := &appProcess{name: strings.Join(argv, " "), exited: make(chan struct{})}
	a.cmd = exec.Command(argv[0], argv[1:]...)
	a.cmd.Stdout, a.cmd.Stderr = prefixLines(stdout, appLinePrefix), prefixLines(stderr, appLinePrefix)
	// Its own process group: a terminal's Ctrl-C reaches the proxy only,
	// which lets forwards in progress finish before it passes the signal
	// on (to the whole group, so `sh -c` or `npm start` pass it down too).
	a.cmd.SysProcAttr = appProcAttr()
	// Output copied through pipes (stdout not a file) is not waited for
	// past this once the app exited and left a grandchild holding them.
	a.cmd.WaitDelay = time.Second
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start the app (%s): %w", a.name, err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.exited) }()
	return a, nil
}

// stop signals the app's process group and waits for it to exit, killing
// it after grace; an app that exited already is left as it is.
func (a *appProcess) stop(sig os.Signal, grace time.Duration) error {
	select {
	case <-a.exited:
		return nil
	default:
	}
	_ = signalGroup(a.cmd.Process.Pid, sig.(syscall.Signal))
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-a.exited:
		return nil
	case <-t.C:
		_ = signalGroup(a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.exited
		return fmt.Errorf("the app (%s) did not exit within shutdown_timeout %s of %v; killed it", a.name, grace, sig)
	}
}

// signalGroup signals the process group the app leads, and the app itself
// should it have left the group.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return syscall.Kill(pid, sig)
	}
	return err
}

// waitHealthy runs the daemon's app health check every appPollEvery until
// app.health_url answers 2xx. It returns the signal that interrupted it,
// or an error when the app exited or did not answer within timeout.
func waitHealthy(cfg config.App, app *appProcess, timeout time.Duration, sigs <-chan os.Signal) (os.Signal, error) {
	fc := cfg.Forward()
	fc.MaxConns = 1
	fwd, err := forward.New(fc)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	defer fwd.Close()
	ctx, cancel := context.WithCancel(context.Background())
	probed := make(chan struct{})
	defer func() { cancel(); <-probed }()
	health := supervise.New(supervise.Options{Err: errors.New("no answer yet")})
	go func() {
		defer close(probed)
		supervise.AppProbe(supervise.AppCheck(fwd, cfg.HealthURL), appPollEvery).Run(ctx, health)
	}()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-health.Up():
		return nil, nil
	case <-app.exited:
		return nil, fmt.Errorf("the app (%s) exited before app.health_url %s answered 2xx: %s", app.name, cfg.HealthURL, exitStatus(app.err))
	case <-deadline.C:
		return nil, fmt.Errorf("the app (%s) did not answer app.health_url %s with 2xx within --app-ready-timeout %s (last: %v); stopping it", app.name, cfg.HealthURL, timeout, health.Err())
	case s := <-sigs:
		return s, nil
	}
}

// exitStatus says how a process ended, from exec.Cmd.Wait's error.
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
