package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dedupe-proxy/dedupe-proxy/internal/buildinfo"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
)

func versionCommand() *cobra.Command {
	c := &cobra.Command{
		Use:  "version [-o text|json]",
		Long: versionHelp,
		Args: noArgs,
	}
	output := c.Flags().StringP("output", "o", "text", "the `FORMAT`: text or json")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	c.RunE = func(c *cobra.Command, _ []string) error {
		if *output != "text" && *output != "json" {
			return usagef(c, "version: -o must be text or json, got %q", *output)
		}
		return printVersion(c.OutOrStdout(), *output)
	}
	return c
}

func printVersion(w io.Writer, format string) error {
	info := buildinfo.Get(daemon.Version)
	if format == "json" {
		b, err := json.Marshal(info)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if info.Revision == "" {
		_, err := fmt.Fprintf(w, "dedupe-proxy %s (%s)\n", info.Version, info.GoVersion)
		return err
	}
	_, err := fmt.Fprintf(w, "dedupe-proxy %s (%s, revision %s)\n", info.Version, info.GoVersion, info.Revision)
	return err
}

func completionCommand() *cobra.Command {
	shells := []string{"bash", "zsh", "fish"}
	return &cobra.Command{
		Use:       "completion bash|zsh|fish",
		Long:      completionHelp,
		ValidArgs: shells,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh" && args[0] != "fish") {
				return usagef(c, "completion: want one shell, bash, zsh or fish, got %q", strings.Join(args, " "))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			root, w := c.Root(), c.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			default:
				return root.GenFishCompletion(w, true)
			}
		},
	}
}
