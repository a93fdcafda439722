package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/webhook"
)

// initSecretVar is the variable a webhook source written by init reads
// its signing secret from.
const initSecretVar = config.InitSecretVar

// initCommand is `init`: a minimal valid config for one source, as
// `rpk connect create` writes a pipeline. Printed to stdout unless
// --output names a file.
func initCommand() *cobra.Command {
	c := &cobra.Command{
		Use:  "init --source rabbitmq|kafka|redis|webhook [--consumer NAME] [--name NAME] [--app-url URL] [-o FILE|-] [--force]",
		Long: initHelp,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			f := c.Flags()
			kind, _ := f.GetString("source")
			consumer, _ := f.GetString("consumer")
			name, _ := f.GetString("name")
			appURL, _ := f.GetString("app-url")
			output, _ := f.GetString("output")
			force, _ := f.GetBool("force")
			if !slices.Contains(config.SourceTypes(), kind) {
				if kind == "" {
					return usagef(c, "init: --source is required (one of %s)", strings.Join(config.SourceTypes(), ", "))
				}
				return usagef(c, "init: --source must be one of %s, got %q%s", strings.Join(config.SourceTypes(), ", "), kind,
					config.DidYouMean(kind, config.SourceTypes(), func(s string) string { return s }))
			}
			text := initConfig(kind, consumer, name, appURL)
			if err := checkInitConfig(text, kind); err != nil {
				fmt.Fprintf(c.ErrOrStderr(), "init: the flags make an invalid config:\n%v\n", err)
				return exitCode(1)
			}
			if output == "-" {
				_, err := fmt.Fprint(c.OutOrStdout(), text)
				return err
			}
			flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			file, err := os.OpenFile(output, flag, 0o644)
			if errors.Is(err, fs.ErrExist) {
				fmt.Fprintf(c.ErrOrStderr(), "init: %s exists; --force overwrites it\n", output)
				return exitCode(1)
			}
			if err != nil {
				fmt.Fprintf(c.ErrOrStderr(), "init: %v\n", err)
				return exitCode(1)
			}
			_, err = file.WriteString(text)
			if cerr := file.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				fmt.Fprintf(c.ErrOrStderr(), "init: %v\n", err)
				return exitCode(1)
			}
			fmt.Fprintf(c.ErrOrStderr(), "wrote %s; check it with: dedupe-proxy validate --config %s\n", output, output)
			return nil
		},
	}
	f := c.Flags()
	f.String("source", "", "the source's `KIND`: "+strings.Join(config.SourceTypes(), ", "))
	f.String("consumer", "my-consumer", "the consumer's `NAME` (namespaces every stored key)")
	f.String("name", "orders", "the source's `NAME`; also its queue, topic or list")
	f.String("app-url", "http://127.0.0.1:8080", "the app's base `URL`")
	f.StringP("output", "o", "-", "write to `FILE` (- for stdout); an existing file is kept unless --force")
	f.Bool("force", false, "overwrite an existing --output file")
	return c
}

// checkInitConfig loads text as validate would, so a flag that makes it
// invalid (--app-url localhost:8080) is refused before anything is
// written. A webhook source's secret variable is given a value: the file
// names it, the operator sets it.
func checkInitConfig(text, kind string) error {
	dir, err := os.MkdirTemp("", "dedupe-proxy-init")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return err
	}
	env := []string{}
	if kind == "webhook" {
		env = append(env, initSecretVar+"=set-by-the-operator")
	}
	_, err = config.Load(path, env)
	return err
}

// initConfig is the minimal config for one source of kind: what has no
// default, and what a newcomer changes first. Everything else is left
// to its default, which config.example.yaml shows.
func initConfig(kind, consumer, name, appURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# dedupe-proxy config written by: dedupe-proxy init --source %s
# Every setting left out takes its default (config.example.yaml shows them
# all). Check it with: dedupe-proxy validate --config FILE
# Editor completion: dedupe-proxy config schema > dedupe-proxy.schema.json,
# then make this the first line:
#   # yaml-language-server: $schema=dedupe-proxy.schema.json

# Namespaces every stored key: "<prefix><consumer>:<key space>:<key>"
# (prefix: seenset.redis.prefix, default "dedupe:").
consumer: %s

app:
  # Messages are POSTed to url + the source's path.
  url: %s

seenset:
%s  redis:
    addrs: ["127.0.0.1:6379"]

sources:
  - name: %s
    type: %s
    path: /
    # Where each message's dedupe key comes from (config.example.yaml lists the rules).
    key: ["json:meta.id"]
`, kind, yamlString(consumer), yamlString(appURL), initTTL(kind), yamlString(name), kind)
	b.WriteString(strings.NewReplacer("{name}", yamlString(name), "{consumer}", yamlString(consumer)).Replace(config.KindOf(kind).Init))
	return b.String()
}

// initTTL is the seenset.ttl line of a webhook source's config: its
// profile's senders retry for longer than the default TTL keeps a key,
// and validate warns until it is raised.
func initTTL(kind string) string {
	if kind != "webhook" {
		return ""
	}
	h := webhook.RetryHorizon(webhook.ProfileStandard)
	return fmt.Sprintf("  # standard-webhooks senders may retry an event for up to %dh.\n  ttl: %dh\n", int(h.Hours()), int(h.Hours()))
}

// yamlString writes s as a YAML scalar: a JSON string is one, so a value
// with a colon or a quote stays a string.
func yamlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
