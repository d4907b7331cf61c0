# flowctl developer targets. `make install` is the only set-up step; every other target uses .venv.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
FLOWCTL := $(BIN)/flowctl

.PHONY: install graphviz chromium run test bench lint schemas chaos fuzz clean

install: graphviz $(BIN)/.installed

# Runs on every `make install` until `dot` is found, so a failed attempt is tried again next time.
graphviz:
	@bash scripts/ensure_graphviz.sh

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	$(BIN)/python -m compileall -q runtime/flowctl
	@touch $@

run: install
	$(BIN)/python scripts/run_examples.py

MERMAID_DIR ?= .cache/mermaid

# A real Mermaid parser (npm: mermaid + jsdom) for the graph/diff tests; they skip, saying why, without it.
$(MERMAID_DIR)/node_modules/mermaid:
	@if command -v npm >/dev/null 2>&1; then \
	  echo "installing mermaid + jsdom from npm into $(MERMAID_DIR) (for the mermaid syntax tests)"; \
	  npm install --silent --no-audit --no-fund --prefix $(MERMAID_DIR) mermaid jsdom >/dev/null 2>&1 \
	    || echo "note: npm install of mermaid failed; the mermaid parser tests will be skipped"; \
	else echo "note: npm not found; the mermaid parser tests will be skipped"; fi

# Debian's chromium for the console's browser tests (Playwright drives it headless); they skip, saying why, without it.
chromium:
	@bash scripts/ensure_chromium.sh

test: install chromium $(MERMAID_DIR)/node_modules/mermaid
	FLOWCTL_MERMAID_DIR=$(abspath $(MERMAID_DIR)) $(BIN)/python -m pytest -q
	$(FLOWCTL) test --min-coverage 100
	$(FLOWCTL) test --contracts

# 4 worker processes on this machine's PostgreSQL (FLOWCTL_TEST_PG, default postgres@127.0.0.1:5432),
# SIGKILLed about once a second and one SIGSTOPped past its lease; `make test` runs it with 200 runs.
CHAOS_RUNS ?= 1000
chaos: install
	FLOWCTL_CHAOS_RUNS=$(CHAOS_RUNS) $(BIN)/python -m pytest -q -s -rs tests/test_chaos.py

# The loader/validate fuzz tests with FUZZ_EXAMPLES generated inputs per test (9 tests: 108,000 by
# default; about 15 minutes on 2 cores). The suite runs 200 per test.
FUZZ_EXAMPLES ?= 12000
fuzz: install
	FLOWCTL_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz_loader.py

# The benchmarks of issues 8, 9 and 17 (19 minutes on this shared 2-core machine; the biggest sizes
# are time-boxed): installs the peers (transitions, python-statemachine, DBOS) as the `bench`
# extra (and the serve extra: httptools, uvloop), then writes benchmarks/results/latest.json and BENCHMARKS.md with every issue-17 target.
# BENCH_ARGS=--quick for a smoke test (about 2 minutes; writes results/quick.json and quick.md).
bench: install
	$(BIN)/pip install -q --disable-pip-version-check -e '.[bench,serve]'
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

lint: install
	$(FLOWCTL) validate --strict

schemas: install
	$(BIN)/pip install -q --disable-pip-version-check fastjsonschema
	$(BIN)/python scripts/generate_validators.py

clean:
	rm -rf $(VENV) .flowctl .pytest_cache
