#!/usr/bin/env bash
# Fails if the shared library exports a symbol without the hurray_ prefix.
set -euo pipefail
lib="$1"
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^hurray_' || true)
if [ -n "$bad" ]; then
  echo "exported symbols without the hurray_ prefix in $lib:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "exports of $(basename "$lib"): $(nm -D --defined-only "$lib" | wc -l) symbols, all hurray_*"
