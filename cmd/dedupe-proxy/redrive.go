package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
	keyrules "github.com/dedupe-proxy/dedupe-proxy/internal/keys"
	"github.com/dedupe-proxy/dedupe-proxy/internal/redrive"
)

const redriveHelp = `
Move the dead letters of source NAME back to its queue, topic, list or
stream, once the bug that failed them is fixed: RabbitMQ from the
dead-letter queue (dead_letter.queue, or in mode publish through the
default exchange the routing_key's queue), Kafka from dead_letter_topic
to the topic and partition each came from, Redis from the dead-letter
list or stream. Only the dead letters present at the start move, oldest
first; each is removed from the dead letters only after the broker
confirmed its republish, so a failure or a crash leaves a copy in both
places, never in neither (the seen-set recognises the copy). The body is
byte for byte the original; the proxy's x-dedupe-* headers and RabbitMQ's
x-death records are dropped.

Keys are kept: a message whose key is done (it did succeed before) is
acked as a duplicate without reaching the app. --forget-keys forgets
each message's key first (found with the source's key rules), so it is
processed again. --dry-run lists what would move and changes nothing;
--limit N moves at most N. One line per message, then a summary; exit 1
when anything failed. A long run also prints, every 2 s on stderr, how
many moved so far and the rate. -q prints the summary only; -o json
prints one JSON object per message and one for the summary.

  dedupe-proxy redrive --config config.yaml --source orders --dry-run
  dedupe-proxy redrive --config config.yaml --source orders --limit 10
`

func redriveCommand() *cobra.Command {
	c := &cobra.Command{
		Use:  "redrive --config FILE --source NAME [--dry-run] [--forget-keys] [--limit N]",
		Long: redriveHelp,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f := c.Flags()
			name, _ := f.GetString("source")
			limit, _ := f.GetInt("limit")
			if name == "" {
				return usagef(c, "redrive: --source NAME is required")
			}
			if limit < 0 {
				return usagef(c, "redrive: --limit must be 0 (all) or more, got %d", limit)
			}
			cfg, _, _, err := loadConfig(c)
			if err != nil {
				return err
			}
			var o redrive.Options
			o.DryRun, _ = f.GetBool("dry-run")
			o.ForgetKeys, _ = f.GetBool("forget-keys")
			o.Limit = limit
			o.Quiet, _ = f.GetBool("quiet")
			switch format, _ := f.GetString("output"); format {
			case "text":
			case "json":
				o.JSON = true
			default:
				return usagef(c, "redrive: -o %q: want text or json", format)
			}
			return runRedrive(cfg, name, o, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	addConfigFlag(c.Flags())
	c.Flags().String("source", "", "the source `NAME` whose dead letters go back")
	c.Flags().Bool("dry-run", false, "list what would move; change nothing")
	c.Flags().Bool("forget-keys", false, "forget each message's key in the seen-set first, so it is processed again")
	c.Flags().Int("limit", 0, "move at most `N` dead letters (0: all)")
	c.Flags().BoolP("quiet", "q", false, "print the summary only: no line per dead letter, no progress")
	c.Flags().StringP("output", "o", "text", "the `FORMAT`: text, or json (one JSON object per dead letter and one for the summary)")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.RegisterFlagCompletionFunc("source", func(c *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		cfg, _, _, err := loadConfig(c)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, s := range cfg.Sources {
			names = append(names, s.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	return c
}

// runRedrive is `dedupe-proxy redrive` once the config loaded.
func runRedrive(cfg *config.Config, name string, o redrive.Options, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fail := func(err error) error {
		fmt.Fprintf(stderr, "redrive: %v\n", err)
		return exitCode(1)
	}
	r, sc, err := daemon.NewRedriver(cfg, name)
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	if o.Keys, err = keyrules.Parse(sc.Key); err != nil {
		return fail(fmt.Errorf("source %s key: %w", name, err))
	}
	if o.ForgetKeys && !o.DryRun {
		st, err := daemon.NewStore(cfg)
		if err != nil {
			return fail(fmt.Errorf("seen-set: %w", err))
		}
		defer st.Close()
		o.Store = st
	}
	o.Source, o.Redriver, o.Consumer, o.Space, o.Out, o.Progress = name, r, cfg.Consumer, sc.StoredKeySpace(), stdout, stderr
	if _, err := redrive.Run(ctx, o); err != nil {
		return fail(err)
	}
	return nil
}
