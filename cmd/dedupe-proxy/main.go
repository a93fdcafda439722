// Command dedupe-proxy is a sidecar that makes a message consumer process
// each message once. main only parses flags and turns signals into a
// context; the proxy itself is internal/daemon.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `dedupe-proxy: consume from a broker, skip duplicates, forward the rest to your app.

Usage:
  dedupe-proxy run      --config FILE   run the proxy until SIGTERM/SIGINT
  dedupe-proxy validate --config FILE   check a config file; exit 1 listing every error
  dedupe-proxy version                  print the version

--config defaults to $DEDUPE_PROXY_CONFIG. Every setting can be overridden
by an environment variable DEDUPE_PROXY_<PATH>, e.g. DEDUPE_PROXY_APP_URL.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "dedupe-proxy %s (%s)\n", daemon.Version, runtime.Version())
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	case "run", "validate":
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
		return 2
	}

	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", os.Getenv(config.EnvConfigFile), "config file (YAML)")
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintf(stderr, "%s: --config FILE is required (or set %s)\n", cmd, config.EnvConfigFile)
		return 2
	}
	cfg, err := config.Load(*path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "invalid configuration %s:\n%s\n", *path, indent(err))
		return 1
	}
	if cmd == "validate" {
		fmt.Fprintf(stdout, "%s: ok (%d source(s), consumer %q)\n", *path, len(cfg.Sources), cfg.Consumer)
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	d, err := daemon.New(cfg, daemon.Deps{})
	if err != nil {
		fmt.Fprintf(stderr, "dedupe-proxy: %v\n", err)
		return 1
	}
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "dedupe-proxy: %v\n", err)
		return 1
	}
	return 0
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
