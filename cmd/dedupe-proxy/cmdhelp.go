package main

// overview is `dedupe-proxy help`: every command (a test keeps it so).
const overview = `dedupe-proxy: consume from a broker, skip duplicates, forward the rest to your app.

Usage:
  dedupe-proxy run      --config FILE   run the proxy until SIGTERM/SIGINT
  dedupe-proxy run      --config FILE -- APP [ARG...]
                                        local development: start the app, wait for its
                                        app.health_url, run the proxy; stop both together
  dedupe-proxy validate --config FILE   check a config file; exit 1 listing every error
  dedupe-proxy init --source rabbitmq|kafka|redis|webhook [-o FILE] [--force]
                                        write a minimal valid config (stdout by default)
  dedupe-proxy config print --config FILE
                                        show the effective config, secrets redacted, with
                                        where each value came from (default, file, variable)
  dedupe-proxy config schema            print the config's JSON Schema, for editors
  dedupe-proxy doctor   --config FILE   check Redis, the brokers, the app and the listeners
                                        the config names; exit 1 on any failure
  dedupe-proxy keys status KEY --config FILE [--space NAME]
                                        show a message key: absent, inflight or done, and its TTL
  dedupe-proxy keys forget KEY --config FILE [--space NAME]
                                        forget a key so its next delivery is forwarded again
                                        (--space: the source's key_space, by default its name;
                                        needed when the config has several)
  dedupe-proxy keys list --config FILE [--state inflight|done] [--prefix P] [--limit N]
                                        list a space's keys, paged with SCAN
  dedupe-proxy redrive --config FILE --source NAME [--dry-run] [--forget-keys] [--limit N]
                                        move a source's dead letters back to its queue or topic
                                        once the bug is fixed (keys kept; --forget-keys to
                                        process those that succeeded before again)
  dedupe-proxy webhook send --profile P --secret S --url URL
                                        post one correctly signed test event to a webhook source
  dedupe-proxy inject [-f FILE|DIR|-] [--image IMAGE]
                                        add the sidecar to the Kubernetes workloads of a
                                        manifest stream (stdin by default) whose pod template
                                        is annotated dedupe-proxy.io/inject: "true"
  dedupe-proxy version [-o json]        print the version, Go version and revision
  dedupe-proxy completion bash|zsh|fish print a shell completion script
  dedupe-proxy help COMMAND             explain a command (or: COMMAND --help)

--config defaults to $DEDUPE_PROXY_CONFIG. Every setting can be overridden
by an environment variable DEDUPE_PROXY_<PATH>, e.g. DEDUPE_PROXY_APP_URL.
Exit status: 0 done, 1 failed (invalid config, failed check), 2 a command
line the command cannot take.
`

const runHelp = `
Run the proxy until SIGTERM or SIGINT: consume every source the config
lists, claim each message's key in the seen-set, forward first-time
messages to the app and ack the broker only after the app answered 2xx.
Duplicates are acked without reaching the app. On SIGTERM it stops
consuming, lets forwards in progress finish for shutdown_timeout, and
gives back (requeues) whatever is left.

It serves /healthz, /readyz and /metrics on admin.listen: /readyz
answers 200 while the process serves and lists each dependency;
/readyz?deps=1 answers 503 while a source or Redis is down. Logs go to
stderr (log.format json or text); the first line names every listener.
Exit status 0 after a clean stop, 1 on an invalid config or a source
that failed for good.

With an app command after "--" (local development, like dapr run):

  dedupe-proxy run --config config.yaml -- python3 app.py

it starts the app as its child process, its output passed through,
waits until app.health_url (which must be set) answers 2xx, then runs
the proxy as above. SIGINT and SIGTERM stop the proxy first, so forwards
in progress finish at a live app, then go to the app's process group;
the app is stopped whenever the proxy stops, and killed if it has not
exited within shutdown_timeout. Exit status 1, with a line saying why,
when the app exits first or does not answer within --app-ready-timeout
(default 30s).

Every setting can be overridden by DEDUPE_PROXY_<PATH>, e.g.
DEDUPE_PROXY_APP_URL. Check a config first with validate, config print
and doctor.
`

const validateHelp = `
Load the config file and the DEDUPE_PROXY_* variables, check every field
and print warnings. Exit 1 listing every problem, each with its field path
(and the variable, when one set it); an unknown field or variable names
the nearest known one ("app.ulr: unknown field (did you mean app.url?)").
Connects to nothing: see doctor.
`

const configHelp = `
Print the effective configuration as YAML — every default filled in, the
file and the DEDUPE_PROXY_* variables applied — each value followed by
where it came from: "# default", "# file" or "# env DEDUPE_PROXY_…".
Passwords, the admin token and SASL passwords print as <redacted>, and a
URL's password as xxxxx; webhook secrets are printed as the references
the file holds (env:NAME, file:PATH), never their values. The output is
itself a valid config file. Exit 1 on an invalid config.
`

