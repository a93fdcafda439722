package model

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// spinAvailable finds spin and a C compiler, installing them with apt-get
// when missing and this runs as root (as CI does), and skips the test
// when neither works.
func spinAvailable(t *testing.T) {
	t.Helper()
	have := func() bool {
		_, e1 := exec.LookPath("spin")
		_, e2 := exec.LookPath("cc")
		return e1 == nil && e2 == nil
	}
	if have() {
		return
	}
	if _, err := exec.LookPath("apt-get"); err == nil && os.Geteuid() == 0 {
		cmd := exec.Command("apt-get", "install", "-y", "-qq", "spin", "gcc")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil || !have() {
			t.Skipf("spin (Debian package spin) and cc are needed to check the model, and apt-get could not install them: %v\n%s", err, out)
		}
		return
	}
	t.Skip("spin (Debian package spin) and cc are needed to check the model: not installed, and apt-get is not available as root here (make model installs it)")
}

type panResult struct {
	errors int
	states string
	out    string // pan's output
	trail  string // spin -t's replay of the trail, when there is one
}

var (
	errorsRE = regexp.MustCompile(`errors: (\d+)`)
	statesRE = regexp.MustCompile(`(?m)^\s*(\S+) states, stored`)
)

// runSpin verifies claim.pml with defines (safety: assertions), breadth
// first so that a trail is the shortest one, and replays the trail if
// pan wrote one.
func runSpin(t *testing.T, defines ...string) panResult {
	t.Helper()
	dir := t.TempDir()
	model, err := filepath.Abs("claim.pml")
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil && name != "./pan" {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	run("spin", append(append([]string{"-a"}, defines...), model)...)
	run("cc", "-O2", "-w", "-DSAFETY", "-DBFS", "-DCOLLAPSE", "-DMEMLIM=512", "-o", "pan", "pan.c")
	r := panResult{out: run("./pan", "-m3000000")}
	m := errorsRE.FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("pan gave no error count:\n%s", r.out)
	}
	r.errors, _ = strconv.Atoi(m[1])
	if m := statesRE.FindStringSubmatch(r.out); m != nil {
		r.states = m[1]
	}
	if strings.Contains(r.out, "Search not completed") && r.errors == 0 {
		t.Fatalf("the search was not completed:\n%s", r.out)
	}
	if _, err := os.Stat(filepath.Join(dir, "claim.pml.trail")); err == nil {
		r.trail = run("spin", append(append([]string{"-t", "-k", "claim.pml.trail"}, defines...), model)...)
	}
	return r
}

// A configuration small enough for go test: two replicas, a duplicate,
// the app slow past app.timeout, the lease and app.max_request_time,
// no crash and no store error.
var small = []string{"-DCRASHES=0", "-DERRS=0", "-DAPPFAILS=0"}

// Releasing the claim at app.timeout, as the code did until this month,
// lets a second request for the key reach the app while the first still
// runs; keeping it (the code now) does not, in the same configuration.
func TestModelReleaseOnTimeoutIsBroken(t *testing.T) {
	spinAvailable(t)
	t.Parallel()
	broken := runSpin(t, append([]string{"-DBROKEN_RELEASE_ON_TIMEOUT"}, small...)...)
	if broken.errors == 0 {
		t.Fatalf("the broken variant (release on timeout) passed the check; pan:\n%s", broken.out)
	}
	for _, want := range []string{"T_TIMEOUT", "decides A_RELEASE", "text of failed assertion: assert(((s_why[i]!=0)||(unclaimed[r]!=0)))"} {
		if !strings.Contains(broken.trail, want) {
			t.Errorf("the counterexample lacks %q:\n%s", want, broken.trail)
		}
	}
	code := runSpin(t, small...)
	if code.errors != 0 {
		t.Fatalf("the protocol as the code implements it violates a property; trail:\n%s", code.trail)
	}
	t.Logf("broken: counterexample after %s states; as implemented: %s states, no violation", broken.states, code.states)
}

// Marking the key done before forwarding it acks a message the app
// never acted on.
func TestModelCommitFirstIsBroken(t *testing.T) {
	spinAvailable(t)
	t.Parallel()
	broken := runSpin(t, append([]string{"-DBROKEN_COMMIT_FIRST"}, small...)...)
	if broken.errors == 0 {
		t.Fatalf("the broken variant (commit first) passed the check; pan:\n%s", broken.out)
	}
	if !strings.Contains(broken.trail, "text of failed assertion: assert(recorded)") {
		t.Errorf("the counterexample is not a message acked without its effect:\n%s", broken.trail)
	}
}

// A crash after the app acted and before the commit makes a naive app
// act twice, and the model names the crash as the cause.
func TestModelNamesWhyANaiveAppActsTwice(t *testing.T) {
	spinAvailable(t)
	t.Parallel()
	r := runSpin(t, "-DNAIVE_ONCE", "-DERRS=0", "-DHANGS=0", "-DAPPFAILS=0")
	if r.errors == 0 {
		t.Fatalf("no double effect found with a crash in the model; pan:\n%s", r.out)
	}
	if !strings.Contains(r.trail, "naive app acted twice; causes 1\n") || !strings.Contains(r.trail, "T_CRASH") {
		t.Errorf("the trail does not name the crash (causes 1):\n%s", r.trail)
	}
}
