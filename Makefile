# Every target works on a fresh clone; `make test` is the one command CI runs.
.PHONY: generate lint check-generated test build docs

build:
	go build -o bin/toolmesh ./cmd/toolmesh

# generate regenerates gen/ and the OpenAPI document from proto/.
generate:
	go tool buf generate

lint:
	go tool buf lint
	go vet ./...

test:
	./scripts/test

# docs regenerates docs/operations/config.md from the flags (a test fails while it is stale).
docs:
	go test ./internal/app -run '^TestConfigReference$$' -count=1 -update
