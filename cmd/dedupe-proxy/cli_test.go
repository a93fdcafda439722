package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9/logging"
	"github.com/spf13/cobra"

	"github.com/dedupe-proxy/dedupe-proxy/internal/buildinfo"
	"github.com/dedupe-proxy/dedupe-proxy/internal/daemon"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// asCLI makes the test binary act as dedupe-proxy, so that a shell's
// completion script can call it.
const asCLI = "DPTEST_AS_CLI" // not DEDUPE_PROXY_*: the config would take it for a setting

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// every visits each command a user can type, subcommands included.
func every(c *cobra.Command, visit func(*cobra.Command)) {
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			visit(s)
			every(s, visit)
		}
	}
}

// `CMD --help`, `CMD -h` and `help CMD` work for every command and
// subcommand: exit 0, its usage line first, on stdout only.
func TestEveryCommandHasHelp(t *testing.T) {
	n := 0
	every(newRoot(), func(c *cobra.Command) {
		n++
		path := strings.Fields(commandName(c))
		for _, args := range [][]string{append(slices.Clone(path), "--help"), append(slices.Clone(path), "-h"), append([]string{"help"}, path...)} {
			code, out, errOut := cli(args...)
			if code != 0 || !strings.HasPrefix(out, "Usage: dedupe-proxy "+strings.Join(path, " ")) || errOut != "" {
				t.Errorf("%v: exit %d, stderr %q, stdout:\n%s", args, code, errOut, out)
			}
			if strings.Contains(out, "consume from a broker") {
				t.Errorf("%v: printed the tool's overview, not the command's help:\n%s", args, out)
			}
		}
	})
	if n < 14 { // 10 commands, config print, keys status, forget and list, webhook send
		t.Errorf("visited %d commands", n)
	}
	if code, out, _ := cli("help", "help"); code != 0 || !strings.HasPrefix(out, "Usage: dedupe-proxy help [COMMAND]") {
		t.Errorf("help help: %d %q", code, out)
	}
}

// `help` (and -h, --help) lists every command.
func TestHelpListsEveryCommand(t *testing.T) {
	names := append(commandNames(newRoot()), "help", "config print", "keys status", "keys forget", "keys list", "webhook send")
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		code, out, _ := cli(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, name := range names {
			if !strings.Contains(out, "\n  dedupe-proxy "+name+" ") {
				t.Errorf("%v does not list %s:\n%s", args, name, out)
			}
		}
	}
}

