// Command chartconfig reads a `helm template` render of the dedupe-proxy
// chart on stdin and writes what the proxy container would get:
// DIR/config.yaml (from the ConfigMap) and DIR/env (NAME=VALUE lines, values
// from Secrets replaced by placeholders). helm/check.sh then runs
// `dedupe-proxy validate` on them.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dedupe-proxy/dedupe-proxy/helm/charttest"
)

func main() {
	out := flag.String("out", "", "directory to write config.yaml and env into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "chartconfig:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if dir == "" {
		return fmt.Errorf("-out DIR is required")
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	objs, err := charttest.Decode(in)
	if err != nil {
		return err
	}
	cfg, err := objs.Config()
	if err != nil {
		return err
	}
	if len(objs.Deployments) != 1 {
		return fmt.Errorf("want 1 Deployment, got %d", len(objs.Deployments))
	}
	proxy, _, err := charttest.Proxy(objs.Deployments[0])
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, charttest.ConfigKey), []byte(cfg), 0o644); err != nil {
		return err
	}
	var env strings.Builder
	for _, kv := range charttest.ValidationEnv(proxy) {
		env.WriteString(kv + "\n")
	}
	return os.WriteFile(filepath.Join(dir, "env"), []byte(env.String()), 0o644)
}
