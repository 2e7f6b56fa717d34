# `make run` and `make test` work on a fresh clone: they create .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: run test test-e2e bench chaos lint format clean

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

run: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) -m reviewdesk.launcher

test: $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

# Only the end-to-end flow (real worker, real server, real browser).
test-e2e: $(VENV)/.installed
	$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

# Full-size benchmarks; figures print at the end. `make test` runs them small.
bench: $(VENV)/.installed
	DESK_BENCH=full $(PY) -m pytest tests/bench -m bench $(PYTEST_ARGS)

# Long fault-injection loop: many runs, workers kill -9'd at every step boundary.
# `make test` runs the same test short (8 runs).
chaos: $(VENV)/.installed
	DESK_CHAOS_RUNS=$${DESK_CHAOS_RUNS:-60} DESK_CHAOS_TIMEOUT=$${DESK_CHAOS_TIMEOUT:-900} \
		$(PY) -m pytest tests/e2e/test_crash_recovery.py -m chaos $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf var .pytest_cache
