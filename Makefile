# The checks. `make check` is the fast inner loop (everything but the real-vLLM-server test, ~6 min on 2 cores);
# `make check-all` is what CI runs (.ci/run runs the README's test command, which is the same list).
.PHONY: check check-all docs format

check:
	ruff check .
	ruff format --check .
	lint-imports
	mypy
	pytest -q -m "not vllm"

check-all:
	ruff check .
	ruff format --check .
	lint-imports
	mypy
	pytest

docs:  # regenerate docs/commands.md from the commands' --help (tests/test_docs.py checks it is current)
	python3 .ci/commands_doc.py

format:  # format the code as CI checks it (ruff format, 120 columns)
	ruff format .
	ruff check --fix .
