# merkle-db: `make demo` runs the quick start, `make test` runs every gate.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LAKE   ?= $(CURDIR)/lake

.PHONY: demo test lint bench crash fuzz clean java

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamp files record which extras are installed, re-done when pyproject.toml changes.
$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml tools/ipld-car/package-lock.json | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	# The IPLD project's JavaScript CAR reader, for the CAR export tests (skipped without npm).
	if command -v npm >/dev/null; then npm ci --prefix tools/ipld-car --no-audit --no-fund --silent; fi
	touch $@

$(VENV)/.bench-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench,spark]'
	touch $@

# The Spark tests need Java 17+: say so in one line instead of failing inside Spark.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.* version "\([0-9][0-9]*\).*/\1/p' | head -n 1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "make test: the Spark tests need Java 17 or newer on PATH (found: $${v:-none}); install one, e.g. apt-get install openjdk-17-jre-headless" >&2; \
	  exit 1; \
	fi

demo: $(VENV)/.demo-installed
	$(BIN)/python examples/quickstart.py --lake $(LAKE)

lint: $(VENV)/.test-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Tests run on every core (at most 4 workers): the suite is mostly waiting on
# processes, fsyncs and the moto server, and took 26 minutes on one 2-core machine
# serially, 17 in two workers. The Spark tests share one worker (one JVM).
test: lint java
	$(BIN)/python -m pytest -n auto --maxprocesses=4 --dist loadgroup

bench: $(VENV)/.bench-installed
	$(BIN)/python -m bench

# The long reliability runs (doc/reliability.md): SIGKILL crash trials, and decoder fuzzing.
TRIALS ?= 200
crash: $(VENV)/.test-installed
	cd tests && $(CURDIR)/$(BIN)/python -m reliability.crash --trials $(TRIALS)

FUZZ_EXAMPLES ?= 20000
fuzz: $(VENV)/.test-installed
	MERKLE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/reliability/test_decoders.py -q

clean:
	rm -rf $(VENV) lake .pytest_cache .mypy_cache .ruff_cache .hypothesis
