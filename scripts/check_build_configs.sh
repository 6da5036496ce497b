#!/usr/bin/env bash
# Builds in configurations the other suites never use, each of which once
# failed: what a user building with other options meets first. Each check
# prints "ok NAME" or "FAILED NAME: why"; the last line counts them. Build
# folders are kept in build-configs/ (a second run recompiles what changed).
# Run by `make test-configs` (part of `make test`).
set -uo pipefail
cd "$(dirname "$0")/.."
meson=${MESON:-.venv/bin/meson}
ninja=${NINJA:-.venv/bin/ninja}
export PATH="$(dirname "$(readlink -f "$ninja")"):$PATH"
out=build-configs
mkdir -p "$out"
passed=0 failed=0

check() { # NAME WHY COMMAND...: the command must succeed
  local name=$1 why=$2
  shift 2
  if "$@" >"$out/$name.log" 2>&1; then
    echo "ok $name"
    passed=$((passed + 1))
  else
    echo "FAILED $name: $why (log: $out/$name.log)"
    tail -15 "$out/$name.log" | sed 's/^/  /'
    failed=$((failed + 1))
  fi
}

setup() { # DIR OPTIONS...: configures DIR afresh when its options changed
  local dir=$out/$1
  shift
  local want="-Dwerror=true $*"
  if [ ! -f "$dir/build.ninja" ] || [ "$(cat "$dir/.check-options" 2>/dev/null)" != "$want" ]; then
    rm -rf "$dir"
    "$meson" setup "$dir" -Dwerror=true "$@" && echo "$want" >"$dir/.check-options"
  fi
}

# gcc at -Og refused to inline xxhash.h's always_inline loops (a hard
# error), and GNU C with AVX512-FP16 has FLT_EVAL_METHOD 16, which the
# kernels' check took for x87 arithmetic. Compiled only: the CPU need not
# have AVX512-FP16.
setup_og() {
  local extra=()
  if echo 'int x;' | cc -mavx512fp16 -x c -c -o /dev/null - 2>/dev/null; then
    extra=(-Dc_args=-mavx512fp16)
  fi
  setup og -Doptimization=g -Dc_std=gnu11 "${extra[@]}" -Dtests=false -Dpython=disabled
}
og_fp16() {
  setup_og && "$ninja" -C "$out/og"
}
check og-fp16 "gcc -Og, GNU C with -mavx512fp16 must build the library" og_fp16

# With -Ddefault_library=shared the extensions linked libhurray.so, which
# hides the hurray__* functions they call: built, installed, and "undefined
# symbol" at import.
shared_python() {
  setup shared -Ddefault_library=shared -Dtests=false -Dpython=enabled &&
    "$ninja" -C "$out/shared" || return 1
  local ext missing
  for ext in "$out"/shared/python/_hurray*.so "$out"/shared/python/_formats*.so; do
    [ -f "$ext" ] || { echo "no extension $ext"; return 1; }
    missing=$(nm -D --undefined-only "$ext" | awk '$2 ~ /^hurray_/ {print $2}')
    [ -z "$missing" ] || { echo "$ext needs from libhurray.so: $missing"; return 1; }
  done
}
check shared-python "a shared-only build's extensions must carry what they call" shared_python

# A static-only build ran the exports check (nm -D) on libhurray.a.
static_exports() {
  setup static -Ddefault_library=static -Dpython=disabled &&
    "$meson" introspect --tests "$out/static" |
    python3 -c 'import json, sys
bad = [t["cmd"] for t in json.load(sys.stdin) if t["name"] == "exports" and not t["cmd"][-1].endswith(".so")]
sys.exit(f"the exports test reads {bad}" if bad else 0)'
}
check static-exports "the exports test must read a shared library" static_exports

# -Dfuzzing=true with gcc was accepted, then every compile failed.
fuzzing_gcc() {
  rm -rf "$out/fuzz-gcc"
  if CC=gcc "$meson" setup "$out/fuzz-gcc" -Dfuzzing=true -Dpython=disabled; then
    echo "meson setup accepted -Dfuzzing=true with gcc"
    return 1
  fi
  grep -q "needs clang" "$out/fuzz-gcc/meson-logs/meson-log.txt"
}
check fuzzing-gcc "-Dfuzzing=true with gcc must stop at setup, saying why" fuzzing_gcc

# hurray.pc named yajl by the build machine's absolute path.
pc_relative() {
  setup_og >/dev/null 2>&1 || return 1
  local pc=$out/og/meson-private/hurray.pc
  grep '^Libs.private:' "$pc"
  ! grep '^Libs' "$pc" | grep -q ' /'
}
check pc-relative "hurray.pc's libraries must be named, not given by absolute path" pc_relative

# In a static-only build hurray.pc's Cflags carried -DXXH_INLINE_ALL, a
# compile argument of a dependency compiled in, and a program that defines
# it itself failed with -Werror ("XXH_INLINE_ALL" redefined).
pc_static_cflags() {
  setup static -Ddefault_library=static -Dpython=disabled >/dev/null 2>&1 || return 1
  "$ninja" -C "$out/static" build.ninja >/dev/null || return 1 # meson.build changed since: again
  local pc=$out/static/meson-private/hurray.pc
  grep '^Cflags:' "$pc"
  ! grep '^Cflags:' "$pc" | grep -q -- ' -D'
}
check pc-static-cflags "a static build's hurray.pc must give no macros of its own" pc_static_cflags

echo "test-configs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
