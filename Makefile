# The two commands of the README: `make demo` and `make test`. Both set up what they need.
.PHONY: demo test faults setup lint unit docs image

setup:
	bash scripts/setup.sh

# The demo's log is SQLite: it needs no PostgreSQL, which only the tests do.
demo:
	AI_INFERENCE_SKIP_POSTGRES=1 bash scripts/setup.sh
	.venv/bin/ai-inference demo

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports

# The suite runs the whole crash matrix (docs/faults.md, "Crashes"): every write boundary
# x 20 seeds, four seeds to a crashed controller. The matrix runs on two workers, each
# with a control plane of its own (its rounds mostly wait on the controller's restarts:
# 7 to 9 minutes instead of 13); the rest of the suite runs first, alone, as its timings are
# read on a machine that is otherwise quiet.
MATRIX = AI_INFERENCE_FAULT_SEEDS=20 AI_INFERENCE_FAULT_MIXES=4
FAULTS = $(MATRIX) .venv/bin/pytest -n 2 --dist loadgroup tests/faults

test: lint
	.venv/bin/pytest --ignore=tests/faults
	$(FAULTS)

# The crash matrix alone (the same as in `make test`).
faults: setup
	$(FAULTS)

docs: setup
	.venv/bin/python scripts/gen_docs.py

# The controller's OCI image (scripts/build-image.sh; as root, cached): build/image:VERSION.
# It needs neither the Kubernetes binaries nor PostgreSQL (setup's), only pip: the script
# makes a small venv of its own when .venv is missing.
image:
	bash scripts/build-image.sh
