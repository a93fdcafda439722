// Command dedupe-proxy is a sidecar that makes a message consumer process
// each message once. main only parses the command line (cli.go) and turns
// signals into a context; the proxy itself is internal/daemon.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/admin"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes the command line args and returns the exit status: 0 done,
// 1 failed (an invalid config, a failed check, a proxy that stopped on an
// error), 2 a command line it cannot take.
func run(args []string, stdout, stderr io.Writer) int {
	return execute(args, os.Stdin, stdout, stderr)
}

// runProxy is `dedupe-proxy run`.
func runProxy(cfg *config.Config, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	d, err := daemon.New(cfg, daemon.Deps{})
	if err != nil {
		fmt.Fprintf(stderr, "dedupe-proxy: %v\n", err)
		return exitCode(1)
	}
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "dedupe-proxy: %v\n", err)
		return exitCode(1)
	}
	return nil
}

// validate is `dedupe-proxy validate`, once the config loaded.
func validate(cfg *config.Config, path string, stdout io.Writer) {
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	fmt.Fprintf(stdout, "%s: ok (%d source(s), consumer %q)\n", path, len(cfg.Sources), cfg.Consumer)
}

// keys talks to the seen-set directly, with the proxy's own config; the
// operations are internal/admin's, the same the admin API serves.
func keys(cfg *config.Config, sub, space, key, format string, stdout, stderr io.Writer) error {
	st, err := daemon.NewStore(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "keys: %v\n", err)
		return exitCode(1)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := &admin.Keys{Store: st, Consumer: cfg.Consumer, Spaces: cfg.KeySpaces(), Lease: cfg.SeenSet.Lease, TTL: cfg.SeenSet.TTL}
	switch {
	case format != "table":
		err = k.Command(ctx, sub, space, key, stdout)
	case sub == "status":
		var ks admin.KeyStatus
		if ks, err = k.Status(ctx, space, key); err == nil {
			err = admin.WriteTable(stdout, []admin.KeyStatus{ks})
		}
	default:
		var r admin.ForgetResult
		if r, err = k.Forget(ctx, space, key); err == nil {
			err = admin.WriteForgetTable(stdout, r)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "keys %s: %v\n", sub, err)
		return exitCode(1)
	}
	return nil
}

// keysList prints a space's keys, one JSON line each or a table.
func keysList(cfg *config.Config, o admin.ListOptions, format string, stdout, stderr io.Writer) error {
	st, err := daemon.NewStore(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "keys: %v\n", err)
		return exitCode(1)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := &admin.Keys{Store: st, Consumer: cfg.Consumer, Spaces: cfg.KeySpaces(), Lease: cfg.SeenSet.Lease, TTL: cfg.SeenSet.TTL}
	res, err := k.List(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "keys list: %v\n", err)
		return exitCode(1)
	}
	if format == "table" {
		if err := admin.WriteTable(stdout, res.Keys); err != nil {
			return err
		}
	} else {
		enc := json.NewEncoder(stdout)
		for _, ks := range res.Keys {
			if err := enc.Encode(ks); err != nil {
				return err
			}
		}
	}
	if res.Truncated {
		fmt.Fprintf(stderr, "keys list: more keys than --limit %d; raise it or narrow --prefix\n", len(res.Keys))
	}
	return nil
}

func indent(err error) string {
	var lines []error
	if j, ok := err.(interface{ Unwrap() []error }); ok && !errors.Is(err, os.ErrNotExist) {
		lines = j.Unwrap()
	} else {
		lines = []error{err}
	}
	out := ""
	for _, l := range lines {
		out += "  - " + l.Error() + "\n"
	}
	return out[:len(out)-1]
}
