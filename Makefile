# Two commands for a newcomer: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
# pytest-xdist workers of make unit/test: 3 on 2 cores (at 2 the suite kept about 1.2 of 2
# cores busy: it mostly waits on brokers, sessions and JVMs; a clean-clone run's pytest
# 573 s at 3 against 638-855 s at 2; at 4 the workers' timelines ended within 3 s of
# each other with both cores busy throughout, 730 s, 2026-11-30: the suite is CPU-bound
# now, a 4th worker only adds contention); make test TEST_WORKERS=2 for fewer
TEST_WORKERS ?= 3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The tests use real system parts, installed once from Debian's packages and skipped when
# present: a ZooKeeper server (unless a Docker engine answers: then testcontainers; its jar
# and a headless JRE, not Debian's zookeeper package, whose zooinspector pulls a desktop JRE),
# arping for the virtual IP's gratuitous ARP, ocf-tester (resource-agents, with xmllint)
# and crm_resource (pacemaker-cli-utils) for the OCF agent, nft for the nemesis drill's
# partitions, ip (iproute2: network namespaces, the virtual IP). CI runs as root.
# deploy/system-packages.sh installs them without recommends,
# starts no service and leaves none enabled (docs/install.md lists what comes with them).
# pacemaker-cli-utils needs "pacemaker | pacemaker-remote": pacemaker-remote, asked for
# with it, keeps out pacemaker itself and corosync (crm_resource --force-* runs the
# agent without a cluster). Node.js runs the amqplib client of tests/compat and the rhea
# (AMQP 1.0) client of tests/amqp10; their packages (amqplib; rhea with debug and ms),
# pinned in tests/compat/node/package-lock.json, come from the npm registry through
# deploy/node_lock_install.py (integrity checked), not npm: Debian's npm brings about 340
# node-* packages to a bare Debian 12 for those four plain packages.
# Chromium and its chromedriver drive the web console's browser tests (tests/console).
# Each entry: a file that shows the package is there, then the package.
SYSTEM_PACKAGES := /usr/share/java/zookeeper.jar:libzookeeper-java /usr/bin/java:default-jre-headless \
	/usr/share/java/slf4j-simple.jar:libslf4j-java \
	/usr/sbin/arping:iputils-arping /usr/bin/arping:iputils-arping \
	/usr/sbin/ocf-tester:resource-agents /usr/bin/xmllint:libxml2-utils \
	/usr/sbin/crm_resource:pacemaker-cli-utils /usr/sbin/crm_resource:pacemaker-remote \
	/usr/sbin/nft:nftables \
	/usr/bin/node:nodejs /bin/ip:iproute2 \
	/usr/bin/chromium:chromium /usr/bin/chromedriver:chromium-driver
#: What the demo uses: a ZooKeeper server (its jar, slf4j and a headless JRE), nothing else.
DEMO_PACKAGES := /usr/share/java/zookeeper.jar:libzookeeper-java /usr/bin/java:default-jre-headless \
	/usr/share/java/slf4j-simple.jar:libslf4j-java
NODE_CLIENT := tests/compat/node
#: Wheels of the broker's runtime dependencies and of its build backend, fetched once here so
#: that tests/test_wheel_install.py installs the built wheel into a clean venv without the
#: network (pip --no-index --find-links).
WHEELHOUSE := $(VENV)/wheelhouse
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint typecheck unit rewritten-tests bench bench-ha bench-ha-rabbitmq bench-store bench-security bench-ha-fuzz bench-amqp10 clean venv system-packages demo-packages

venv: $(STAMP)

# setup.py and the C files: the native parts are compiled again when they change.
$(STAMP): pyproject.toml setup.py broker/amqp/_wire.c broker/store/_walk.c broker/store/_records.c broker/store/_ledger.c broker/ha/_batch.c broker/store/_crc32c.h broker/store/_group_write.c broker/core/_raw_alloc.c broker/core/_confirms.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# The runtime dependencies only (pyproject.toml's [project] dependencies: no extra), and
# setuptools and wheel to build with.
$(WHEELHOUSE)/.done: $(STAMP)
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' > $(VENV)/runtime-requirements.txt
	$(BIN)/python -m pip wheel -q -w $(WHEELHOUSE) -r $(VENV)/runtime-requirements.txt 'setuptools>=77' wheel
	@touch $@

# make demo HOLD=1: after the fail-over the cluster stays up for its web console until
# ctrl-C (HOLD=SECONDS: that long); the same as DEMO_HOLD=forever|SECONDS.
# make demo CLUSTERS=2: two clusters on the same three nodes (docs/deploy.md).
HOLD ?=
CLUSTERS ?=
demo: $(STAMP) demo-packages
	$(if $(HOLD),DEMO_HOLD=$(if $(filter 1 yes,$(HOLD)),forever,$(HOLD)) )$(BIN)/python deploy/demo.py$(if $(CLUSTERS), --clusters $(CLUSTERS))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Install the packages of a list (file:package entries) whose file is missing.
