package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/redis/go-redis/v9/logging"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dedupe-proxy/dedupe-proxy/internal/admin"
	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// usageError is a command line a command cannot take: run prints its one
// line, then that command's usage (not the whole tool's), and exits 2.
type usageError struct {
	cmd *cobra.Command
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(c *cobra.Command, format string, a ...any) error {
	return &usageError{cmd: c, msg: fmt.Sprintf(format, a...)}
}

// exitCode ends the command with this status; it printed why itself.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// execute runs one command line and returns its exit status.
func execute(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	// Never nil: cobra reads os.Args when SetArgs was given nil.
	args = goFlagStyle(args)
	if file, ok := configWithoutCommand(args); ok {
		// `dedupe-proxy --config F`, as other daemons start: name the
		// command rather than print the overview.
		fmt.Fprintf(stderr, "dedupe-proxy: no command given; to run the proxy: dedupe-proxy run --config %s\n", file)
		fmt.Fprintf(stderr, "(every command: dedupe-proxy help)\n")
		return 2
	}
	// go-redis logs each failed dial on its own, as unformatted lines: a
	// command (keys, redrive, doctor) already says Redis is unreachable,
	// in one line that names the setting, and run's daemon installs its
	// own logger over this one.
	logging.Disable()
	root.SetArgs(append([]string{}, args...))
	cmd, err := root.ExecuteC()
	var code exitCode
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &ue):
		// Flags (through the flag error func) and arguments (every
		// command's Args) come here.
		fmt.Fprintln(stderr, ue.msg)
		fmt.Fprint(stderr, usage(ue.cmd))
		return 2
	default:
		// A command that failed without saying so itself (writing
		// stdout, say).
		fmt.Fprintf(stderr, "%s: %v\n", commandName(cmd), err)
		return 1
	}
}

// configWithoutCommand reports whether args are only --config FILE (no
// command), and FILE.
func configWithoutCommand(args []string) (string, bool) {
	switch {
	case len(args) == 2 && args[0] == "--config":
		return args[1], true
	case len(args) == 1 && strings.HasPrefix(args[0], "--config="):
		return strings.TrimPrefix(args[0], "--config="), true
	}
	return "", false
}

// goFlagStyle keeps the spellings the command line accepted when it was
// parsed with Go's flag package: a long flag after one dash (-config
// FILE, -image=X) and a one-letter flag after two (--f FILE, --q).
// Nothing after "--" is touched.
func goFlagStyle(args []string) []string {
	renamed := map[string]string{
		"-config": "--config", "-space": "--space", "-image": "--image", "-help": "--help", "-version": "--version",
		"--f": "-f", "--q": "-q", "--h": "-h", "--v": "-v",
	}
	out := append([]string{}, args...)
	for i, a := range out {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(a, "=")
		if to, ok := renamed[name]; ok {
			out[i] = to
			if hasValue {
				out[i] += "=" + value
			}
		}
	}
	return out
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "dedupe-proxy",
		Short: "consume from a broker, skip duplicates, forward the rest to your app",
		// Every error is printed by execute, once, with the usage of the
		// command it concerns.
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		Args:                       cobra.ArbitraryArgs,
		// `dedupe-proxy frobnicate --config F` is an unknown command,
		// not an unknown flag of the root.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(c *cobra.Command, args []string) error {
			if v, _ := c.Flags().GetBool("version"); v {
				return printVersion(c.OutOrStdout(), "text")
			}
			if len(args) == 0 {
				fmt.Fprint(c.ErrOrStderr(), overview)
				return exitCode(2)
			}
			return unknownCommand(c, args[0])
		},
	}
	root.Flags().BoolP("version", "v", false, "print the version (the version command)")
	root.CompletionOptions.DisableDefaultCmd = true // ours is completionCommand, with its own help
	root.SetHelpFunc(help)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		msg := err.Error()
		// The same nearness as an unknown config field's: --confg finds
		// --config.
		if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
			var known []string
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden {
					known = append(known, f.Name)
				}
			})
			msg += config.DidYouMean(name, known, func(f string) string { return "--" + f })
		}
		return usagef(c, "%s: %s", commandName(c), msg)
	})
	root.SetHelpCommand(helpCmd(root))
	root.AddCommand(
		runCommand(),
		validateCommand(),
		initCommand(),
		configGroup(),
		configCommand("doctor", doctorHelp, func(c *cobra.Command, cfg *config.Config, _ config.Origins, _ string) error {
			return runDoctor(cfg, c.OutOrStdout())
		}),
		keysCommand(),
		redriveCommand(),
		webhookCommand(),
		injectCommand(),
		versionCommand(),
		completionCommand(),
	)
	for _, c := range root.Commands() {
		c.DisableFlagsInUseLine = true
		for _, s := range c.Commands() {
			s.DisableFlagsInUseLine = true
		}
	}
	return root
}

