# sandboxd — every target the README names. Needs only Go, gcc, python3 and
# Node 20/npm; everything else is installed by these targets.
GO      ?= go
BIN     := bin/sandboxd
export SANDBOXD_BIN := $(CURDIR)/$(BIN)

.PHONY: all build binary node-package install demo test test-go test-fuzz test-python test-node test-runtimes bench fuzz clean wasi-guests plugins runtimes

all: build

# The sidecar/CLI binary, linked statically where the C toolchain can
# (glibc's libc.a, in Debian's libc6-dev): a start of the binary then
# skips the dynamic loader, about 0.4 ms of each of the two process starts
# a cold start waits for (the sidecar and its compile child; see
# docs/performance.md). Where it cannot, the usual dynamic binary.
STATIC_LDFLAGS := -linkmode external -extldflags "-static -Wl,--no-warnings"
binary:
	$(GO) build -trimpath -ldflags='$(STATIC_LDFLAGS)' -o $(BIN) ./cmd/sandboxd 2>/dev/null || \
		$(GO) build -trimpath -o $(BIN) ./cmd/sandboxd

# Everything the checkout's clients install from: the binary (which the
# Python wheel and the npm package carry, see clients/*/README.md), the
# interpreter runtimes compiled for it (runtimes, below) and the
# Node client ready to be installed from clients/node without an install
# script: its dependencies and dist/, each remade only when what it is made
# from changed.
build: binary node-package runtimes

NODE_CLIENT := clients/node
node-package: $(NODE_CLIENT)/dist/index.js
$(NODE_CLIENT)/node_modules/.package-lock.json: $(NODE_CLIENT)/package-lock.json $(NODE_CLIENT)/package.json
	cd $(NODE_CLIENT) && npm ci --no-audit --no-fund