// A command line a command cannot take: exit 2, one line saying why,
// then that command's usage, not the whole tool's.
func TestUsageErrorIsOneLineAndTheCommandsUsage(t *testing.T) {
	cfg := writeConfig(t, "consumer: c\nsources: [{name: orders, rabbitmq: {queue: orders}}]\n")
	for _, c := range []struct {
		args      []string
		line      string // the first line
		usageLine string // the second
	}{
		{[]string{"validate", "extra", "--config", cfg}, `validate: the file given twice, as "extra" and --config`, "Usage: dedupe-proxy validate --config FILE"},
		{[]string{"validate", cfg, "extra"}, `validate: unexpected argument "extra" (one FILE, or --config FILE)`, "Usage: dedupe-proxy validate --config FILE"},
		{[]string{"validate"}, "validate: --config FILE is required (or set DEDUPE_PROXY_CONFIG)", "Usage: dedupe-proxy validate --config FILE"},
		{[]string{"run", "--bogus"}, "run: unknown flag: --bogus", "Usage: dedupe-proxy run --config FILE [--app-ready-timeout D] [-- APP [ARG...]]"},
		{[]string{"run", "--confg", cfg}, "run: unknown flag: --confg (did you mean --config?)", "Usage: dedupe-proxy run --config FILE [--app-ready-timeout D] [-- APP [ARG...]]"},
		{[]string{"redrive", "--dryrun"}, "redrive: unknown flag: --dryrun (did you mean --dry-run?)", "Usage: dedupe-proxy redrive --config FILE --source NAME [--dry-run] [--forget-keys] [--limit N]"},
		{[]string{"run", "--config", cfg, "python3", "app.py"}, `run: unexpected argument "python3" (the app's command goes after --: run --config FILE -- python3 app.py)`, "Usage: dedupe-proxy run --config FILE [--app-ready-timeout D] [-- APP [ARG...]]"},
		{[]string{"run", "--config", cfg, "--"}, "run: no app command after --", "Usage: dedupe-proxy run --config FILE [--app-ready-timeout D] [-- APP [ARG...]]"},
		{[]string{"run", "--config", cfg, "--app-ready-timeout", "5s"}, "run: --app-ready-timeout needs an app command after --", "Usage: dedupe-proxy run --config FILE [--app-ready-timeout D] [-- APP [ARG...]]"},
		{[]string{"run", "--config", cfg, "--app-ready-timeout", "0s", "--", "true"}, "run: --app-ready-timeout must be positive, got 0s", "Usage: dedupe-proxy run --config FILE [--app-ready-timeout D] [-- APP [ARG...]]"},
		{[]string{"doctor", "--config"}, "doctor: flag needs an argument: --config", "Usage: dedupe-proxy doctor --config FILE"},
		{[]string{"keys", "purge", "k", "--config", cfg}, "keys: want `keys status KEY`, `keys forget KEY` or `keys list`, got \"purge\"", "Usage: dedupe-proxy keys status|forget KEY | list --config FILE [--space NAME]"},
		{[]string{"keys", "list", "k", "--config", cfg}, "keys list: takes no KEY, got 1 argument(s) (choose keys with --prefix)", "Usage: dedupe-proxy keys list --config FILE [--space NAME] [--state inflight|done] [--prefix P] [--limit N]"},
		{[]string{"keys", "status", "a", "b", "--config", cfg}, "keys status: want one KEY, got 2 argument(s) (a key that starts with '-' goes after --)", "Usage: dedupe-proxy keys status KEY --config FILE [--space NAME]"},
		{[]string{"config"}, "config: want `config print` or `config schema`", "Usage: dedupe-proxy config print --config FILE | schema"},
		{[]string{"redrive", "--config", cfg}, "redrive: --source NAME is required", "Usage: dedupe-proxy redrive --config FILE --source NAME [--dry-run] [--forget-keys] [--limit N]"},
		{[]string{"redrive", "--config", cfg, "--source", "orders", "--limit", "-1"}, "redrive: --limit must be 0 (all) or more, got -1", "Usage: dedupe-proxy redrive --config FILE --source NAME [--dry-run] [--forget-keys] [--limit N]"},
		{[]string{"redrive", "orders", "--config", cfg}, `redrive: unexpected argument "orders"`, "Usage: dedupe-proxy redrive --config FILE --source NAME [--dry-run] [--forget-keys] [--limit N]"},
		{[]string{"config", "print", "x", "--config", cfg}, `config print: unexpected argument "x"`, "Usage: dedupe-proxy config print --config FILE"},
		{[]string{"inject", "extra"}, `inject: unexpected argument "extra" (use -f FILE)`, "Usage: dedupe-proxy inject [-f FILE|DIR|-] [--image IMAGE] [-q]"},
		{[]string{"version", "-o", "yaml"}, `version: -o must be text or json, got "yaml"`, "Usage: dedupe-proxy version [-o text|json]"},
		{[]string{"completion", "powershell"}, `completion: want one shell, bash, zsh or fish, got "powershell"`, "Usage: dedupe-proxy completion bash|zsh|fish"},
		{[]string{"help", "frobnicate"}, `help: unknown command "frobnicate" (one of completion, config, doctor, init, inject, keys, redrive, run, validate, version, webhook)`, "Usage: dedupe-proxy help [COMMAND]"},
		{[]string{"frobnicate", "--config", cfg}, `dedupe-proxy: unknown command "frobnicate" (one of completion, config, doctor, init, inject, keys, redrive, run, validate, version, webhook)`, "Run 'dedupe-proxy help' for the commands."},
	} {
		code, out, errOut := cli(c.args...)
		lines := strings.Split(errOut, "\n")
		if code != 2 || out != "" || len(lines) < 2 || lines[0] != c.line || lines[1] != c.usageLine {
			t.Errorf("%v: exit %d, stdout %q, stderr:\n%s\nwant exit 2, then:\n%s\n%s", c.args, code, out, errOut, c.line, c.usageLine)
		}
		if strings.Contains(errOut, "consume from a broker") || strings.Count(errOut, "Usage:") > 1 {
			t.Errorf("%v: not one usage, the command's:\n%s", c.args, errOut)
		}
	}
}