// commandName is the command's path without the tool's name: "keys
// status", or "dedupe-proxy" for the root.
func commandName(c *cobra.Command) string {
	if !c.HasParent() {
		return c.Name()
	}
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// unknownCommand is "unknown command X" under c, with the nearest
// commands when one is close.
func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("%s: unknown command %q", commandName(c), name)
	if s := c.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	} else {
		msg += " (one of " + strings.Join(commandNames(c), ", ") + ")"
	}
	return usagef(c, "%s", msg)
}

// commandNames lists c's commands as help shows them.
func commandNames(c *cobra.Command) []string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return names
}

// configCommand is a command that loads the config named by --config
// (or $DEDUPE_PROXY_CONFIG) and takes no arguments.
func configCommand(name, long string, do func(c *cobra.Command, cfg *config.Config, o config.Origins, path string) error) *cobra.Command {
	c := &cobra.Command{
		Use:  name + " --config FILE",
		Long: long,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				// validate FILE: the one command whose file may come
				// as an argument (its Args allows it).
				_ = c.Flags().Set("config", args[0])
			}
			cfg, origins, path, err := loadConfig(c)
			if err != nil {
				return err
			}
			return do(c, cfg, origins, path)
		},
	}
	addConfigFlag(c.Flags())
	return c
}

// validateCommand is `validate --config FILE`, or `validate FILE`.
func validateCommand() *cobra.Command {
	c := configCommand("validate", validateHelp, func(c *cobra.Command, cfg *config.Config, _ config.Origins, path string) error {
		validate(cfg, path, c.OutOrStdout())
		return nil
	})
	c.Args = func(c *cobra.Command, args []string) error {
		switch {
		case len(args) > 1:
			return usagef(c, "validate: unexpected argument %q (one FILE, or --config FILE)", args[1])
		case len(args) == 1 && c.Flags().Changed("config"):
			return usagef(c, "validate: the file given twice, as %q and --config", args[0])
		}
		return nil
	}
	return c
}

