#!/usr/bin/env bash
# Runs the README's "Using the C library" section as written: its install
# commands from the source tree, then app.c compiled and run with its build
# commands from a scratch folder. The prefix the README names is under $HOME,
# so HOME points into build-readme/ and nothing lands outside the tree.
# Then checks that app found the installed libhurray through hurray.pc's
# rpath, and that the installed CLI reads the file app wrote; then links app.c
# statically with docs/impl/c-ffi.md's line.
# Run by `make test-install` (part of `make test`).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scratch=$root/build-readme
rm -rf "$scratch"
mkdir -p "$scratch/home" "$scratch/work"
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1" >&2; failed=$((failed + 1)); }
finish() { echo "readme-c: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }

# The section's blocks: the sh block with `make install`, the C program
# (app.c), the sh block that compiles it.
if ! python3 - "$scratch" <<'PY'
import re, sys
text = open("README.md", encoding="utf-8").read()
section = text.split("\n## Using the C library\n", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"^```(\w+)\n(.*?)^```", section, re.S | re.M)
install = [b for lang, b in blocks if lang == "sh" and "make install" in b]
build = [b for lang, b in blocks if lang == "sh" and "cc app.c" in b]
program = [b for lang, b in blocks if lang == "c" and b.startswith("/* app.c")]
if len(install) != 1 or len(build) != 1 or len(program) != 1:
    sys.exit("README.md: 'Using the C library' must hold one sh block with 'make install', "
             "one C block starting '/* app.c' and one sh block with 'cc app.c'")
out = sys.argv[1]
open(out + "/install.sh", "w").write(install[0])
open(out + "/build.sh", "w").write(build[0])
open(out + "/work/app.c", "w").write(program[0])
PY
then
  fail "README.md's C section has the expected blocks"
  finish
fi
ok "README.md's C section has the install commands, app.c and the build commands"

# As a user's shell would run them: HOME set, the PATH of a login shell.
{
  echo "set -eo pipefail"
  echo "cd '$root'"
  cat "$scratch/install.sh"
  echo "cd '$scratch/work'"
  cat "$scratch/build.sh"
} >"$scratch/readme.sh"
if env -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH HOME="$scratch/home" bash "$scratch/readme.sh" \
    >"$scratch/readme.log" 2>&1; then
  ok "the README's commands ran (install, cc app.c, ./app)"
else
  tail -30 "$scratch/readme.log" >&2
  fail "the README's commands (log: $scratch/readme.log)"
  finish
fi
tail -3 "$scratch/readme.log"

prefix=$scratch/home/.local
version=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --modversion hurray)
if grep -qx "libhurray $version: layer.0.weight\[2\]\[1\] = 1" "$scratch/readme.log"; then
  ok "./app printed libhurray $version and the dequantized value"
else
  fail "./app's output"
fi
lib=$(ldd "$scratch/work/app" | awk '/libhurray/ {print $3}')
soname=$(readelf -d "$prefix/lib/libhurray.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [ -n "$soname" ] && [ "$lib" = "$prefix/lib/$soname" ]; then
  ok "app loads libhurray from the README's prefix ($lib), by hurray.pc's rpath"
else
  fail "app loads libhurray from '$lib', not $prefix/lib"
fi
missing=""
for f in include/hurray/hurray.h include/hurray/version.h lib/libhurray.so lib/libhurray.a \
         lib/pkgconfig/hurray.pc bin/hurray; do
  [ -e "$prefix/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then
  ok "the prefix holds the headers, libhurray.so/.a, hurray.pc and the CLI"
else
  fail "make install left out:$missing"
fi
if env -i PATH=/usr/bin:/bin "$prefix/bin/hurray" ls "$scratch/work/model.hurray" | grep -q '^layer.0.weight '; then
  ok "the installed hurray CLI lists the file app wrote"
else
  fail "the installed hurray CLI on app's file"
fi
# The program also compiles as strict C11 with the project's warnings.
if (cd "$scratch/work" && PKG_CONFIG_PATH=$prefix/lib/pkgconfig cc -std=c11 -pedantic -Wall -Wextra \
      -Werror app.c -o app-strict $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs hurray)); then
  ok "app.c compiles with -std=c11 -pedantic -Wall -Wextra -Werror"
else
  fail "app.c under -std=c11 -pedantic -Wall -Wextra -Werror"
fi
# docs/impl/c-ffi.md's static link line, as written: the program needs no
# libhurray.so, and hurray.pc names each private library once.
static_line=$(grep -m1 -E '^cc .*# static$' docs/impl/c-ffi.md | sed 's/ *# static$//')
if [ -n "$static_line" ] && (cd "$scratch/work" && export PKG_CONFIG_PATH=$prefix/lib/pkgconfig &&
      eval "$static_line -o app-static" && ! ldd app-static | grep -q libhurray &&
      ./app-static | grep -qx "libhurray $version: layer.0.weight\[2\]\[1\] = 1"); then
  ok "docs/impl/c-ffi.md's static line links app.c with no libhurray.so at run time"
else
  fail "docs/impl/c-ffi.md's static line: '$static_line'"
fi
private=$(sed -n 's/^Libs.private: //p' "$prefix/lib/pkgconfig/hurray.pc" | tr ' ' '\n' | grep -v '^$')
if [ -z "$(printf '%s\n' "$private" | sort | uniq -d)" ]; then
  ok "hurray.pc's Libs.private names each library once"
else
  fail "hurray.pc's Libs.private repeats: $(printf '%s\n' "$private" | sort | uniq -d | tr '\n' ' ')"
fi
finish