// A mistyped command is answered with the nearest one, at every level.
func TestDidYouMeanCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"valdate"}, `dedupe-proxy: unknown command "valdate"; did you mean validate?`},
		{[]string{"docter", "--config", "x.yaml"}, `dedupe-proxy: unknown command "docter"; did you mean doctor?`},
		{[]string{"verison"}, `dedupe-proxy: unknown command "verison"; did you mean version?`},
		{[]string{"help", "injet"}, `help: unknown command "injet"; did you mean init or inject?`},
		{[]string{"keys", "stauts", "k"}, "keys: want `keys status KEY`, `keys forget KEY` or `keys list`, got \"stauts\"; did you mean status?"},
		{[]string{"config", "prnt"}, "config: want `config print` or `config schema`, got \"prnt\"; did you mean print?"},
	} {
		code, _, errOut := cli(c.args...)
		if code != 2 || !strings.HasPrefix(errOut, c.want+"\n") {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant first line %s", c.args, code, errOut, c.want)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	build := buildinfo.Get(daemon.Version)
	for _, args := range [][]string{{"version", "-o", "json"}, {"version", "--output=json"}} {
		code, out, errOut := cli(args...)
		var v map[string]string
		if code != 0 || errOut != "" || json.Unmarshal([]byte(out), &v) != nil || !strings.HasSuffix(out, "}\n") {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		if v["version"] != build.Version || v["goversion"] != runtime.Version() || v["revision"] != build.Revision || len(v) != 3 {
			t.Errorf("%v = %v, want version %s, goversion %s and revision %q", args, v, build.Version, runtime.Version(), build.Revision)
		}
		if _, ok := v["revision"]; !ok {
			t.Errorf("%v: no revision in %v", args, v)
		}
	}
	for _, args := range [][]string{{"version"}, {"version", "-o", "text"}, {"--version"}, {"-v"}} {
		if code, out, _ := cli(args...); code != 0 || !strings.HasPrefix(out, "dedupe-proxy "+build.Version+" ("+runtime.Version()) {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
}

// The spellings of Go's flag package, which the command line used to be
// parsed with, still work.
func TestGoFlagSpellings(t *testing.T) {
	cfg := writeConfig(t, "consumer: c\nsources: [{name: orders, rabbitmq: {queue: orders}}]\n")
	for _, args := range [][]string{
		{"validate", "-config", cfg},
		{"validate", "-config=" + cfg},
		{"validate", "--config=" + cfg},
		{"config", "--config", cfg, "print"},
	} {
		if code, _, errOut := cli(args...); code != 0 {
			t.Errorf("%v: exit %d, %s", args, code, errOut)
		}
	}
	golden := filepath.Join("..", "..", "internal", "inject", "testdata", "pod.in.yaml")
	for _, args := range [][]string{{"inject", "--f", golden, "--q"}, {"inject", "-f=" + golden, "-q"}, {"inject", "--file", golden, "--quiet", "-image", "example.com/dp:1"}} {
		code, out, errOut := cli(args...)
		if code != 0 || !strings.Contains(out, "dedupe-proxy") || strings.Contains(errOut, "document(s)") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if got := goFlagStyle([]string{"keys", "status", "--", "-config"}); got[3] != "-config" {
		t.Errorf("a key after -- was rewritten: %v", got)
	}
}

// What the shells' completion scripts ask the binary (`__complete`).
func TestCompletionAnswers(t *testing.T) {
	for _, c := range []struct {
		line []string
		want []string
	}{
		{[]string{""}, []string{"completion", "config", "doctor", "help", "init", "inject", "keys", "redrive", "run", "validate", "version", "webhook"}},
		{[]string{"val"}, []string{"validate"}},
		{[]string{"keys", ""}, []string{"forget", "list", "status"}},
		{[]string{"config", ""}, []string{"print", "schema"}},
		{[]string{"run", "--con"}, []string{"--config"}},
		{[]string{"keys", "status", "--sp"}, []string{"--space"}},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}},
		{[]string{"version", "-o", ""}, []string{"json", "text"}},
		{[]string{"help", "d"}, []string{"doctor"}},
		{[]string{"redrive", "--config", "testdata/redrive-sources.yaml", "--source", ""}, []string{"orders", "events"}},
	} {
		code, out, _ := cli(append([]string{cobra.ShellCompNoDescRequestCmd}, c.line...)...)
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if l != "" && !strings.HasPrefix(l, ":") {
				got = append(got, l)
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if code != 0 || !slices.Equal(got, want) {
			t.Errorf("complete %q: exit %d, %q, want %q", c.line, code, got, want)
		}
	}
}

// The scripts themselves, loaded into the real shells, with the test
// binary standing in as dedupe-proxy on PATH.
func TestCompletionScripts(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := cli("completion", sh)
		if code != 0 || errOut != "" || !strings.Contains(out, "dedupe-proxy") || !strings.Contains(out, "__complete") {
			t.Fatalf("completion %s: exit %d, stderr %q", sh, code, errOut)
		}
	}
	bin := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\n" + asCLI + "=1 exec '" + self + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "dedupe-proxy"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	shell := func(t *testing.T, name string, args ...string) string {
		t.Helper()
		if _, err := exec.LookPath(name); err != nil {
			t.Skipf("%s is not installed", name)
		}
		cmd := exec.Command(name, args...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		return string(out)
	}

	t.Run("bash", func(t *testing.T) {
		const lib = "/usr/share/bash-completion/bash_completion"
		if _, err := os.Stat(lib); err != nil {
			t.Skip("the bash-completion package is not installed")
		}
		script := `source ` + lib + `
source <(dedupe-proxy completion bash)
complete_line() {
  COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<<"$1"
  [[ "$1" == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=()
  __start_dedupe-proxy dedupe-proxy "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}" 2>/dev/null
  echo "$1 => ${COMPREPLY[*]}"
}
complete_line "dedupe-proxy val"
complete_line "dedupe-proxy keys "
complete_line "dedupe-proxy run --con"
complete_line "dedupe-proxy version -o "
`
		out := shell(t, "bash", "-c", script)
		for _, want := range []string{
			"dedupe-proxy val => validate\n",
			"dedupe-proxy keys  => forget list status\n",
			"dedupe-proxy run --con => --config\n",
			"dedupe-proxy version -o  => text json\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("missing %q in:\n%s", want, out)
			}
		}
	})
	t.Run("fish", func(t *testing.T) {
		out := shell(t, "fish", "--no-config", "-c",
			`dedupe-proxy completion fish | source; complete -C "dedupe-proxy val"; echo ---; complete -C "dedupe-proxy keys "`)
		if out != "validate\n---\nforget\nlist\nstatus\n" {
			t.Errorf("fish completed:\n%s", out)
		}
	})
	t.Run("zsh", func(t *testing.T) {
		// zsh completes only in an interactive line editor; what can be
		// checked here is that the script parses and defines its function.
		out := shell(t, "zsh", "-f", "-c",
			`autoload -Uz compinit && compinit -u -D; source <(dedupe-proxy completion zsh); whence -w _dedupe-proxy`)
		if out != "_dedupe-proxy: function\n" {
			t.Errorf("zsh: %q", out)
		}
	})
}

type brokenPipe struct{}

func (brokenPipe) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// A command that fails on its own, here writing stdout, exits 1 and says
// why; it is no usage error.
func TestFailureIsNoUsageError(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"version", "-o", "json"}, {"completion", "bash"}} {
		var errb strings.Builder
		code := run(args, brokenPipe{}, &errb)
		if code != 1 || !strings.Contains(errb.String(), ": broken pipe\n") || strings.Contains(errb.String(), "Usage:") {
			t.Errorf("%v to a broken stdout: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// `dedupe-proxy run` as a process: its start line names the admin
// address and the webhook listener, /readyz answers, and SIGTERM stops
// it with exit status 0.
func TestRunProcess(t *testing.T) {
	rabbit := testutil.NewRabbit(t)
	q := rabbit.Queue("run-cli-", nil)
	admin := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	hooks := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	cfg := writeConfig(t, fmt.Sprintf(`consumer: run-cli
admin: {listen: %q}
app: {url: "http://127.0.0.1:1"}
seenset: {redis: {addrs: [%q], prefix: %q}}
sources:
  - name: orders
    rabbitmq: {url: %q, queue: %s}
  - name: hooks
    type: webhook
    webhook:
      listen: %q
      path: /hooks
      secrets: ["env:RUN_CLI_SECRET"]
      target: {rabbitmq: {url: %q, routing_key: %s}}
`, admin, testutil.RedisAddr(), testutil.UniqueName("dptest:cli:")+":", testutil.RabbitURL(), q, hooks, testutil.RabbitURL(), q))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "run", "--config", cfg)
	cmd.Env = append(os.Environ(), asCLI+"=1", "RUN_CLI_SECRET=whsec_"+strings.Repeat("A", 32))
	var stderr testutil.LogBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/readyz?deps=1")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz?deps=1 not 200 within 20s (%v):\n%s", err, stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not stop within 30s of SIGTERM:\n%s", stderr.String())
	}
	log := stderr.String()
	start := ""
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"dedupe-proxy starting"`) {
			start = l
		}
	}
	for _, want := range []string{`"admin":"` + admin + `"`, `"webhooks":{"hooks":{"listen":"` + hooks + `","path":"/hooks"}}`} {
		if !strings.Contains(start, want) {
			t.Errorf("start line lacks %s:\n%s", want, log)
		}
	}
}

// What a newcomer types: validate FILE, and --config F with no command.
func TestValidateFileAndConfigWithoutCommand(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	bad := strings.Join([]string{
		"consumer: x", "app:", "  url: http://127.0.0.1:8080", "seenset:", "  redis:", "    addrs: [\"127.0.0.1:6379\"]",
		"sources:", "  - name: orders", "    type: rabbit", "    rabbitmq:", "      url: 127.0.0.1:5672", "      queue: orders",
	}, "\n")
	if err := os.WriteFile(cfg, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	if code := execute([]string{"validate", cfg}, strings.NewReader(""), &out, &errb); code != 1 {
		t.Fatalf("validate FILE: exit %d, stderr %s", code, errb.String())
	}
	for _, want := range []string{`got "rabbit" (did you mean rabbitmq?)`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("validate FILE: stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(bad, "type: rabbit", "type: rabbitmq", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	execute([]string{"validate", cfg}, strings.NewReader(""), &out, &errb)
	if want := `got "127.0.0.1:5672"; write it as amqp://USER:PASSWORD@127.0.0.1:5672/`; !strings.Contains(errb.String(), want) {
		t.Errorf("a host:port URL: stderr lacks %q:\n%s", want, errb.String())
	}
	for _, args := range [][]string{{"--config", cfg}, {"--config=" + cfg}, {"-config", cfg}} {
		errb.Reset()
		if code := execute(args, strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), "dedupe-proxy run --config "+cfg) {
			t.Errorf("%v: exit %d, stderr %s", args, code, errb.String())
		}
	}
}

