# sandboxd — every target the README names. Needs only Go, gcc, python3 and
# Node 20/npm; everything else is installed by these targets.
GO      ?= go
BIN     := bin/sandboxd
export SANDBOXD_BIN := $(CURDIR)/$(BIN)

.PHONY: all build install demo test test-go test-python test-node bench fuzz clean

all: build

# The sidecar/CLI binary.
build:
	$(GO) build -trimpath -o $(BIN) ./cmd/sandboxd

# Install the binary as $(DESTDIR)$(PREFIX)/bin/sandboxd (PREFIX=$$HOME/.local
# for a user install; DESTDIR for packaging).
PREFIX  ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/sandboxd

# The main job: build, then real runs through the CLI and the sidecar.
demo: build
	$(BIN) run testdata/wat/well_behaved.wat --invoke add --arg 2 --arg 40
	$(BIN) run testdata/wat/logger.wat --allow-log
	$(GO) run ./clients/go/examples/session

# Every test: Go (engine, sidecar, CLI), the Python client, the Node client.
test: build test-go test-python test-node

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

test-python: build
	cd clients/python && PYTHONPATH=src python3 -m unittest discover -s tests -v

test-node: build
	cd clients/node && npm ci --no-audit --no-fund && npm test

# The benchmark table (see bench/README.md); builds the Node client it measures.
bench: build
	cd clients/node && npm ci --no-audit --no-fund && npm run build
	$(GO) run ./bench

# Each fuzz target for FUZZTIME (default 10m), one after another.
FUZZTIME ?= 10m
fuzz:
	for t in FuzzInstrument; do $(GO) test ./sandbox/internal/wasmbin -run "^$$" -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; done
	for t in FuzzCompile FuzzParseValue; do $(GO) test ./sandbox -run "^$$" -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; done
	for t in $$($(GO) test ./rpc -list "^Fuzz" | grep ^Fuzz); do $(GO) test ./rpc -run "^$$" -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; done

clean:
	rm -rf bin
