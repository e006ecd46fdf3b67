# The two commands of the README: `make demo` and `make test`. Both set up what they need.
.PHONY: demo test setup lint unit docs image

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/ai-inference demo

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports

test: lint
	.venv/bin/pytest

docs: setup
	.venv/bin/python scripts/gen_docs.py

# The controller's OCI image (scripts/build-image.sh; as root, cached): build/image:VERSION
image: setup
	bash scripts/build-image.sh