// doctor reports an unreachable Redis in its own line; go-redis' own log
// lines (one per failed dial, on stderr) never reach the user.
func TestDoctorPrintsNoGoRedisLines(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	conf := "consumer: x\napp:\n  url: http://127.0.0.1:1\nseenset:\n  redis:\n    addrs: [\"127.0.0.1:1\"]\n" +
		"sources:\n  - name: orders\n    type: redis\n    redis:\n      addrs: [\"127.0.0.1:1\"]\n      queue: q\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	var code int
	raw := goRedisStderr(t, func() {
		code = execute([]string{"doctor", "--config", cfg}, strings.NewReader(""), &out, &errb)
	})
	if code != 1 || !strings.Contains(out.String(), "not reachable") {
		t.Fatalf("exit %d, stdout %s", code, out.String())
	}
	if s := raw + errb.String(); strings.Contains(s, "redis:") || strings.Contains(s, "pool") {
		t.Fatalf("go-redis lines on stderr:\n%s", s)
	}
}

// goRedisStderr runs f with go-redis' default logger on and returns what
// reached the process's stderr meanwhile: that logger writes to os.Stderr
// as it is when the logger is made, so it is made on a pipe.
func goRedisStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	defer func() { os.Stderr = saved }()
	logging.Enable()
	caught := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		caught <- string(b)
	}()
	f()
	os.Stderr = saved
	_ = w.Close()
	return <-caught
}