// runCommand is `run`: the proxy alone, or after `-- APP [ARG...]` with
// the app started first as its child process (runapp.go).
func runCommand() *cobra.Command {
	c := &cobra.Command{
		Use:  "run --config FILE [--app-ready-timeout D] [-- APP [ARG...]]",
		Long: runHelp,
		Args: func(c *cobra.Command, args []string) error {
			dash := c.ArgsLenAtDash()
			switch {
			case dash < 0 && len(args) > 0:
				return usagef(c, "run: unexpected argument %q (the app's command goes after --: run --config FILE -- python3 app.py)", args[0])
			case dash > 0:
				return usagef(c, "run: unexpected argument %q before -- (the app's command goes after --)", args[0])
			case dash == 0 && len(args) == 0:
				return usagef(c, "run: no app command after --")
			}
			if c.Flags().Changed("app-ready-timeout") {
				d, _ := c.Flags().GetDuration("app-ready-timeout")
				if len(args) == 0 {
					return usagef(c, "run: --app-ready-timeout needs an app command after --")
				}
				if d <= 0 {
					return usagef(c, "run: --app-ready-timeout must be positive, got %s", d)
				}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			cfg, origins, _, err := loadConfig(c)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				return runProxy(cfg, c.ErrOrStderr())
			}
			// run -- APP is local development, read by a person in the
			// app's terminal: text logs unless log.format says otherwise.
			if origins.Of("log.format") == "default" {
				cfg.Log.Format = "text"
			}
			d, _ := c.Flags().GetDuration("app-ready-timeout")
			return runWithApp(cfg, args, d, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	addConfigFlag(c.Flags())
	c.Flags().Duration("app-ready-timeout", defaultAppReadyTimeout, "with an app after --: how long its app.health_url may take to answer 2xx (`D`, e.g. 30s, 2m)")
	return c
}

func addConfigFlag(fs *pflag.FlagSet) {
	fs.String("config", "", "the config `FILE` (YAML; default $"+config.EnvConfigFile+")")
	_ = fs.SetAnnotation("config", cobra.BashCompFilenameExt, []string{"yaml", "yml"})
}

func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef(c, "%s: unexpected argument %q", commandName(c), args[0])
	}
	return nil
}

// loadConfig loads --config; an invalid file is listed on stderr, every
// problem on its own line, and the status is 1.
func loadConfig(c *cobra.Command) (*config.Config, config.Origins, string, error) {
	path, _ := c.Flags().GetString("config")
	if path == "" {
		path = os.Getenv(config.EnvConfigFile)
	}
	if path == "" {
		return nil, nil, "", usagef(c, "%s: --config FILE is required (or set %s)", commandName(c), config.EnvConfigFile)
	}
	cfg, origins, err := config.LoadWithOrigins(path, nil)
	if err != nil {
		fmt.Fprintf(c.ErrOrStderr(), "invalid configuration %s:\n%s\n", path, indent(err))
		return nil, nil, "", exitCode(1)
	}
	return cfg, origins, path, nil
}

// group is a command whose work is done by its subcommands (config
// print, keys status): given anything else it says what it wants.
func group(use, long, want string) *cobra.Command {
	return &cobra.Command{
		Use:                        use,
		Long:                       long,
		Args:                       cobra.ArbitraryArgs,
		SuggestionsMinimumDistance: 2,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef(c, "%s: want %s", c.Name(), want)
			}
			msg := fmt.Sprintf("%s: want %s, got %q", c.Name(), want, args[0])
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return usagef(c, "%s", msg)
		},
	}
}

func configGroup() *cobra.Command {
	g := group("config print --config FILE | schema", configHelp, "`config print` or `config schema`")
	addConfigFlag(g.PersistentFlags())
	g.AddCommand(&cobra.Command{
		Use:  "print --config FILE",
		Long: configHelp,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				// validate FILE: the one command whose file may come
				// as an argument (its Args allows it).
				_ = c.Flags().Set("config", args[0])
			}
			cfg, origins, path, err := loadConfig(c)
			if err != nil {
				return err
			}
			return printConfig(cfg, origins, path, c.OutOrStdout(), c.ErrOrStderr())
		},
	})
	g.AddCommand(schemaCommand())
	return g
}

