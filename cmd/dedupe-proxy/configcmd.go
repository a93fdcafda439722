package main

import (
	"fmt"
	"io"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// printConfig is `config print`.
func printConfig(cfg *config.Config, origins config.Origins, path string, stdout, stderr io.Writer) error {
	fmt.Fprintf(stdout, "# effective configuration: %s and DEDUPE_PROXY_* variables; secrets shown as %s, URL passwords as %s\n", path, config.Redacted, config.RedactedURLPassword)
	if err := cfg.Print(stdout, origins); err != nil {
		fmt.Fprintf(stderr, "config print: %v\n", err)
		return exitCode(1)
	}
	return nil
}
