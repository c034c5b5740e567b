# exgate — make targets. `make test` is the one test command (README, CI).
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 1s

.PHONY: all build test test-deps lint fmt-check vet bench bench-go fuzz run clean

all: build

build:
	$(GO) build -o bin/exgate ./cmd/exgate
	$(GO) build -o bin/exchange-sim ./cmd/exchange-sim

## test: install what the tests need (Debian packages when missing), then
## gofmt check, go vet and the race-enabled test suite. The packages in
## ALONE (the fault tests: Redis failovers and backend faults under load,
## with timed assertions) run after the others, on their own, so that they
## never share the two cores with cmd/exgate's integration tests; both
## runs report, and either failing fails the target.
ALONE ?= ./fault
test: test-deps fmt-check vet
	@alone=$$($(GO) list $(ALONE)); all=$$($(GO) list $(PKGS)); \
	rest=$$(echo "$$all" | grep -vxF "$$alone" || true); \
	solo=$$(echo "$$all" | grep -xF "$$alone" || true); rc=0; \
	if [ -n "$$rest" ]; then $(GO) test -race -count=1 -timeout 15m $$rest || rc=1; fi; \
	if [ -n "$$solo" ]; then $(GO) test -race -count=1 -timeout 15m $$solo || rc=1; fi; \
	exit $$rc

test-deps:
	@./.ci/test-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

## lint: formatting and vet, plus staticcheck when it is installed.
lint: fmt-check vet
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck $(PKGS); \
	else echo "staticcheck not installed (go install honnef.co/go/tools/cmd/staticcheck@latest); skipped"; fi

## bench: the comparison benchmark against NGINX and Caddy, over plain HTTP
## and TLS (bench/run.sh): installs
## nginx, wrk and redis-server when missing, runs everything on loopback,
## writes bench/results/latest.{md,json,png}. About 10 minutes;
## BENCH_QUICK=1 for a one-minute smoke run (see bench/run.sh for settings).
bench:
	@./bench/run.sh

## bench-go: the Go micro-benchmarks with allocation counts.
bench-go:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) $(PKGS)

## fuzz: run each native fuzz test for a while (FUZZTIME=30s by default).
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./proxy -run='^$$' -fuzz=FuzzCanonicalPath -fuzztime=$(FUZZTIME)
	$(GO) test ./proxy -run='^$$' -fuzz=FuzzGateway -fuzztime=$(FUZZTIME)
	$(GO) test ./proxy -run='^$$' -fuzz=FuzzProxyProtocolHeader -fuzztime=$(FUZZTIME)
	$(GO) test ./proxy -run='^$$' -fuzz=FuzzClientAddr -fuzztime=$(FUZZTIME)
	$(GO) test ./config -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME)
	$(GO) test ./identity -run='^$$' -fuzz=FuzzCanonicalBase64URL -fuzztime=$(FUZZTIME)
	$(GO) test ./proxy -run='^$$' -fuzz=FuzzTokenPath -fuzztime=$(FUZZTIME)
	$(GO) test ./validate -run='^$$' -fuzz='^FuzzCheck$$' -fuzztime=$(FUZZTIME)
	$(GO) test ./validate -run='^$$' -fuzz=FuzzCheckBulk -fuzztime=$(FUZZTIME)
	$(GO) test ./validate -run='^$$' -fuzz=FuzzContentType -fuzztime=$(FUZZTIME)

## run: the gateway in dev mode (embedded reference backend, in-memory limits).
run:
	$(GO) run ./cmd/exgate -dev

clean:
	rm -rf bin