func keysCommand() *cobra.Command {
	g := group("keys status|forget KEY | list --config FILE [--space NAME]", keysHelp, "`keys status KEY`, `keys forget KEY` or `keys list`")
	addConfigFlag(g.PersistentFlags())
	g.PersistentFlags().String("space", "", "the key space `NAME`: a source's key_space, by default its name (needed when the config has several)")
	g.PersistentFlags().StringP("output", "o", "json", "the `FORMAT`: json (one JSON line per key) or table (aligned columns, TTL in whole seconds)")
	_ = g.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "table"}, cobra.ShellCompDirectiveNoFileComp))
	for _, sub := range []string{"status", "forget"} {
		g.AddCommand(&cobra.Command{
			Use:  sub + " KEY --config FILE [--space NAME]",
			Long: keysHelp,
			Args: func(c *cobra.Command, args []string) error {
				if len(args) != 1 {
					return usagef(c, "keys %s: want one KEY, got %d argument(s) (a key that starts with '-' goes after --)", sub, len(args))
				}
				return nil
			},
			ValidArgsFunction: cobra.NoFileCompletions,
			RunE: func(c *cobra.Command, args []string) error {
				cfg, _, _, err := loadConfig(c)
				if err != nil {
					return err
				}
				space, _ := c.Flags().GetString("space")
				format, err := outputFormat(c)
				if err != nil {
					return err
				}
				return keys(cfg, sub, space, args[0], format, c.OutOrStdout(), c.ErrOrStderr())
			},
		})
	}
	list := &cobra.Command{
		Use:  "list --config FILE [--space NAME] [--state inflight|done] [--prefix P] [--limit N]",
		Long: keysHelp,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef(c, "keys list: takes no KEY, got %d argument(s) (choose keys with --prefix)", len(args))
			}
			return nil
		},
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, _, _, err := loadConfig(c)
			if err != nil {
				return err
			}
			var o admin.ListOptions
			o.Space, _ = c.Flags().GetString("space")
			o.State, _ = c.Flags().GetString("state")
			o.Prefix, _ = c.Flags().GetString("prefix")
			o.Limit, _ = c.Flags().GetInt("limit")
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			return keysList(cfg, o, format, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	list.Flags().String("state", "", "only keys in this `STATE`: inflight or done")
	list.Flags().String("prefix", "", "only message keys that start with `P`")
	list.Flags().Int("limit", admin.DefaultListLimit, "show at most `N` keys")
	g.AddCommand(list)
	return g
}

// outputFormat is the keys commands' -o: json or table.
func outputFormat(c *cobra.Command) (string, error) {
	f, _ := c.Flags().GetString("output")
	if f != "json" && f != "table" {
		return "", usagef(c, "%s: -o %q: want json or table", commandName(c), f)
	}
	return f, nil
}

func helpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:                   "help [COMMAND]",
		Long:                  helpHelp,
		DisableFlagsInUseLine: true,
		ValidArgsFunction: func(_ *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			var names []string
			for _, n := range commandNames(root) {
				if len(args) == 0 && strings.HasPrefix(n, prefix) {
					names = append(names, n)
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				fmt.Fprint(c.OutOrStdout(), overview)
				return nil
			}
			target, _, err := root.Find(args)
			if err != nil || target == root {
				e := unknownCommand(root, args[0]).(*usageError)
				return usagef(c, "help: %s", strings.TrimPrefix(e.msg, root.Name()+": "))
			}
			help(target, nil)
			return nil
		},
	}
}

// help prints the overview, or one command's usage, what it does and its
// flags; `help CMD` and `CMD --help` both come here.
func help(c *cobra.Command, _ []string) {
	w := c.OutOrStdout()
	if !c.HasParent() {
		fmt.Fprint(w, overview)
		return
	}
	fmt.Fprintf(w, "Usage: %s\n", c.UseLine())
	if long := strings.TrimSpace(c.Long); long != "" {
		fmt.Fprintf(w, "\n%s\n", long)
	}
	if f := flagUsages(c); f != "" {
		fmt.Fprintf(w, "\nFlags:\n%s", f)
	}
}

// usage is what follows a usage error: the command's usage line and
// flags, and where to read more.
func usage(c *cobra.Command) string {
	if !c.HasParent() {
		return "Run 'dedupe-proxy help' for the commands.\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n", c.UseLine())
	if f := flagUsages(c); f != "" {
		fmt.Fprintf(&b, "Flags:\n%s", f)
	}
	fmt.Fprintf(&b, "Run 'dedupe-proxy help %s' for more.\n", commandName(c))
	return b.String()
}

// flagUsages lists c's flags, its own and those of its parents (keys
// status: --config and --space), but not --help, which every command has.
func flagUsages(c *cobra.Command) string {
	all := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	add := func(f *pflag.Flag) {
		if f.Name != "help" && all.Lookup(f.Name) == nil {
			all.AddFlag(f)
		}
	}
	c.LocalFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	return all.FlagUsages()
}
