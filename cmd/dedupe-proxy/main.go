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
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/admin"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `dedupe-proxy: consume from a broker, skip duplicates, forward the rest to your app.

Usage:
  dedupe-proxy run      --config FILE   run the proxy until SIGTERM/SIGINT
  dedupe-proxy validate --config FILE   check a config file; exit 1 listing every error
  dedupe-proxy config print --config FILE
                                        show the effective config, secrets redacted, with
                                        where each value came from (default, file, variable)
  dedupe-proxy doctor   --config FILE   check Redis, the brokers, the app and the listeners
                                        the config names; exit 1 on any failure
  dedupe-proxy keys status KEY --config FILE [--space NAME]
                                        show a message key: absent, inflight or done, and its TTL
  dedupe-proxy keys forget KEY --config FILE [--space NAME]
                                        forget a key so its next delivery is forwarded again
                                        (--space: the source's key_space, by default its name;
                                        needed when the config has several)
  dedupe-proxy inject [-f FILE|-] [--image IMAGE]
                                        add the sidecar to the Kubernetes workloads of a
                                        manifest stream (stdin by default) whose pod template
                                        is annotated dedupe-proxy.io/inject: "true"
  dedupe-proxy version                  print the version
  dedupe-proxy help COMMAND             explain a command

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
		return help(rest, stdout, stderr)
	case "inject":
		return injectCmd(rest, os.Stdin, stdout, stderr)
	case "run", "validate", "keys", "config", "doctor":
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
		return 2
	}

	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", os.Getenv(config.EnvConfigFile), "config file (YAML)")
	space := fs.String("space", "", "keys: the key space (a source's key_space, by default its name)")
	fs.Usage = func() {}
	args, err := parseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		return help([]string{cmd}, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "see: dedupe-proxy help %s\n", cmd)
		return 2
	}
	switch {
	case cmd == "keys" && (len(args) != 2 || (args[0] != "status" && args[0] != "forget")):
		fmt.Fprintf(stderr, "keys: want `keys status KEY` or `keys forget KEY`\n\n%s", usage)
		return 2
	case cmd == "config" && (len(args) != 1 || args[0] != "print"):
		fmt.Fprintf(stderr, "config: want `config print`\n\n%s", usage)
		return 2
	case cmd != "keys" && cmd != "config" && len(args) > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", cmd, args[0])
		return 2
	}
	if *path == "" {
		fmt.Fprintf(stderr, "%s: --config FILE is required (or set %s)\n", cmd, config.EnvConfigFile)
		return 2
	}
	cfg, origins, err := config.LoadWithOrigins(*path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "invalid configuration %s:\n%s\n", *path, indent(err))
		return 1
	}
	if cmd == "validate" {
		for _, w := range cfg.Warnings() {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
		fmt.Fprintf(stdout, "%s: ok (%d source(s), consumer %q)\n", *path, len(cfg.Sources), cfg.Consumer)
		return 0
	}
	switch cmd {
	case "keys":
		return keys(cfg, args[0], *space, args[1], stdout, stderr)
	case "config":
		return printConfig(cfg, origins, *path, stdout, stderr)
	case "doctor":
		return runDoctor(cfg, stdout)
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

// keys talks to the seen-set directly, with the proxy's own config; the
// operations are internal/admin's, the same the admin API serves.
func keys(cfg *config.Config, sub, space, key string, stdout, stderr io.Writer) int {
	st, err := daemon.NewStore(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "keys: %v\n", err)
		return 1
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := &admin.Keys{Store: st, Consumer: cfg.Consumer, Spaces: cfg.KeySpaces()}
	if err := k.Command(ctx, sub, space, key, stdout); err != nil {
		fmt.Fprintf(stderr, "keys %s: %v\n", sub, err)
		return 1
	}
	return 0
}

// parseInterspersed allows flags before, between and after the positional
// arguments (`keys status KEY --config FILE`); after "--" everything is
// positional, for a key that starts with '-'.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at the first non-flag argument, or right after "--".
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
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
