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
	// Mode shared renders no Deployment: the workloads injected later
	// bring their own environment, so the config is checked without one.
	var env strings.Builder
	switch len(objs.Deployments) {
	case 0:
	case 1:
		proxy, _, err := charttest.Proxy(objs.Deployments[0])
		if err != nil {
			return err
		}
		for _, kv := range charttest.ValidationEnv(proxy) {
			env.WriteString(kv + "\n")
		}
	default:
		return fmt.Errorf("want at most 1 Deployment, got %d", len(objs.Deployments))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, charttest.ConfigKey), []byte(cfg), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "env"), []byte(env.String()), 0o644)
}
