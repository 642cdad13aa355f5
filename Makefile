# sshapi — the two commands: `make run` (service on embedded defaults) and `make test`.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/sshapi/sshapi/internal/service.Version=$(VERSION)
USER_NAME ?= $(shell id -un)

.PHONY: build run test test-race test-python test-x-crypto test-pkg-sftp demo vet fmt clean fuzz fuzz-deps deps screenshots soak

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sshapi ./cmd/sshapi

## run: start the service on its embedded defaults (SQLite + generated secrets in ./sshapi-data)
## and print a dev token with a copy-paste quickstart.
run: build
	./bin/sshapi serve --print-token $(USER_NAME)

## deps: install what the tests need and is missing (openssh-server, postgresql, python3-venv, …;
## Debian packages, as root). make test runs it first; .ci/run runs make test.
deps:
	scripts/install-deps

## test: every test, against a real OpenSSH sshd on loopback (run as root; deps installs what is
## missing), and the API fuzz (make fuzz) first.
test: deps
	$(MAKE) fuzz
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 12m ./...
	$(MAKE) test-x-crypto
	$(MAKE) test-pkg-sftp
	$(MAKE) test-python

## test-x-crypto: the patched golang.org/x/crypto (third_party/README.md) is upstream plus
## third_party/x-crypto.patch, and its SSH and ChaCha20-Poly1305 packages pass their own tests
## (ssh/test replays sessions recorded against OpenSSH).
test-x-crypto:
	third_party/x-crypto.sh check
	$(GO) test -count=1 golang.org/x/crypto/ssh/... golang.org/x/crypto/chacha20 \
		golang.org/x/crypto/chacha20poly1305 golang.org/x/crypto/internal/poly1305

## test-pkg-sftp: the patched github.com/pkg/sftp (third_party/pkg-sftp.md) is upstream plus
## third_party/pkg-sftp.patch, and passes its own tests against OpenSSH's sftp-server and its own
## server, the patch's (read_direct_test.go, readdir_close_test.go) also under the race detector.
test-pkg-sftp:
	third_party/pkg-sftp.sh check
	$(GO) test -count=1 github.com/pkg/sftp/...
	$(GO) test -count=1 github.com/pkg/sftp -integration
	$(GO) test -count=1 github.com/pkg/sftp -integration -testserver
	$(GO) test -count=1 -race -run 'TestReadDirect|TestReadDirClose' github.com/pkg/sftp -integration

## screenshots: the web interface's browser test (Chromium, a real sshd and OIDC provider) writing
## its screenshots into docs/img/ (by default they go to build/ui-screenshots/).
screenshots: deps
	SSHAPI_SCREENSHOTS=$(CURDIR)/docs/img $(GO) test -count=1 -run TestBrowser ./internal/ui

## test-python: the Python SDK's type check (mypy) and tests (pytest against bin/sshapi and a real
## sshd, via `sshapi demo`), in clients/python/.venv with pinned requirements.
PY_DIR  := clients/python
PY_VENV := $(PY_DIR)/.venv
test-python: build $(PY_VENV)/.deps-installed
	cd $(PY_DIR) && .venv/bin/mypy
	cd $(PY_DIR) && SSHAPI_BIN=$(CURDIR)/bin/sshapi .venv/bin/pytest -q -p no:cacheprovider

$(PY_VENV)/.deps-installed: $(PY_DIR)/requirements-dev.txt
	python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q -r $(PY_DIR)/requirements-dev.txt
	touch $@

test-race:
	$(GO) test -count=1 -race -timeout 15m ./...

## demo: throwaway local sshd registered as system "demo", one command through the API.
demo: build
	./bin/sshapi demo --keep

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin build

## fuzz: Schemathesis (pinned in scripts/fuzz/requirements.txt, venv in build/fuzz-venv) against a
## live service with a throwaway sshd; fails on any server error or response the OpenAPI document
## does not describe. Reports in build/fuzz/. Knobs: FUZZ_MAX_EXAMPLES, FUZZ_TIMEOUT (scripts/fuzz/run).
FUZZ_VENV ?= build/fuzz-venv
fuzz: build fuzz-deps
	FUZZ_VENV=$(FUZZ_VENV) scripts/fuzz/run

## fuzz-deps: the fuzz venv.
fuzz-deps: $(FUZZ_VENV)/.deps-installed

$(FUZZ_VENV)/.deps-installed: scripts/fuzz/requirements.txt
	python3 -m venv $(FUZZ_VENV)
	$(FUZZ_VENV)/bin/pip install -q -r scripts/fuzz/requirements.txt
	touch $@

## Benchmarks (see docs/benchmarks.md and README "Bench").
BENCH_VENV  ?= bench/.venv
PAPER_FLAGS ?=
.PHONY: bench-deps bench-locust-deps paper

## bench-deps: the Python peers' pinned requirements (asyncssh, paramiko) in bench/.venv.
bench-deps: $(BENCH_VENV)/.deps-installed

$(BENCH_VENV)/.deps-installed: bench/requirements.txt
	python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q -r bench/requirements.txt
	touch $@

## bench-locust-deps: Locust in bench/.venv for bench/locustfile.py.
bench-locust-deps: bench-deps
	$(BENCH_VENV)/bin/pip install -q -r bench/requirements-locust.txt

## paper: throwaway stock sshd + sshapi, the study's sweep beside the peers, file transfers, API
## downloads/uploads per channel count, uploads/downloads per SSH cipher beside sftp -c (with CPU
## per GiB), 100,000 files of 4 KiB system to system beside a tar pipe and scp -3 -r, listing
## 10,000 entries, and the checksum of an 8-byte file, uptime and a 10-entry ls at 50 clients beside the asyncssh
## pool; writes docs/benchmarks.md, docs/benchmarks.json and docs/img/ (root; on 2 cores about
## 14 minutes, and about 16 more for the per-cipher, small-files and small-request sections). Longer windows: make paper PAPER_FLAGS='--duration 30s'; 1 GiB transfers:
## PAPER_FLAGS='--transfer-size 1GiB --cipher-size 1GiB'. Skip or size a section:
## --transfer-size none, --channels none, --cipher-size none (or --ciphers LIST), --small-files -1
## (or a count), --list-entries -1, --clients -1 (or a count; --clients-duration 10s,
## --clients-peers asyncssh).
paper: build bench-deps
	./bin/sshapi bench paper --out docs $(PAPER_FLAGS)

## soak: `sshapi bench soak`: two sshapi processes behind HAProxy on a throwaway PostgreSQL
## primary with a streaming replica, mixed load while every fault is injected in turn (sshd
## restart, SIGKILL, failover to the replica, network black hole, SIGTERM, full filesystem,
## PostgreSQL restart, trickling network); fails if anything acknowledged was lost. Writes
## build/soak/ (soak.json, soak.md, PNG plots, logs). Root. SOAK_DURATION (10m), SOAK_RATE (10
## req/s), SOAK_EVERY (30s quiet before each fault); SOAK_FLAGS adds or overrides flags. The run
## in README "Operations": SOAK_DURATION=35m SOAK_RATE=32 SOAK_EVERY=60s.
SOAK_DURATION ?= 10m
SOAK_RATE     ?= 10
SOAK_EVERY    ?= 30s
soak: build deps
	mkdir -p build/soak
	./bin/sshapi bench soak --duration $(SOAK_DURATION) --rate $(SOAK_RATE) --instances 2 --fault-every $(SOAK_EVERY) \
	    --json build/soak/soak.json --markdown build/soak/soak.md --plots build/soak --logs build/soak $(SOAK_FLAGS)
