# exgate — make targets. `make test` is the one test command (README, CI).
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 1s

.PHONY: all build install image test test-deps lint fmt-check vet deadcode bench bench-go fuzz run clean

## VERSION and REVISION name a build (`exgate -version`, exgate_build_info,
## the console), read from git: the tag on HEAD, else the Go
## pseudo-version of HEAD (v0.0.0-<UTC commit time>-<12 digits>), with
## +dirty for uncommitted changes; and HEAD's commit. They are linked in
## (-X), so they hold where the Go toolchain records nothing: in a git
## worktree, with GOFLAGS=-buildvcs=false, in a Docker build without .git.
VERSION  ?= $(shell git describe --tags --exact-match 2>/dev/null || TZ=UTC git log -1 --abbrev=12 --date=format-local:%Y%m%d%H%M%S --format=v0.0.0-%cd-%h 2>/dev/null)$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo +dirty)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X main.version=$(VERSION) -X main.revision=$(REVISION)
PREFIX   ?= /usr/local

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/exgate ./cmd/exgate
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/exchange-sim ./cmd/exchange-sim

## install: both binaries into $(PREFIX)/bin (/usr/local/bin by default).
install:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(DESTDIR)$(PREFIX)/bin/ ./cmd/exgate ./cmd/exchange-sim

## image: the container image (deploy/Dockerfile), named by VERSION.
image:
	docker build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
	  -t exgate:$(VERSION:+dirty=-dirty) -t exgate:latest .

## test: install what the tests need (Debian packages when missing), then
## gofmt check, go vet, deadcode and the race-enabled test suite. No test
## asserts a duration, a rate or a percentile (speed is judged by `make
## bench`), so every package, the fault suite included, runs in one `go test`.
test: test-deps fmt-check vet deadcode
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

test-deps:
	@./.ci/test-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

## deadcode: no function unreachable from a main or a test (the tool's
## version is go.mod's `tool` line: fetched through the module proxy like
## any dependency).
deadcode:
	@out=$$($(GO) tool deadcode -test $(PKGS)) || exit 1; \
	if [ -n "$$out" ]; then echo "unreachable code (deadcode -test):"; echo "$$out"; exit 1; fi

## lint: formatting and vet, plus staticcheck when it is installed.
lint: fmt-check vet
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck $(PKGS); \
	else echo "staticcheck not installed (go install honnef.co/go/tools/cmd/staticcheck@latest); skipped"; fi

## bench: the comparison benchmark against NGINX, Caddy and the floor
## proxies, over plain HTTP and TLS, at a fixed rate, the overload surge, and
## exgate and Caddy (least_conn) in front of three instances, one slower
## (bench/run.sh): installs nginx, caddy, wrk and redis-server when missing,
## runs everything on loopback, writes bench/results/latest.{md,json,png}.
## About 23 minutes; BENCH_QUICK=1 for a two-minute smoke run (see
## bench/run.sh for settings).
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
	$(GO) test ./clientip -run='^$$' -fuzz=FuzzClientAddr -fuzztime=$(FUZZTIME)
	$(GO) test ./config -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME)
	$(GO) test ./identity -run='^$$' -fuzz=FuzzCanonicalBase64URL -fuzztime=$(FUZZTIME)
	$(GO) test ./proxy -run='^$$' -fuzz=FuzzTokenPath -fuzztime=$(FUZZTIME)
	$(GO) test ./traceheader -run='^$$' -fuzz=FuzzTraceFormats -fuzztime=$(FUZZTIME)
	$(GO) test ./limiter -run='^$$' -fuzz=FuzzLegacyRateLimit -fuzztime=$(FUZZTIME)
	$(GO) test ./validate -run='^$$' -fuzz='^FuzzCheck$$' -fuzztime=$(FUZZTIME)
	$(GO) test ./validate -run='^$$' -fuzz=FuzzCheckBulk -fuzztime=$(FUZZTIME)
	$(GO) test ./validate -run='^$$' -fuzz=FuzzCheckIDList -fuzztime=$(FUZZTIME)
	$(GO) test ./validate -run='^$$' -fuzz=FuzzContentType -fuzztime=$(FUZZTIME)

## run: the gateway in dev mode (embedded reference backend, in-memory limits).
run:
	$(GO) run ./cmd/exgate -dev

clean:
	rm -rf bin
