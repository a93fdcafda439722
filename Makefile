# dedupe-proxy — run `make help` for the targets.
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The commit, for `version` and dedupe_proxy_build_info; .goreleaser.yaml
# passes the same two -X flags.
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -s -w -X github.com/dedupe-proxy/dedupe-proxy/internal/daemon.Version=$(VERSION) -X github.com/dedupe-proxy/dedupe-proxy/internal/buildinfo.Revision=$(REVISION)
BIN := bin/dedupe-proxy
# The whole suite against the local RabbitMQ and Redis (make check, the README's test command, runs it).
TEST_FLAGS ?= -race -count=1 -timeout 30m

.PHONY: help build test demo demo-webhook demo-embedded demo-exactly-once check vet fmt-check chaos redis-failover model clean
# The demo's parts: auto uses the local RabbitMQ and Redis when both answer
# and otherwise an in-process Kafka and Redis; EMBEDDED=1 asks for those.
BROKER ?= auto
SEENSET ?= auto
# Extra flags for tools/demo, e.g. DEMO_FLAGS='-amqp amqp://u:p@host:5672/ -redis host:6379'.
DEMO_FLAGS ?=
ifeq ($(EMBEDDED),1)
BROKER := kafka
SEENSET := embedded
endif

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

build: ## Build bin/dedupe-proxy (static, with version info)
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/dedupe-proxy

test: ## Unit and end-to-end tests (race detector) against the local RabbitMQ and Redis
	go test $(TEST_FLAGS) ./...

demo: build ## Demo: 2 proxies, 1,000 envelopes, 30% duplicates; BROKER=rabbitmq|kafka|redis SEENSET=redis|embedded EMBEDDED=1
	go run ./tools/demo --proxy $(BIN) --broker $(BROKER) --seenset $(SEENSET) $(DEMO_FLAGS)

demo-webhook: build ## Demo: signed webhooks (30% redeliveries, some concurrent) → 2 proxies → RabbitMQ → app; needs RabbitMQ
	go run ./tools/demo --proxy $(BIN) --webhook --seenset $(SEENSET) $(DEMO_FLAGS)

demo-embedded: build ## The demo on an in-process Kafka and Redis only, whatever runs locally (part of check)
	go run ./tools/demo --proxy $(BIN) --broker kafka --seenset embedded $(DEMO_FLAGS)

# Extra flags for tools/exactlyonce, e.g. EXACTLY_ONCE_FLAGS='-messages 20000 -keep'.
EXACTLY_ONCE_FLAGS ?=
demo-exactly-once: build ## Go example + PostgreSQL behind 2 proxies under SIGKILLs: rows per key, vs a naive app (~1 min; RabbitMQ, Redis, PostgreSQL)
	go build -o bin/example-orders ./examples/go
	go run ./tools/exactlyonce --proxy $(BIN) --app bin/example-orders $(EXACTLY_ONCE_FLAGS)

vet: ## go vet
	go vet ./...

# The linter, pinned; make lint installs it into bin/tools (not committed)
# the first time, and again when this version changes.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

# --allow-serial-runners: another golangci-lint on the machine (another
# checkout's make check) is waited for instead of failing the run.
.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint with .golangci.yml on the module and helm/charttest (installs the pinned version into bin/tools)
	$(GOLANGCI_LINT) run --allow-serial-runners ./...
	cd helm/charttest && $(CURDIR)/$(GOLANGCI_LINT) run --allow-serial-runners --config $(CURDIR)/.golangci.yml ./...

$(GOLANGCI_LINT):
	GOBIN=$(CURDIR)/bin/tools go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/tools/golangci-lint $@

fmt-check: ## Fail if gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# chart-check runs before test: it builds helm, which the test of
# docs/first-afternoon.md (go test ./docs/) runs too.
check: ## Everything CI runs: gofmt, vet, lint, tests, the claim model, the embedded and exactly-once demos, the chaos and Redis failover suites, the chart checks; the tree must not change
	@before=$$(git status --porcelain); \
	$(MAKE) --no-print-directory fmt-check vet lint chart-check test model demo-embedded demo-exactly-once chaos redis-failover || exit 1; \
	after=$$(git status --porcelain); \
	if [ "$$before" != "$$after" ]; then echo "the build changed the tree:"; git status --short; exit 1; fi

chaos: ## Fault suite on RabbitMQ, Kafka and Redis list and stream: SIGKILLs, Redis restarts, broker cuts; prints lost/double-effect table (~8 min)
	go test -tags chaos -count=1 -timeout 20m -v -run TestChaos ./tools/chaos/

redis-failover: ## Redis Cluster and Sentinel failover under load, with and without wait_replicas; prints a table (~2-3 min)
	go test -tags chaos -count=1 -timeout 15m -v -run TestRedisFailover ./tools/chaos/

# Memory cap (MB) of each model search; MODEL_CHECKS names some of
# model/configs.txt (default: all but those marked extra).
MODEL_MEMLIM ?= 4096
MODEL_CHECKS ?=
model: ## Model-check the claim protocol (model/claim.pml) with spin, exhaustively; installs spin (apt-get) when missing (~2 min)
	MEMLIM=$(MODEL_MEMLIM) bash model/check.sh $(MODEL_CHECKS)