$(NODE_CLIENT)/dist/index.js: $(NODE_CLIENT)/node_modules/.package-lock.json $(NODE_CLIENT)/tsconfig.json $(wildcard $(NODE_CLIENT)/src/*.ts)
	cd $(NODE_CLIENT) && node node_modules/typescript/bin/tsc -p tsconfig.json

# Install the binary as $(DESTDIR)$(PREFIX)/bin/sandboxd (PREFIX=$$HOME/.local
# for a user install; DESTDIR for packaging), the runtimes compiled for it in
# $(PREFIX)/lib/sandboxd/runtimes (where it looks), with its man page and its
# bash, zsh and fish completions, which the binary makes from its own flags.
PREFIX  ?= /usr/local
SHARE   := $(DESTDIR)$(PREFIX)/share
install: binary runtimes
	install -d $(DESTDIR)$(PREFIX)/lib/sandboxd/runtimes
	cp -R bin/runtimes/. $(DESTDIR)$(PREFIX)/lib/sandboxd/runtimes/
	# readable by every user, writable by the installer alone: the sidecar
	# loads only runtimes no other user can change (docs/snippets.md)
	chmod -R u+rwX,go+rX,go-w $(DESTDIR)$(PREFIX)/lib/sandboxd/runtimes
	install -d $(DESTDIR)$(PREFIX)/bin $(SHARE)/man/man1 $(SHARE)/bash-completion/completions \
		$(SHARE)/zsh/site-functions $(SHARE)/fish/vendor_completions.d
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/sandboxd
	$(BIN) man > $(SHARE)/man/man1/sandboxd.1
	$(BIN) completion bash > $(SHARE)/bash-completion/completions/sandboxd
	$(BIN) completion zsh > $(SHARE)/zsh/site-functions/_sandboxd
	$(BIN) completion fish > $(SHARE)/fish/vendor_completions.d/sandboxd.fish
	chmod 0644 $(SHARE)/man/man1/sandboxd.1 $(SHARE)/bash-completion/completions/sandboxd \
		$(SHARE)/zsh/site-functions/_sandboxd $(SHARE)/fish/vendor_completions.d/sandboxd.fish

# The main job: build, then real runs through the CLI and the sidecar.
demo: build
	$(BIN) run testdata/wat/well_behaved.wat --invoke add --arg 2 --arg 40
	$(BIN) run testdata/wat/logger.wat --allow-log
	SANDBOXD_BIN=$(BIN) $(GO) run ./clients/go/examples/session

# Every test: Go (engine, sidecar, CLI), every fuzz target briefly, the
# Python client, the Node client, the interpreter runtimes.
test: build test-go test-fuzz test-python test-node test-runtimes

# Then the protocol layer and the Go client once more without cgo (they
# must not link wasmtime), and under the race detector, where the sidecar's
# concurrency lives and the tests are quick.
PURE_GO := ./protocol/... ./internal/framing/... ./internal/jsonscan/... ./internal/rpctest/... ./internal/mcpserver/... ./rpc/... ./clients/go/...

# -timeout is a hang bound per package: on a loaded machine cmd/sandboxd
# came near go test's 10-minute default (it takes 2-3 minutes unloaded).
# staticcheck at a pinned version, fetched through the module proxy.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
test-go:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) mod tidy -diff # go.mod and go.sum list what the code imports, no more
	$(GO) test -count=1 -timeout 30m ./...
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 30m $(PURE_GO)
	$(GO) test -count=1 -timeout 30m -race $(PURE_GO) ./limits/...

# The runtimes module (runtimes/, nested, so ./... above does not reach
# it): its sessions, and the conformance corpus against its golden files.
test-runtimes:
	cd runtimes && $(GO) vet ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./... && $(GO) test -count=1 ./...

test-python: build
	cd clients/python && PYTHONPATH=src python3 -m unittest discover -s tests -v

test-node: build
	cd clients/node && npm test

# The benchmark table (see bench/README.md); builds the Node client it measures.
bench: build
	cd clients/node && npm ci --no-audit --no-fund && npm run build
	$(GO) run ./bench

# Every fuzz target of the module for FUZZTIME (default 10m), one after
# another; .ci/fuzz finds them, and names each failure and its input (now a
# seed under the package's testdata/fuzz). test-fuzz gives each FUZZBRIEF
# (default 2s), so that make test sees a target failing on new inputs.
FUZZTIME ?= 10m
FUZZBRIEF ?= 2s
fuzz:
	GO=$(GO) .ci/fuzz $(FUZZTIME)

test-fuzz:
	GO=$(GO) .ci/fuzz $(FUZZBRIEF)

# The WASI test guests of testdata/wasi, rebuilt from the sources beside
# them. Not part of make test, which uses the committed .wasm files. Needs
# Debian's clang, lld, wasi-libc, libclang-rt-14-dev-wasm32 and
# libstd-rust-dev-wasm32 (apt-get install them), and Go.
RUSTC ?= /usr/bin/rustc
WASI_GUESTS := testdata/wasi
wasi-guests:
	clang --target=wasm32-wasi -O2 -Wl,--strip-all -o $(WASI_GUESTS)/guest_c.wasm $(WASI_GUESTS)/guest.c
	$(RUSTC) --target wasm32-wasi -O -C strip=symbols -o $(WASI_GUESTS)/guest_rust.wasm $(WASI_GUESTS)/guest.rs
	GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -ldflags="-s -w" -o $(WASI_GUESTS)/guest_go.wasm ./$(WASI_GUESTS)/go

# The test plugins built with Extism's Go PDK (a nested module; not run by
# make test, the .wasm files are committed next to their source), and the
# PDK's own example for the standard Go compiler, built unchanged from the
# module (a WASI command whose main is the plugin, called as _start).
plugins:
	cd testdata/plugins/go && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -ldflags="-s -w" -o plugin.wasm .
	cd testdata/plugins/go && GOOS=wasip1 GOARCH=wasm $(GO) build -tags std -trimpath -ldflags="-s -w" -o std_countvowels.wasm github.com/extism/go-pdk/example/countvowels
	cd testdata/plugins/go && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -ldflags="-s -w" -o host_user.wasm ./host

# The interpreter runtimes: the JavaScript (goja), Lua (gopher-lua) and
# Starlark guests of runtimes/ (a nested module, so the main module does
# not depend on the interpreters), each an Extism plugin built as a WASI
# reactor with Go alone, into bin/runtimes/ (git-ignored with bin/), where
# bin/sandboxd finds them; then each compiled for this build of
# bin/sandboxd into bin/runtimes/modules-<build>/ by a first evaluation,
# pre-initialised (docs/preinit.md: compiled twice, about two minutes of
# CPU for JavaScript, once per build; nothing when the artefacts are
# there), so that no snippet waits (docs/snippets.md).
RUNTIMES := js lua starlark
runtimes: binary
	mkdir -p bin/runtimes
	cd runtimes && for r in $(RUNTIMES); do \
		GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -ldflags="-s -w" -o ../bin/runtimes/$$r.wasm ./guest/$$r || exit 1; \
	done
	for r in $(RUNTIMES); do $(BIN) eval --lang $$r -e 0 >/dev/null || exit 1; done

clean:
	rm -rf bin