const doctorHelp = `
Connect to everything the config names and print one line per check:
Redis (reachable, version, maxmemory-policy, persistence), each RabbitMQ
queue (exists, consumers, its dead-letter target), each Kafka topic and
consumer group, each webhook listener's address and the admin address
(free to listen on), and the app's health URL (or, without one, that its
address accepts connections). A warning does not fail; exit 1 when any
check failed. Run it where the proxy will run, with the same config and
variables, before the proxy starts: a running proxy holds the listener
addresses.
`

const keysHelp = `
status shows a message key's state in the seen-set (absent, inflight or
done) and its TTL. forget removes it, so the message's next delivery is
forwarded again (a replay). --space is the source's key_space, by
default its name; it is needed when the config has several. Flags may
come before or after KEY; a key that starts with '-' goes after "--":

  dedupe-proxy keys status --config config.yaml -- -12

list shows a space's keys, one JSON line each, paged through with SCAN
(never KEYS): --state inflight or done, --prefix the start of the message
keys, --limit the most shown (default 100, at most 10000); a listing cut
at the limit says so on stderr.

  dedupe-proxy keys list --config config.yaml --state inflight --prefix ord-

-o table prints aligned columns instead of JSON, the TTL in whole
seconds.
`

const injectHelp = `
Read Kubernetes manifests (one or many YAML documents; stdin by default,
-f a file, or -f a directory's *.yaml, *.yml and *.json files, not its
subdirectories) and write them back with the dedupe-proxy sidecar added to every Pod,
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob whose pod
template is annotated dedupe-proxy.io/inject: "true". Further
annotations name the config ConfigMap (dedupe-proxy.io/config; without
it dedupe-proxy, the chart's mode shared ConfigMap of release
dedupe-proxy), credentials Secrets, the image and a native sidecar. Every
other document is written back unchanged, and injecting twice gives the
same output. On an error (a bad annotation, or a field such as
containers in a shape inject cannot edit) nothing is written to stdout
and the exit status is 1. A sidecar given the default image, which no
registry publishes yet, is warned about in one line on stderr. So is a
workload whose ConfigMap is not in the input when the input holds the
chart's ConfigMap under another name (the line names the annotation to
add); when it holds none, a note (not with -q) says what to install.

  kubectl apply -f <(dedupe-proxy inject -f app.yaml)
  helm install app ./chart --post-renderer dedupe-proxy --post-renderer-args inject
`

const versionHelp = `
Print the version, the Go version it was built with and the source
revision (when the build recorded one). -o json prints them as one JSON
object: {"version": ..., "goversion": ..., "revision": ...}, the labels
of the dedupe_proxy_build_info metric.
`

const completionHelp = `
Print a completion script for bash, zsh or fish: commands, flags, the
completion of --config to YAML files. Load it in the current shell, or
install it for every new one:

  bash:  source <(dedupe-proxy completion bash)
         dedupe-proxy completion bash > /etc/bash_completion.d/dedupe-proxy
  zsh:   dedupe-proxy completion zsh > "${fpath[1]}/_dedupe-proxy"
  fish:  dedupe-proxy completion fish > ~/.config/fish/completions/dedupe-proxy.fish

bash needs the bash-completion package.
`

const helpHelp = `
Without COMMAND, list every command; with one, explain it (as COMMAND
--help does).
`

const schemaHelp = `
Print the JSON Schema (draft-07) of the config file: every setting with
its type, default and description (the comments of config.example.yaml),
the values of each enum setting, durations as Go duration strings (500ms,
30s, 5m), and no unknown key. config.schema.json in the repository is
this output. Point an editor at it with a first line such as

  # yaml-language-server: $schema=config.schema.json

(the YAML extension of VS Code, Neovim and JetBrains IDEs read it). The
schema checks a file's shape; validate checks the rest (ranges, URLs,
settings that go together).
`

const initHelp = `
Write a minimal valid config for one source: the consumer, app.url, the
seen-set's Redis and a source of --source KIND (rabbitmq, kafka, redis or
webhook) named --name, which also names its queue, topic or list. Every
other setting takes its default; config.example.yaml shows them all.
Local addresses are assumed (RabbitMQ guest on 127.0.0.1:5672, Kafka and
Redis on their default ports); edit them before use. A webhook source
verifies standard-webhooks signatures with the secret in $WEBHOOK_SECRET
and forwards each event to the app.

It prints to stdout (or -o -); -o FILE writes FILE and refuses to replace
an existing one unless --force. What it writes passes validate; flags
that would not (--app-url localhost:8080) exit 1 writing nothing.

  dedupe-proxy init --source kafka --consumer billing -o config.yaml
`
