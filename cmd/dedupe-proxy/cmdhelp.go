package main

import (
	"fmt"
	"io"
	"strings"
)

// commandHelp explains each command; `help CMD` and `CMD --help` print it.
var commandHelp = map[string]string{
	"run": `Usage: dedupe-proxy run --config FILE

Run the proxy until SIGTERM or SIGINT: consume every source the config
lists, claim each message's key in the seen-set, forward first-time
messages to the app and ack the broker only after the app answered 2xx.
Duplicates are acked without reaching the app. On SIGTERM it stops
consuming, lets forwards in progress finish for shutdown_timeout, and
gives back (requeues) whatever is left.

It serves /healthz, /readyz and /metrics on admin.listen. Logs go to
stderr (log.format json or text). Exit status 0 after a clean stop, 1 on
an invalid config or a source that failed for good.

Flags:
  --config FILE   the config file (default $DEDUPE_PROXY_CONFIG)

Every setting can be overridden by DEDUPE_PROXY_<PATH>, e.g.
DEDUPE_PROXY_APP_URL. Check a config first with validate, config print
and doctor.
`,
	"validate": `Usage: dedupe-proxy validate --config FILE

Load the config file and the DEDUPE_PROXY_* variables, check every field
and print warnings. Exit 1 listing every problem, each with its field path
(and the variable, when one set it). Connects to nothing: see doctor.
`,
	"config": `Usage: dedupe-proxy config print --config FILE

Print the effective configuration as YAML — every default filled in, the
file and the DEDUPE_PROXY_* variables applied — each value followed by
where it came from: "# default", "# file" or "# env DEDUPE_PROXY_…".
Passwords, the admin token and SASL passwords print as <redacted>, and
URLs lose their password; webhook secrets are printed as the references
the file holds (env:NAME, file:PATH), never their values. Exit 1 on an
invalid config.
`,
	"doctor": `Usage: dedupe-proxy doctor --config FILE

Connect to everything the config names and print one line per check:
Redis (reachable, version, maxmemory-policy, persistence), each RabbitMQ
queue (exists, consumers, its dead-letter target), each Kafka topic and
consumer group, each webhook listener's address and the admin address
(free to listen on), and the app's health URL (or, without one, that its
address accepts connections). A warning does not fail; exit 1 when any
check failed. Run it where the proxy will run, with the same config and
variables, before the proxy starts: a running proxy holds the listener
addresses.
`,
	"keys": `Usage: dedupe-proxy keys status|forget KEY --config FILE [--space NAME]

status shows a message key's state in the seen-set (absent, inflight or
done) and its TTL. forget removes it, so the message's next delivery is
forwarded again (a replay). --space is the source's key_space, by
default its name; it is needed when the config has several.
`,
	"inject": `Usage: dedupe-proxy inject [-f FILE|-] [--image IMAGE] [-q]

Read Kubernetes manifests (one or many YAML documents; stdin by default)
and write them back with the dedupe-proxy sidecar added to every Pod,
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob whose pod
template is annotated dedupe-proxy.io/inject: "true". Further
annotations name the config ConfigMap (dedupe-proxy.io/config; without
it dedupe-proxy, the chart's mode shared ConfigMap of release
dedupe-proxy), credentials Secrets, the image and a native sidecar. Every
other document is written back unchanged, and injecting twice gives the
same output. On an error (a bad annotation, or a field such as
containers in a shape inject cannot edit) nothing is written to stdout
and the exit status is 1.

  kubectl apply -f <(dedupe-proxy inject -f app.yaml)
  helm install app ./chart --post-renderer dedupe-proxy --post-renderer-args inject

Flags:
  -f FILE         the manifests (- or absent: stdin)
  --image IMAGE   the proxy image where no annotation names one
  -q              do not list the injected workloads on stderr
`,
	"version": `Usage: dedupe-proxy version

Print the version and the Go version it was built with.
`,
}

// help prints the overview, or one command's help.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	text, ok := commandHelp[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "help: unknown command %q (one of %s)\n", args[0], strings.Join(commandNames(), ", "))
		return 2
	}
	fmt.Fprint(stdout, text)
	return 0
}

func commandNames() []string {
	return []string{"run", "validate", "config", "doctor", "keys", "version"}
}