define install_missing
	@missing=$$(for e in $(1); do f=$${e%%:*}; p=$${e#*:}; \
		[ -e "$$f" ] || echo "$$p"; done | sort -u); \
	for p in $$missing; do dpkg -s "$$p" >/dev/null 2>&1 || want="$$want $$p"; done; \
	if [ -n "$$want" ]; then $(SUDO) sh deploy/system-packages.sh $$want; fi
endef

system-packages:
	$(call install_missing,$(SYSTEM_PACKAGES))

demo-packages:
	$(call install_missing,$(DEMO_PACKAGES))

$(NODE_CLIENT)/node_modules/.installed: $(NODE_CLIENT)/package.json $(NODE_CLIENT)/package-lock.json | $(STAMP)
	$(BIN)/python deploy/node_lock_install.py $(NODE_CLIENT)

#: The code's bytecode, compiled once before the tests: the suite starts many hundreds of
#: brokers, agents and qpid-ha commands, and where PYTHONDONTWRITEBYTECODE is set (as on
#: this project's machines) each of them compiled every module it imports from source (the
#: editable install writes none; a wheel's install does): tests/cli 37.3 -> 28.1 CPU
#: seconds, 151 -> 106 s side by side. Only what changed is compiled again.
BYTECODE_DIRS := broker common ha_agent qpid_ha_cli analytics deploy bench tests

#: pytest's rewritten test modules (the asserts that explain a failure), written once before
#: the run: where PYTHONDONTWRITEBYTECODE is set pytest keeps none, and each pytest-xdist
#: worker rewrote every test module again (a worker's collection 20 CPU s, 6 with them
#: written: 2026-11-30, load 45). A collection alone writes them (pytest checks each against
#: its source; only what changed is rewritten); the workers read them. A collection error
#: is the run's to report (it collects again).
rewritten-tests: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -q --collect-only -p no:xdist -p no:cacheprovider > /dev/null || true

unit: $(STAMP) $(WHEELHOUSE)/.done system-packages $(NODE_CLIENT)/node_modules/.installed rewritten-tests
	$(BIN)/python -m compileall -q -j 0 $(BYTECODE_DIRS) > /dev/null
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# lint and typecheck beside unit, not in front of it (a sub-make with jobs): the same checks,
# each must pass. From a clean clone (no .mypy_cache) mypy is ~39 CPU s, one core for about
# 40 s quiet: it now runs while pip fetches the wheelhouse (the network) and beside the
# tests, not before them. Their lines come when each ends, between pytest's; a check that
# fails before the tests start keeps them from starting, one that fails later lets them end
# (make test fails either way).
test:
	@$(MAKE) --no-print-directory -j 4 lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/compare.py --pairs 1,4,16 --repeat 3

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache var

bench-ha: $(STAMP)
	$(BIN)/python bench/ha_compare.py --pairs 1,4,16,64 --repeat 3 && $(BIN)/python bench/catchup.py --repeat 3

# HA against HA (issue 32, item 5): qpidd primary + 2 backups against RabbitMQ 3.10.8's
# mirrored and quorum queues on a cluster of 3 (bench/rabbitmq.sh cluster-start, 5761-5763),
# persistent messages to durable queues, P = 1 and 4, 3 rotating rounds, with pika and then
# with the lean 0-9-1 client (docs/benchmarks.md). About 15 minutes a client on a quiet machine.
bench-ha-rabbitmq: $(STAMP)
	$(BIN)/python bench/ha_vs_rabbitmq.py --pairs 1,4 --repeat 3 && $(BIN)/python bench/ha_vs_rabbitmq.py --pairs 1,4 --repeat 3 --client lean

# Persistent confirmed throughput against RabbitMQ's durable classic and quorum queues, then
# the recovery of 1M x 1 KiB persistent messages after a SIGKILL, then a backup holding them
# restarting from its own store (docs/benchmarks.md).
bench-store: $(STAMP)
	$(BIN)/python bench/store_bench.py --pairs 1,4,16,64 --repeat 3 && $(BIN)/python bench/store_recovery.py --repeat 3 && $(BIN)/python bench/backup_restart.py --repeat 3

# The long fuzz run (issue 13): 56,000 mutated AMQP sessions and 2,000 management requests
# against a real broker; crashes, hangs, fd leaks (docs/security.md). About 4 minutes.
bench-security: $(STAMP)
	$(BIN)/python bench/security_fuzz.py

# The long fuzz run of the HA path (issue 24): valid and garbled AMQP sessions and management
# requests against a primary with two backups for 10 minutes, invariants after every batch
# (docs/reliability.md, "Fuzzing the HA path").
bench-ha-fuzz: $(STAMP)
	$(BIN)/python bench/ha_fuzz.py --seconds 600

# AMQP 1.0 against 0-9-1 on qpidd (the lean pair and Proton/pika by default), and on RabbitMQ
# with its 1.0 plugin when RMQ_PORT names one (RMQ_PLUGINS=rabbitmq_amqp1_0 bench/rabbitmq.sh
# start PORT first); docs/benchmarks.md, "AMQP 1.0 throughput" and "AMQP 1.0 against our
# 0-9-1: the broker's share".
# AMQP10_CLIENTS: the client pairs (python, node, lean, joined by +; node needs `make unit`'s
# tests/compat/node).
RMQ_PORT ?=
AMQP10_CLIENTS ?= lean+python
bench-amqp10: $(STAMP)
	$(BIN)/python bench/amqp10_throughput.py --pairs 1,4 --repeat 3 --clients $(AMQP10_CLIENTS)$(if $(RMQ_PORT), --rabbitmq-port $(RMQ_PORT))
