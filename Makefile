# Every target works on a fresh clone; `make test` is the one command CI runs.
.PHONY: generate lint test test-quick build docs chart

build:
	go build -o bin/toolmesh ./cmd/toolmesh

# generate regenerates gen/ and the OpenAPI document from proto/.
generate:
	./scripts/buf generate

lint:
	./scripts/buf lint
	go vet ./...

test:
	./scripts/test

# test-quick is a first pass in a few minutes: it installs nothing, runs go vet and go test -short
# without the race detector, and ends by listing what it skipped and why. `make test` is what CI runs.
test-quick:
	TOOLMESH_TEST_QUICK=1 ./scripts/test

# docs regenerates docs/operations/config.md from the flags, and the Helm chart's values
# reference (docs/operations/kubernetes.md) and rendered configs (deploy/helm/chartcheck/
# testdata/served) from the chart (a test fails while any of them is stale).
docs:
	go test ./cmd/toolmesh/app -run '^TestConfigReference$$' -count=1 -update
	cd deploy/helm/chartcheck && GOWORK=off go test -mod=readonly -run '^(TestValuesReference|TestServedConfig)$$' -count=1 . -update

# chart packages the Helm chart into bin/toolmesh-VERSION.tgz, with Qdrant's chart (its
# optional dependency) fetched from Qdrant's chart repository first: it needs that network.
# Helm is a Go tool of deploy/helm/chartcheck (no helm binary to install; the first build takes
# a few minutes).
chart:
	mkdir -p bin
	cd deploy/helm/chartcheck && GOWORK=off go tool helm package --dependency-update --destination ../../../bin ../toolmesh || \
	  { echo "make chart: failed; fetching Qdrant's chart needs https://qdrant.github.io/qdrant-helm (see docs/operations/kubernetes.md)" >&2; exit 1; }

# bench regenerates bench/RESULTS.md: every benchmark of the issues, one after another, each side
# by side with its baseline (about 15-20 minutes: run it on a quiet machine). Chromium (console
# figures), Jaeger (tracing, as issue 6 measured it) and llama-server (the BFCL cases decoded
# live, 4-7 minutes of it) come from scripts/backends, cached after the first time (Jaeger's
# first build takes 5-7 minutes more: the optimized build, TOOLMESH_JAEGER_BUILD=release, not the
# tests' unoptimized one, since Jaeger shares the CPUs with what is measured); without Chromium or llama-server their section says why
# it is skipped (TOOLMESH_{CHROMIUM,LLAMA}_REQUIRED=1 makes a failed install fail instead),
# without Jaeger the spans go to an in-process sink and the file says so.
# BENCH_FLAGS=-quick is a smoke run of about a minute, BENCH_FLAGS=-only=loop,load a part.
.PHONY: bench
bench:
	exports=$$(TOOLMESH_JAEGER_BUILD=release ./scripts/backends chromium jaeger llama) && eval "$$exports" && go run ./bench/report -o bench/RESULTS.md $(BENCH_FLAGS)