clean: ## Remove build output
	rm -rf bin

# make check runs it first (a rule of its own, so the check recipe stays
# as it is).
check: release-check
.PHONY: release-check
release-check: ## Check .goreleaser.yaml (goreleaser check where installed, and its Go test), go install ...@<commit> from a local module proxy, make install and make release (this platform only)
	@if command -v goreleaser >/dev/null; then goreleaser check; else echo "goreleaser is not installed: .goreleaser.yaml is checked by its Go test only"; fi
	DPTEST_GO_INSTALL=1 DPTEST_RELEASE=1 go test -count=1 -run 'TestReleaseConfig|TestGoInstall|TestMakeRelease|TestMakeInstall|TestReadmeInstallPaths' ./cmd/dedupe-proxy/

.PHONY: chart-check
chart-check: ## Helm chart: lint, render, strict decode into the Kubernetes types, validate its config (helm/check.sh)
	bash helm/check.sh

.PHONY: bench
# Extra flags for tools/bench, e.g. BENCH_FLAGS='-n 100000 -profile bin/profiles'.
BENCH_FLAGS ?=
bench: build ## Benchmark: bare consumer, bare forwarder and the proxy on RabbitMQ, kfake and Redis (list and stream), webhook rows, Kafka slow app, Kafka failover, then instructions per message under callgrind (~12-15 min)
	go build -o bin/bench ./tools/bench
	bin/bench -proxy $(BIN) $(BENCH_FLAGS)

# make dashboard-picture remakes docs/img/dashboard.png. Prometheus is a
# tool here, not a module dependency: installed into bin/tools (not
# committed) like the linter. uPlot comes from npm into
# tools/dashshot/node_modules (ignored), Chromium from apt-get.
PROMETHEUS_VERSION := v0.316.0
PROMETHEUS := bin/tools/prometheus-$(PROMETHEUS_VERSION)
# Extra flags for tools/dashshot, e.g. DASHSHOT_FLAGS='-duration 1m -keep'.
DASHSHOT_FLAGS ?=
.PHONY: dashboard-picture
dashboard-picture: build $(PROMETHEUS) ## Remake docs/img/dashboard.png: the dashboard's queries on a real Prometheus over a 3.5-min run (RabbitMQ, Redis), drawn with uPlot, shot by headless Chromium (~5 min)
	@if ! command -v chromium >/dev/null; then \
	  if [[ $$(id -u) == 0 ]] && command -v apt-get >/dev/null; then \
	    echo "installing chromium with apt-get"; \
	    export DEBIAN_FRONTEND=noninteractive; apt-get update -qq || true; apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is not installed (Debian package chromium)"; exit 1; fi; \
	fi
	@test -f tools/dashshot/node_modules/uplot/dist/uPlot.iife.min.js || npm ci --prefix tools/dashshot --no-audit --no-fund
	go run ./tools/dashshot -proxy $(BIN) -prometheus $(PROMETHEUS) $(DASHSHOT_FLAGS)

$(PROMETHEUS):
	GOBIN=$(CURDIR)/bin/tools go install github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION)
	mv bin/tools/prometheus $@

# make install puts the binary of make build in $(DESTDIR)$(PREFIX)/bin.
PREFIX ?= /usr/local
.PHONY: install
install: build ## Install bin/dedupe-proxy into $(PREFIX)/bin (PREFIX=/usr/local; e.g. PREFIX=$HOME/.local)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/dedupe-proxy

# make release builds, without GoReleaser or Docker, what a release
# offers for download: one archive per platform (named as .goreleaser.yaml
# names them), SHA256SUMS over them, and the chart packaged by helm (which
# helm/helm.sh installs with go install when missing). It publishes
# nothing. The release test (make release-check) runs it for one platform.
DIST ?= dist
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
RELEASE_FILES := LICENSE README.md CHANGELOG.md config.example.yaml
.PHONY: release
release: ## Binaries for linux, darwin × amd64, arm64 as .tar.gz, SHA256SUMS and the packaged chart in dist/ (nothing is published)
	@set -euo pipefail; \
	rm -rf $(DIST); mkdir -p $(DIST); \
	v=$$(echo '$(VERSION)' | sed 's/^v//'); \
	for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; name=dedupe-proxy_$${v}_$${os}_$${arch}; \
	  echo "release: $$name.tar.gz"; \
	  mkdir -p $(DIST)/$$name; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST)/$$name/dedupe-proxy ./cmd/dedupe-proxy; \
	  cp $(RELEASE_FILES) $(DIST)/$$name/; \
	  tar -C $(DIST) -czf $(DIST)/$$name.tar.gz $$name; \
	  rm -r $(DIST)/$$name; \
	done; \
	helm=$$(bash helm/helm.sh); \
	"$$helm" package helm/dedupe-proxy --destination $(DIST) >/dev/null; \
	(cd $(DIST) && sha256sum *.tar.gz *.tgz > SHA256SUMS); \
	echo "release: $(DIST)/SHA256SUMS"; cat $(DIST)/SHA256SUMS
