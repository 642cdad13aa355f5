# sshapi — the two commands: `make run` (service on embedded defaults) and `make test`.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/sshapi/sshapi/internal/service.Version=$(VERSION)
USER_NAME ?= $(shell id -un)

.PHONY: build run test test-race demo vet fmt clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sshapi ./cmd/sshapi

## run: start the service on its embedded defaults (SQLite + generated secrets in ./sshapi-data)
## and print a dev token with a copy-paste quickstart.
run: build
	./bin/sshapi serve --print-token $(USER_NAME)

## test: every test, against a real OpenSSH sshd on loopback (needs openssh-server; run as root).
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 12m ./...

test-race:
	$(GO) test -count=1 -race -timeout 15m ./...

## demo: throwaway local sshd registered as system "demo", one command through the API.
demo: build
	./bin/sshapi demo --keep

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
