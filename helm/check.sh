#!/usr/bin/env bash
# Chart checks (make chart-check; part of make check and so of CI):
#   1. helm from the Go module proxy, built once and kept in $(go env GOPATH)/bin;
#   2. helm lint --strict and helm template: chart defaults and every ci/*-values.yaml;
#   3. the Go test in helm/charttest: every manifest strictly decoded into the
#      Kubernetes API types, the chart's wiring, the schema, refused values;
#      `dedupe-proxy inject` (bin/ from make build): its golden manifests
#      decoded strictly, its sidecar equal to the chart's, and inject as the
#      post-renderer of helm template on a sample chart;
#   4. `dedupe-proxy validate` on the config.yaml and the proxy environment
#      of every render, and on deploy/compose/config.yaml.
# Downloads nothing but Go modules.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
log() { printf '[chart-check] %s\n' "$*"; }

export PATH=/usr/local/go/bin:$PATH
gobin=$(go env GOBIN)
[[ -n $gobin ]] || gobin=$(go env GOPATH)/bin
export PATH=$gobin:$PATH

# helm/helm.sh finds helm, or installs it (make release uses it too).
HELM=$(bash helm/helm.sh)
export HELM

chart=helm/dedupe-proxy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# "" stands for the chart's own values.yaml.
values=("" "$chart"/ci/*-values.yaml)
for v in "${values[@]}"; do
  name=$(basename "${v:-defaults}" -values.yaml)
  args=()
  [[ -z $v ]] || args=(-f "$v")
  log "lint + template: ${v:-$chart/values.yaml}"
  "$HELM" lint --strict "${args[@]}" "$chart" >"$work/lint.out" 2>&1 || { cat "$work/lint.out"; exit 1; }
  "$HELM" template ci "$chart" "${args[@]}" >"$work/$name.yaml"
done

log "make build"
make build >/dev/null

log "go test (helm/charttest: strict decode into the Kubernetes API types, inject)"
(cd helm/charttest && DEDUPE_PROXY_BIN=$PWD/../../bin/dedupe-proxy go test -count=1 ./...)

log "dedupe-proxy validate on what each render gives the proxy"
(cd helm/charttest && go build -o "$work/chartconfig" ./cmd/chartconfig)
# validate LABEL CONFIG ENVFILE: the proxy sees only the listed variables.
validate() {
  local envs=()
  [[ ! -s $3 ]] || mapfile -t envs <"$3"
  printf '  %-20s env: %s\n' "$1" "$(cut -d= -f1 "$3" | paste -sd' ' -)"
  env -i "${envs[@]}" bin/dedupe-proxy validate --config "$2" | sed "s|^$work/||; s|^|    |"
}
for v in "${values[@]}"; do
  name=$(basename "${v:-defaults}" -values.yaml)
  "$work/chartconfig" -out "$work/$name" <"$work/$name.yaml"
  validate "$name" "$work/$name/config.yaml" "$work/$name/env"
done
printf 'DEDUPE_PROXY_SOURCES_0_RABBITMQ_URL=amqp://dedupe:dedupe@rabbitmq:5672/\n' >"$work/compose.env"
validate compose deploy/compose/config.yaml "$work/compose.env"

log "ok in $((SECONDS - start))s"
