#!/usr/bin/env bash
# Installs what building and testing need on a fresh Debian machine, and
# Meson and Ninja into .venv. Safe to re-run; does nothing that is already done.
#   scripts/bootstrap.sh          the build: a C compiler, pkg-config, the
#                                 Debian -dev packages meson.build checks for
#                                 (README, "Building"), cmocka, Python headers
#   scripts/bootstrap.sh --test   also the debugging tools of make test: clang
#                                 with libFuzzer (fuzz/), valgrind, the i686
#                                 and aarch64 cross compilers with the i386
#                                 and arm64 -dev packages (adds those dpkg
#                                 architectures), qemu-user, debootstrap
#                                 (make test-python-next); and --lint's
#   scripts/bootstrap.sh --lint   also the formatters make lint runs, pinned,
#                                 into .venv: ruff and clang-format (from PyPI,
#                                 so every machine formats alike)
set -euo pipefail
cd "$(dirname "$0")/.."

test_tools=false lint_tools=false
[ "${1:-}" = "--test" ] && test_tools=true lint_tools=true
[ "${1:-}" = "--lint" ] && lint_tools=true

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
# Build dependencies: the header each provides, and the package.
for dep in xxhash.h:libxxhash-dev cmocka.h:libcmocka-dev yajl/yajl_parse.h:libyajl-dev; do
  [ -f "/usr/include/${dep%%:*}" ] || need_apt+=("${dep#*:}")
done
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-venv)
if command -v python3 >/dev/null 2>&1 && ! python3 -c \
    'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    2>/dev/null; then
  need_apt+=(python3-dev)
fi
if $test_tools; then
  command -v clang >/dev/null 2>&1 || need_apt+=(clang)
  [ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ] || need_apt+=(libclang-rt-dev)
  command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
  # a comma-decimal locale (tests/python/test_locale.py builds de_DE with localedef)
  [ -f /usr/share/i18n/locales/de_DE ] || need_apt+=(locales)
  # make test-32bit: the i686 cross compiler and its sanitizer runtimes, and
  # the build dependencies of the i386 architecture (scripts/cross/)
  command -v i686-linux-gnu-gcc >/dev/null 2>&1 ||
    need_apt+=(gcc-i686-linux-gnu libasan8-i386-cross libubsan1-i386-cross)
  # and those runtimes where the i386 loader looks (the -cross packages put
  # them in /usr/i686-linux-gnu/lib, which no ld.so.conf names: every test
  # exited 127 on a machine without them)
  for pkg in libasan8:i386 libubsan1:i386; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
  done
  # make test-aarch64: the aarch64 cross compiler and qemu-user
  command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need_apt+=(gcc-aarch64-linux-gnu)
  command -v qemu-aarch64 >/dev/null 2>&1 || need_apt+=(qemu-user)
  # make test-python-next: a chroot of Debian's stable release, its newer Python
  command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
  for arch in i386 arm64; do
    for pkg in libxxhash-dev libcmocka-dev libyajl-dev; do
      dpkg -s "$pkg:$arch" >/dev/null 2>&1 || need_apt+=("$pkg:$arch")
    done
  done
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "bootstrap: apt-get install ${need_apt[*]}"
  for arch in i386 arm64; do
    if [[ " ${need_apt[*]}" == *":$arch"* ]] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
      $sudo dpkg --add-architecture "$arch"
    fi
  done
  # A mirror caught mid-sync fails one index ("File has unexpected size"):
  # tried again, then the install goes ahead with the indexes that did
  # arrive, and fails by itself if a package it needs is in none of them.
  for attempt in 1 2 3; do
    $sudo apt-get update -qq && break
    [ "$attempt" -lt 3 ] && sleep 20
    echo "bootstrap: apt-get update incomplete (attempt $attempt of 3)" >&2
  done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/meson ] || [ ! -x .venv/bin/ninja ]; then
  echo "bootstrap: creating .venv with meson and ninja"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check 'meson==1.6.1' 'ninja==1.11.1.3'
fi

# The formatters' versions decide the output: change a pin and reformat the
# tree (scripts/format.sh) in the same commit.
RUFF_VERSION=0.17.6
CLANG_FORMAT_VERSION=19.1.7
if $lint_tools && { [ "$(.venv/bin/ruff --version 2>/dev/null)" != "ruff $RUFF_VERSION" ] ||
    ! .venv/bin/clang-format --version 2>/dev/null | grep -q "version $CLANG_FORMAT_VERSION"; }; then
  echo "bootstrap: installing ruff $RUFF_VERSION and clang-format $CLANG_FORMAT_VERSION into .venv"
  .venv/bin/pip install -q --disable-pip-version-check "ruff==$RUFF_VERSION" \
    "clang-format==$CLANG_FORMAT_VERSION"
fi
