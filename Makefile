# The two commands of the README: `make demo` and `make test`.
# Both install what the build needs first (`make deps`), so they work on a
# fresh Debian machine with only the Rust toolchain.

CARGO ?= cargo
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps demo test release bench bench-gateway profile-gateway fuzz ui ui-test

# cmake builds zlib-ng for Pingora; curl drives the TLS and HTTP/2 tests;
# redis-server (its own, on a free port) backs the fleet-wide limit tests;
# chromium runs the dashboard's browser tests (driven by playwright-core,
# which downloads no browser); the Python packages are the openai SDK (SDK
# test), k6 (load scenarios), schemathesis (the admin API against its
# OpenAPI document) and transformers + tokenizers (the reference the
# gateway's tokenization is held to). The dashboard builds with Node.js >= 20.19
# and npm, which Debian's own nodejs package is too old for.
deps:
	@command -v cmake >/dev/null && command -v curl >/dev/null && command -v chromium >/dev/null && command -v redis-server >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq cmake curl chromium redis-server; }
	@python3 -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a == 20 && b >= 19) ? 0 : 1)' 2>/dev/null && command -v npm >/dev/null || { echo "the dashboard (ui/) needs Node.js >= 20.19 and npm: https://nodejs.org/en/download" >&2; exit 1; }

# The dashboard (ui/dist), which the admin listener serves under /ui/.
ui:
	cd ui && npm ci --no-audit --no-fund && npm run build

# The dashboard's generated API types checked against ui/openapi.json, ESLint
# and its unit tests (vitest), then its browser tests against a
# control node on PostgreSQL, two gateways and a standalone node (the debug
# binary; screenshots in ui/e2e-artifacts/).
ui-test: ui
	cd ui && npm test && npm run e2e

# Three fake engines and the gateway on the embedded demo configuration,
# with the dashboard at http://127.0.0.1:9090/ui/.
demo: deps ui
	$(CARGO) run --release --locked -- demo

# The vendored Pingora patch against its published source (patches/README.md),
# unit, property and end-to-end tests (the dashboard's included), then
# lints, then every fuzz target for FUZZ_SECONDS (15) each. CI runs exactly
# this. docker/install-check-tools brings the validators tests/docs.rs runs
# on docker/ (compose, promtool, Kubernetes schemas).
test: deps
	docker/install-check-tools
	scripts/check-patches
	$(CARGO) build --locked --workspace --all-targets
	$(MAKE) --no-print-directory ui-test
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --locked --workspace --no-fail-fast; \
	else \
		$(CARGO) test --locked --workspace --no-fail-fast; \
	fi
	$(CARGO) test --locked --workspace --doc
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) fmt --all -- --check
	scripts/fuzz-smoke

# The binary to deploy and to measure, target/pgo/rolter: a release build
# optimized by the profile of a training run (scripts/build-release, two
# release builds, ~20 min). llvm-profdata comes with the toolchain's
# llvm-tools component, or from Debian's llvm package of rustc's LLVM.
release: deps
	@scripts/build-release --find-profdata >/dev/null || rustup component add llvm-tools || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq llvm-$$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p'); }
	scripts/build-release

# Criterion benchmarks of the balancer, of routing tokenization, of flow
# control and engine-reported load, of tracing off and on, and of reading a
# request's body (stop by themselves, ~5 minutes).
bench:
	$(CARGO) bench --locked -p rolter-balancer
	$(CARGO) bench --locked -p rolter-tokenize
	$(CARGO) bench --locked -p rolter --bench flow
	$(CARGO) bench --locked -p rolter --bench traces
	$(CARGO) bench --locked -p rolter --bench request

# The gateway side by side with nginx, a bare Pingora passthrough and the
# engine direct, on the same pinned cores (load-tests/compare.py, ~22 min
# after `make release`'s build; BENCH_ARGS=--quick for a 3-minute smoke
# run), measuring the profile-guided binary that is deployed: one table in
# load-tests/results/compare-<time>.md. A measurement, so not part of `make
# test`. Debian's nginx package may start a system nginx on port 80; the
# benchmark runs its own on free ports. The saturation rows drive the
# proxies with wrk and use load-tests/bench-servers (the bare Pingora built
# from the published crates, and a minimal SSE upstream), its own workspace.
bench-gateway: deps
	@command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nginx-light; }
	@command -v wrk >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq wrk; }
	$(MAKE) --no-print-directory release
	$(CARGO) build --release --locked --manifest-path load-tests/bench-servers/Cargo.toml --target-dir target/bench-servers
	ROLTER_BENCH_COMMAND='make bench-gateway$(if $(BENCH_ARGS), BENCH_ARGS="$(BENCH_ARGS)")' python3 load-tests/compare.py --rolter target/pgo/rolter $(BENCH_ARGS)

# Where rolter's CPU goes next to nginx's, under the same workloads (perf
# call stacks, syscall counts), and its heap per open stream (valgrind
# massif): load-tests/results/profile-<time>.md, ~6 min after `make
# release`. The call stacks are the deployed, profile-guided binary's.
profile-gateway: deps
	@command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nginx-light; }
	@command -v perf >/dev/null && command -v valgrind >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq linux-perf valgrind; }
	$(MAKE) --no-print-directory release
	$(CARGO) build --release --locked --features heap-profile --bin rolter --target-dir target/heap-profile
	python3 load-tests/gateway_profile.py --rolter target/pgo/rolter

# The fuzz smoke test alone (cargo-fuzz on stable; see the script's header).
fuzz:
	scripts/fuzz-smoke
