# Two commands for a newcomer: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The agent's tests run a real ZooKeeper: the Debian package's server, unless a Docker engine
# answers (then testcontainers). Installed once, skipped when present. CI runs as root.
ZK_JAR := /usr/share/java/zookeeper.jar
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint typecheck unit bench clean venv zookeeper

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python deploy/demo.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

zookeeper:
	@test -e $(ZK_JAR) || { $(SUDO) apt-get update -q && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper; }

unit: $(STAMP) zookeeper
	$(BIN)/pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/compare.py --pairs 1,4,16 --repeat 3

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache var
