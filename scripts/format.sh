#!/usr/bin/env bash
# Formats the whole tree as `make lint` wants it: ruff's safe fixes and ruff
# format for Python (pyproject.toml, [tool.ruff]), clang-format for C
# (.clang-format). Changes files in place; review with `git diff`.
# The tools are the pinned ones in .venv (scripts/bootstrap.sh --lint).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --lint
.venv/bin/ruff check --fix --quiet . || true  # what is left, make lint names
.venv/bin/ruff format --quiet .
git ls-files -z '*.c' '*.h' | xargs -0 .venv/bin/clang-format -i
