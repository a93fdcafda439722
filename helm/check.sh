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

# helm v3.22.0 is served by the module proxy but not approved here; v3.21.4
# is. The -X flags are those of helm's own release build: without them a
# `go install`ed helm reports version "v3.21" and renders for Kubernetes
# v1.20 (helm v3.21.4 releases default to v1.36, one past client-go v0.36).
HELM_VERSION=v3.21.4
HELM_K8S_MINOR=36
helm_version() { "$1" version --template '{{.Version}}' 2>/dev/null || true; }
HELM=$gobin/helm
if [[ $(helm_version "$HELM") != "$HELM_VERSION" ]]; then
  if command -v helm >/dev/null && [[ $(helm_version helm) == "$HELM_VERSION" ]]; then
    HELM=$(command -v helm)
  else
    log "installing helm $HELM_VERSION into $gobin with go install (first time: a few minutes)"
    pkg=helm.sh/helm/v3
    go install -ldflags "-s -w -X $pkg/internal/version.version=$HELM_VERSION \
      -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR \
      -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR" \
      "$pkg/cmd/helm@$HELM_VERSION"
  fi
fi
[[ $(helm_version "$HELM") == "$HELM_VERSION" ]] || { log "helm $HELM_VERSION not available"; exit 1; }
export HELM
log "helm $HELM_VERSION: $HELM"

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
