# syntax=docker/dockerfile:1
# The toolmesh image: one static binary (every target, the shipped MCP servers, the client
# commands) plus toolmesh-healthcheck, on a distroless base with no shell, as a non-root user.
#
#   docker build -t toolmesh:local .
#   docker run --rm -p 7700:7700 toolmesh:local        # `toolmesh up`: the whole mesh, demo servers
#   docker compose up                                  # the mesh as separate services: compose.yaml
#
# Base image tags are pinned in deploy/README.md ("Pinned versions").

ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Never fetch another toolchain: the image's Go must satisfy go.mod's go line.
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-trimpath
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags="-s -w" -o /out/toolmesh ./cmd/toolmesh && \
    go build -ldflags="-s -w" -o /out/toolmesh-healthcheck ./deploy/healthcheck
# The models folder `toolmesh model pull` writes to (compose's model-init), the one
# `toolmesh tls init` writes to (deploy/compose.mtls.yaml's tls-init), and the executor's pin
# file's (compose's pins volume): owned by the runtime user, so a new volume mounted there
# starts with that owner (the image has no shell to chown).
RUN mkdir -p /out/models /out/tls /out/pins

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/toolmesh /out/toolmesh-healthcheck /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/models /models
COPY --from=build --chown=65532:65532 /out/tls /tls
COPY --from=build --chown=65532:65532 /out/pins /var/lib/toolmesh
# distroless's nonroot user (65532); every port toolmesh uses is above 1024.
USER 65532:65532
# REST, api gRPC, retriever, inference, executor, calculator MCP, converter MCP.
EXPOSE 7700 7701 7702 7703 7704 7801 7802
ENTRYPOINT ["/usr/local/bin/toolmesh"]
# `up` listens on loopback by default; in a container the api must listen on every interface.
CMD ["up", "--api.http-addr=0.0.0.0:7700", "--api.grpc-addr=0.0.0.0:7701"]
# For the default command; compose.yaml gives each service its own check.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["/usr/local/bin/toolmesh-healthcheck", "http", "http://127.0.0.1:7700/readyz"]
