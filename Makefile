# `make run` and `make test` work on a fresh clone: they create .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: run test test-e2e client-test client-mutants bench eval chaos lint mutants mutants-short docs format clean

# The runtime set (requirements.txt) is all `make run` installs; the development and test tools
# (requirements-dev.txt) come on top for the targets that need them.
$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

run: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) -m reviewdesk.serve.launcher

test: $(VENV)/.installed-dev
	$(PY) -m pytest $(PYTEST_ARGS)

# Only the end-to-end flow (real worker, real server, real browser).
test-e2e: $(VENV)/.installed-dev
	$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

# The client package (clients/python) in an environment of its own: the OpenAI Agents SDK's import
# name is `agents`, the desk's own top-level package, so the SDKs never enter .venv. Its tests
# start a real desk with .venv's Python (clients/python/tests/conftest.py): DATABASE_URL and
# REDIS_URL when both are set, else a temporary embedded var/. CLIENT_PYTEST_ARGS="-k sse" picks.
CLIENT_VENV := .venv-client
CLIENT_PYTEST_ARGS ?=
$(CLIENT_VENV)/.installed: clients/python/pyproject.toml
	test -x $(CLIENT_VENV)/bin/python || $(PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/python -m pip install -q --upgrade pip
	$(CLIENT_VENV)/bin/python -m pip install -q -e 'clients/python[all]' pytest
	touch $@

client-test: $(CLIENT_VENV)/.installed $(VENV)/.installed-dev
	cd clients/python && ../../$(CLIENT_VENV)/bin/python -m pytest tests $(CLIENT_PYTEST_ARGS)

# The client's guard-line mutations (clients/python/tests/mutants.py), all against one desk.
client-mutants: $(CLIENT_VENV)/.installed $(VENV)/.installed-dev
	cd clients/python && ../../$(CLIENT_VENV)/bin/python tests/mutants.py

# The desk's figures next to their floors, measured in one run (bench/run.py): starts its own
# stack (DATABASE_URL/REDIS_URL when set, else the embedded default), prints the table, writes
# var/bench/results.json and results.png. BENCH=short: a few seconds a figure (as CI runs it).
# Figure #4 measures against LangGraph: installed here only, from its own requirements file.
$(VENV)/.installed-bench: $(VENV)/.installed-dev requirements-bench.txt requirements-bench-langgraph.txt
	$(PY) -m pip install -q -r requirements-bench.txt -r requirements-bench-langgraph.txt
	touch $@

bench: $(VENV)/.installed-bench
	$(PY) -m bench.run

# Provenance over the labelled calls (tests/fixtures/provenance_eval.json): the table, precision
# and recall, and the targets; exits 1 when a target is missed. Pure CPU, no stack.
eval: $(VENV)/.installed-dev
	$(PY) -m bench.provenance_eval
	$(PY) -m bench.reading_eval

# Long fault-injection loop: many runs, workers kill -9'd at every step boundary.
# `make test` runs the same test short (8 runs).
chaos: $(VENV)/.installed-dev
	DESK_CHAOS_RUNS=$${DESK_CHAOS_RUNS:-60} DESK_CHAOS_TIMEOUT=$${DESK_CHAOS_TIMEOUT:-900} \
		$(PY) -m pytest tests/e2e/test_crash_recovery.py -m chaos $(PYTEST_ARGS)

# Every step runs even when an earlier one fails; the last line names the ones that failed.
# The migration check runs on the embedded default (SQLite in var/): it needs no server, and
# importing the settings starts none. mypy keeps its cache in var/mypy_cache.
lint: $(VENV)/.installed-dev
	@failed=; \
	step() { name=$$1; shift; printf '\n== %s\n' "$$name"; start=$$(date +%s); \
		"$$@" || failed="$${failed:+$$failed, }$$name"; printf -- '-- %s: %ss\n' "$$name" $$(( $$(date +%s) - start )); }; \
	step "ruff check" $(VENV)/bin/ruff check .; \
	step "ruff format --check" $(VENV)/bin/ruff format --check .; \
	step "import contracts" $(VENV)/bin/lint-imports --no-logo --no-cache; \
	step "migrations match the models" env -u DATABASE_URL -u REDIS_URL \
		$(PY) manage.py makemigrations --check --dry-run; \
	step "mypy" $(VENV)/bin/mypy; \
	if [ -n "$$failed" ]; then printf '\nlint failed: %s\n' "$$failed"; exit 1; fi; \
	printf '\nlint passed\n'

# Guard-line mutations the suite must kill (tests/mutants.toml), each tried on a temporary copy
# of the tree against only the tests it names. MUTANTS_ARGS="-k ledger" picks some by name.
MUTANTS_ARGS ?=
mutants: $(VENV)/.installed-dev
	$(PY) tests/mutants.py $(MUTANTS_ARGS)

# CI's short run: one of ten interleaved slices of the list, chosen by HEAD's commit count so
# that consecutive landings run different slices; every entry is still checked against the
# source. CI runs it beside the PostgreSQL suite, one copy at a time (MUTANTS_ARGS="--jobs 1").
# `make mutants` runs them all (MUTANTS_ARGS="--jobs 2" halves it).
mutants-short: $(VENV)/.installed-dev
	$(PY) tests/mutants.py --every 10 --slice auto --jobs 2 $(MUTANTS_ARGS)

# The docs site (mkdocs.yml, docs/) into var/site. Strict: a broken link or anchor, or a page
# left out of the nav, fails the build.
docs: $(VENV)/.installed-dev
	$(VENV)/bin/mkdocs build --strict --quiet

format: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf var .pytest_cache clients/python/.pytest_cache
