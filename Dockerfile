# dedupe-proxy image: a static binary on distroless, running as nonroot (65532).
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) --build-arg REVISION=$(git rev-parse HEAD) -t dedupe-proxy .
#   docker build --target demoapp -t dedupe-proxy-demoapp .    # the demo app (docker-compose.yml)
#
# The binary is built by `make build`, the same command as on a laptop and in
# CI, so the image and `bin/dedupe-proxy` cannot drift apart.

ARG GO_VERSION=1.26

# --- build: module download first, so a source change does not refetch them.
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=
RUN make build VERSION=$VERSION REVISION=$REVISION

# --- demoapp: the small HTTP app of the local trial, not the product. BuildKit
# (Docker's default builder) builds it only when `--target demoapp` asks.
FROM build AS demoapp-build
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o bin/demoapp ./tools/demoapp

FROM gcr.io/distroless/static-debian12:nonroot AS demoapp
COPY --from=demoapp-build /src/bin/demoapp /usr/local/bin/demoapp
EXPOSE 8080
ENTRYPOINT ["demoapp"]
CMD ["--listen", ":8080"]

# --- the proxy: the last stage, so a plain `docker build` produces it.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="dedupe-proxy" \
      org.opencontainers.image.description="Sidecar that makes a message consumer process each message once" \
      org.opencontainers.image.source="https://github.com/dedupe-proxy/dedupe-proxy" \
      org.opencontainers.image.version="$VERSION"
COPY --from=build /src/bin/dedupe-proxy /usr/local/bin/dedupe-proxy
USER 65532:65532
# Admin listener: /healthz, /readyz, /metrics (set admin.listen to 0.0.0.0:9090
# in the config to reach it from outside the container).
EXPOSE 9090
ENTRYPOINT ["dedupe-proxy"]
CMD ["run", "--config", "/etc/dedupe-proxy/config.yaml"]
