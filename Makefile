# toolfan developer commands. `make test` needs only Python 3.11+ and redis-server.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install demo bench test test-fast lint typecheck format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# The whole path on this machine: Redis (reused or private), emulator, worker, poller.
demo: install
	$(BIN)/toolfan demo

# The benchmark: toolfan vs raw Celery, a thread pool and a loop; figures in bench-results/.
# It uses Redis databases 4 and 5 (flushed); add BENCH_ARGS=--private-redis for Redis
# command counts free of other clients' traffic.
BENCH_ARGS ?=
bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Tests start a private redis-server on a free port (see tests/conftest.py) and never
# touch another Redis, unless TOOLFAN_TEST_REDIS_URL names one for them to flush. The
# end-to-end suite runs again with RabbitMQ as the broker (skipped when none answers on
# 127.0.0.1:5672, unless CI is set).
test: lint typecheck
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(BIN)/python -m pytest --broker=rabbitmq tests/e2e $(PYTEST_ARGS)

# The unit tests and the quick end-to-end ones (under a minute): for the edit-run loop.
# They run in one pytest process per core (at most 4), each with its own private
# redis-server, emulator and worker; with TOOLFAN_TEST_REDIS_URL set they share that one
# server, so they run in one process. `make test` runs everything, as CI does.
TEST_FAST_PROCESSES ?= $(if $(TOOLFAN_TEST_REDIS_URL),0,auto --maxprocesses=4)
test-fast: install
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_FAST_PROCESSES) $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
