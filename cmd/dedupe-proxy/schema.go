package main

import (
	"github.com/spf13/cobra"

	dedupeproxy "github.com/dedupe-proxy/dedupe-proxy"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// schemaCommand is `config schema`: the config file's JSON Schema, the
// one config.schema.json holds.
func schemaCommand() *cobra.Command {
	return &cobra.Command{
		Use:  "schema",
		Long: schemaHelp,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			s, err := config.Schema(dedupeproxy.ExampleConfig)
			if err != nil {
				return err
			}
			_, err = c.OutOrStdout().Write(s)
			return err
		},
	}
}
