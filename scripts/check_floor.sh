#!/usr/bin/env bash
# The Python suite at the oldest versions pyproject.toml declares: numpy,
# ml_dtypes, scipy, urllib3 and fsspec pinned to their floors (each ">=X"
# read from pyproject.toml and installed as "==X", so the two cannot drift),
# without torch or any other optional peer (safetensors, gguf, bitsandbytes,
# compressed-tensors): what needs one skips. The venv .venv-floor is kept
# between runs; hurray is built from the tree by `pip install .` (meson-python,
# its build folder build-floor kept too, so a second run recompiles only what
# changed). Run by `make test-floor` (part of `make test`), which passes
# HURRAY_LIB when build/libhurray.so exists.
set -euo pipefail
cd "$(dirname "$0")/.."

# The test tools, at the versions the main venv (.venv) has; meson-python,
# meson and ninja build the extension without build isolation (no download
# on every run). Change a pin here when .venv moves on.
PYTEST_VERSION=9.2.0
HYPOTHESIS_VERSION=6.170.27
BUILD_PINS=('meson-python==0.22.1' 'meson==1.6.1' 'ninja==1.11.1.3')

venv=.venv-floor
floors=$(python3 - <<'EOF'
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
wanted = project["dependencies"] + extras["scipy"] + extras["remote"] + extras["fsspec"]
for req in wanted:
    name, sep, floor = req.partition(">=")
    assert sep and floor, f"pyproject.toml: {req!r} has no floor (>=)"
    print(f"{name}=={floor}")
EOF
)

# numpy 1.24 has wheels for CPython 3.8 to 3.11 only: the floors go with the
# oldest Python pyproject.toml allows, 3.11 (FLOOR_PYTHON names another).
[ -x "$venv/bin/python" ] || "${FLOOR_PYTHON:-python3}" -m venv "$venv"
# meson-python runs the meson and ninja of this venv, not .venv's
export PATH="$PWD/$venv/bin:$PATH"
pip_install() {
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 |
    { grep -v '^WARNING: Location' || true; } # extra indexes absent on this machine
}
# shellcheck disable=SC2086 # one requirement a word
pip_install $floors "pytest==$PYTEST_VERSION" "hypothesis==$HYPOTHESIS_VERSION" "${BUILD_PINS[@]}"
pip_install --no-build-isolation --config-settings=build-dir=build-floor .
# Nothing of the optional peers may have come in (a previous run's leftovers,
# a dependency of a dependency): their tests would run instead of skipping.
for peer in torch safetensors gguf bitsandbytes compressed_tensors; do
  if "$venv/bin/python" -c "import $peer" 2>/dev/null; then
    echo "test-floor: $venv has $peer; remove it (rm -rf $venv)" >&2
    exit 1
  fi
done
echo "test-floor: $(echo $floors | tr '\n' ' ')"

# -rs: what the floors leave untested, and why. HURRAY_LIB (libhurray.so for
# the ctypes tests) is the Makefile's, where a build has one.
exec env -u PYTHONPATH "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider \
  -m 'not slow and not bench' tests/python
