#!/usr/bin/env bash
# Prints the path of helm $HELM_VERSION, installing it first with go
# install into $(go env GOPATH)/bin when it is not there: make chart-check
# and make release use it, and the test of docs/first-afternoon.md finds
# it there. Logs go to stderr; downloads nothing but Go modules.
set -euo pipefail
log() { printf '[helm] %s\n' "$*" >&2; }

export PATH=/usr/local/go/bin:$PATH
gobin=$(go env GOBIN)
[[ -n $gobin ]] || gobin=$(go env GOPATH)/bin

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
      "$pkg/cmd/helm@$HELM_VERSION" >&2
  fi
fi
[[ $(helm_version "$HELM") == "$HELM_VERSION" ]] || { log "helm $HELM_VERSION not available"; exit 1; }
log "helm $HELM_VERSION: $HELM"
echo "$HELM"
