#!/usr/bin/env bash
# Installs what building and testing need on a fresh Debian machine:
# a C compiler, pkg-config, cmocka and libxxhash from Debian (and clang with
# libFuzzer, and valgrind, for fuzz/ and the sanitizer runs), Meson and Ninja into .venv.
# Safe to re-run; does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
pkg-config --exists cmocka 2>/dev/null || need_apt+=(libcmocka-dev)
pkg-config --exists libxxhash 2>/dev/null || need_apt+=(libxxhash-dev)
[ -f /usr/include/yajl/yajl_parse.h ] || need_apt+=(libyajl-dev)  # safetensors headers (ADR-0020)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-venv)
# Fuzzing (clang with libFuzzer), valgrind memcheck (make test-valgrind).
command -v clang >/dev/null 2>&1 || need_apt+=(clang)
[ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ] || need_apt+=(libclang-rt-dev)
command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "bootstrap: apt-get install ${need_apt[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/meson ] || [ ! -x .venv/bin/ninja ]; then
  echo "bootstrap: creating .venv with meson and ninja"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check 'meson==1.6.1' 'ninja==1.11.1.3'
fi
