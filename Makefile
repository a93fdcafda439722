# dedupe-proxy — run `make help` for the targets.
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/dedupe-proxy/dedupe-proxy/internal/daemon.Version=$(VERSION)
BIN := bin/dedupe-proxy
# The whole suite against the local RabbitMQ and Redis; the README's test command.
TEST_FLAGS ?= -race -count=1 -timeout 30m

.PHONY: help build test demo check vet fmt-check clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

build: ## Build bin/dedupe-proxy (static, with version info)
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/dedupe-proxy

test: ## Run every test against the local RabbitMQ and Redis (what CI runs)
	go test $(TEST_FLAGS) ./...

demo: build ## End-to-end demo: 1,000 envelopes, 30% duplicates, through the real broker and Redis
	go run ./cmd/demo --proxy $(BIN)

vet: ## go vet
	go vet ./...

fmt-check: ## Fail if gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

check: fmt-check vet test ## gofmt, vet and the tests; then the tree must still be clean
	@git diff --exit-code --stat || (echo "the build changed tracked files"; exit 1)

clean: ## Remove build output
	rm -rf bin
