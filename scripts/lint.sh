#!/usr/bin/env bash
# The checks of `make lint`, changing nothing: ruff check, ruff format
# --check and clang-format --dry-run --Werror over every tracked Python and
# C file, and scripts/long_functions.py (no function over 80 lines without a
# "long:" reason). scripts/format.sh fixes what it can. Prints "lint: N passed, N
# failed" for make test's count.
set -uo pipefail
cd "$(dirname "$0")/.."
passed=0 failed=0
run() {
  echo "lint: $*"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
run .venv/bin/ruff check --quiet --output-format concise .
run .venv/bin/ruff format --check --quiet --output-format concise .
clang_format_check() {
  git ls-files -z '*.c' '*.h' | xargs -0 .venv/bin/clang-format --dry-run --Werror 2>&1 |
    grep -E '^[^ ].*: error:' | sed -E 's/:[0-9]+:[0-9]+: error:.*//' | sort -u | sed 's/^/needs clang-format: /'
  [ "${PIPESTATUS[1]}" -eq 0 ]
}
run clang_format_check
run .venv/bin/python scripts/long_functions.py
echo "lint: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
