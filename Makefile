# The two commands of the README: `make demo` and `make test`. Both set up what they need.
.PHONY: demo test faults setup lint unit docs image

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/ai-inference demo

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports

# The suite runs the whole crash matrix (docs/faults.md, "Crashes"): every write boundary
# x 20 seeds, four seeds to a crashed controller.
MATRIX = AI_INFERENCE_FAULT_SEEDS=20 AI_INFERENCE_FAULT_MIXES=4

test: lint
	$(MATRIX) .venv/bin/pytest

# The crash matrix alone (the same as in `make test`).
faults: setup
	$(MATRIX) .venv/bin/pytest tests/faults

docs: setup
	.venv/bin/python scripts/gen_docs.py

# The controller's OCI image (scripts/build-image.sh; as root, cached): build/image:VERSION
image: setup
	bash scripts/build-image.sh
