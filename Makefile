# plan_stack: `make setup` builds everything into .venv + install/, `make test`
# runs the suite but its slow tests (`make test-slow` runs those), `make demo`
# runs the demo on the embedded simulator.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3.11
VENV := $(CURDIR)/.venv
STAMP := $(VENV)/.installed-$(shell cat requirements/lock.txt scripts/ros_env.sh.in | sha1sum | cut -c1-12)
ENV := source $(CURDIR)/scripts/env.bash
PYTEST_ARGS ?=
JOBS ?= 2
# pytest processes of `make test` / `make test-slow` (pytest-xdist; 0: one process). Each process reserves
# its own ROS domain (test/conftest.py), so DDS tests run side by side.
TEST_JOBS ?= 2

.PHONY: setup venv build test test-slow bench demo demo-expert clean soak train lint

setup: venv build

# Idempotent: re-installs only when requirements/lock.txt or the env script changes.
venv: $(STAMP)
$(STAMP): requirements/lock.txt scripts/ros_env.sh.in
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --no-input --disable-pip-version-check -q -r requirements/lock.txt
	mkdir -p $(VENV)/share/plan_stack
	sed "s|@VENV@|$(VENV)|g" scripts/ros_env.sh.in > $(VENV)/ros_env.sh
	printf '. "%s/ros_env.sh"\n' "$(VENV)" > $(VENV)/local_setup.bash
	rm -f $(VENV)/.installed-*
	touch $@

# Incremental colcon build of the interfaces + Python package (flock: one build at a time).
build: $(STAMP)
	$(ENV) --venv-only && flock $(CURDIR)/.build.lock colcon build --parallel-workers $(JOBS) \
	    --event-handlers console_cohesion- summary- status- --cmake-args $$ROS_WHEELS_CMAKE_ARGS

# Every test but the long end-to-end ones (marker `slow`), on TEST_JOBS processes; `make test-slow` runs
# those (CI runs both; `python -m pytest` alone runs the whole suite in one process). Only timing-bound
# tests (marker `timing`, which every DDS test marked `ros` gets) are rerun once when they miss a deadline
# under load (reported as R); every other test fails on its first failure (test/conftest.py).
test:
	$(ENV) && python -m pytest -n $(TEST_JOBS) -m "not slow" $(PYTEST_ARGS)

test-slow:
	$(ENV) && python -m pytest -n $(TEST_JOBS) -m slow $(PYTEST_ARGS)

# ruff (ruff.toml) over the repository, mypy (mypy.ini) over src/plan_stack; both pinned in requirements/lock.txt.
lint:
	$(VENV)/bin/ruff check .
	$(ENV) && $(VENV)/bin/mypy

# The learned stack (planner, chunker, stitcher, bridge) drives the embedded simulator of ROBOT
# (aloha by default) for one held-out episode; prints SUCCESS/FAILURE with the criterion, writes an
# MCAP bag, a camera contact sheet and plan pictures to out/demo (docs/closed_loop.md).
DEMO_SEED ?= 100000
demo:
	$(ENV) && python -m plan_stack.eval.episodes.demo --robot $(ROBOT) --seed $(DEMO_SEED) --out $(CURDIR)/out/demo

# Scripted ALOHA expert driving the embedded simulator through the bridge;
# prints success, writes an MCAP bag and a PNG contact sheet to out/demo.
demo-expert:
	$(ENV) && python -m plan_stack.eval.episodes.expert_demo --out $(CURDIR)/out/demo

# Every benchmark with its default settings; tables on stdout, JSON rows in out/bench.
# (bench/rtc.py on recorded demonstrations: see docs/actions.md.)
BENCH_OUT := $(CURDIR)/out/bench
bench:
	mkdir -p $(BENCH_OUT)
	$(ENV) && python bench/stitch.py --json $(BENCH_OUT)/stitch.json
	$(ENV) && python bench/sim.py --json $(BENCH_OUT)/sim.json
	$(ENV) && python bench/ingest.py --json $(BENCH_OUT)/ingest.json
	$(ENV) && python bench/viz.py --json $(BENCH_OUT)/viz.json
	$(ENV) && python bench/decode.py --json $(BENCH_OUT)/decode.json
	$(ENV) && python bench/engines.py --json $(BENCH_OUT)/engines.json
	$(ENV) && python bench/planner.py --json $(BENCH_OUT)/planner.json
	$(ENV) && python bench/pipeline.py --json $(BENCH_OUT)/pipeline.json
	$(ENV) && python bench/rtc.py --synthetic 20 --train-steps 500 --head $(BENCH_OUT)/heads/plain \
	    --rtc-head $(BENCH_OUT)/heads/rtc --stitcher --json $(BENCH_OUT)/rtc.json

# Long run of the ALOHA stack (not in CI): `plan-stack up aloha --processes`, unpaced, the simulator doing task
# after task, for SOAK_SIM_S of sim time (default 30 min); fails unless the real-time factor is >= 0.9, no node
# grows more than 5 % after the warm-up, no ERROR diagnostic comes and every task's outcome is logged. JSON in
# out/soak.json, the stack's console in out/soak.log (SOAK_ARGS: more scripts/soak.py options).
SOAK_SIM_S ?= 1800
SOAK_ARGS ?=
soak:
	mkdir -p $(CURDIR)/out
	$(ENV) && python scripts/soak.py --robot aloha --sim-seconds $(SOAK_SIM_S) --json $(CURDIR)/out/soak.json \
	    $(SOAK_ARGS)

clean:
	rm -rf build install log

# Rebuild the shipped planner models of one robot from scratch (ROBOT=aloha|franka|drive): records the
# demonstration splits (fixed seeds) into out/data/ROBOT, then trains target, drafter and action heads
# into models/ROBOT (resumable: rerun continues; see docs/models.md).
ROBOT ?= aloha
train:
	$(ENV) && plan-stack train --robot $(ROBOT) --data $(CURDIR)/out/data/$(ROBOT) --record --resume
