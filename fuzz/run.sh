#!/usr/bin/env bash
# Runs libFuzzer targets for a bounded time (fuzz/README.md).
#
#   fuzz/run.sh BUILD_DIR SECONDS [TARGET...]
#
# BUILD_DIR is a `-Dfuzzing=true` build (make fuzz makes build-fuzz). Each
# target (default: all seven) runs for SECONDS with FUZZ_JOBS parallel
# workers (default 1), starting from the committed corpus fuzz/corpus/TARGET
# and writing what it discovers to BUILD_DIR/corpus/TARGET (the committed
# corpus is never written). Crashes, leaks, timeouts and out-of-memory inputs
# go to fuzz/crashes/TARGET/. Extra libFuzzer flags may be given in
# FUZZ_FLAGS. Prints each target's executions; exits non-zero if any target
# found something.
set -uo pipefail
cd "$(dirname "$0")/.."

build=${1:?usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_descriptor_decode fuzz_capsule_placement fuzz_dequantize fuzz_file_reader fuzz_safetensors fuzz_gguf fuzz_cli)
jobs=${FUZZ_JOBS:-1}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

root=$(pwd)
case $build in /*) ;; *) build=$root/$build ;; esac
status=0
for t in "${targets[@]}"; do
  case $t in
    fuzz_descriptor_decode) max_len=4096 ;;
    *) max_len=8192 ;;
  esac
  work=$build/corpus/$t
  crashes=$root/fuzz/crashes/$t
  logs=$build/fuzz-logs/$t
  mkdir -p "$work" "$crashes" "$logs"
  rm -f "$logs"/*.log
  echo "fuzz: $t for ${seconds}s (${jobs} job(s), max_len $max_len)"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -max_len="$max_len"
        -print_final_stats=1 -artifact_prefix="$crashes/" ${FUZZ_FLAGS:-})
  if [ "$jobs" -gt 1 ]; then
    # Each worker logs to $logs/fuzz-N.log; they share the work corpus.
    (cd "$logs" && "$build/fuzz/$t" -jobs="$jobs" -workers="$jobs" "${args[@]}" \
        "$work" "$root/fuzz/corpus/$t" >/dev/null 2>&1)
  else
    "$build/fuzz/$t" "${args[@]}" "$work" "$root/fuzz/corpus/$t" >"$logs/fuzz-0.log" 2>&1
  fi
  rc=$?
  runs=$(cat "$logs"/*.log 2>/dev/null | awk '/stat::number_of_executed_units/ {n += $2} END {print n + 0}')
  echo "fuzz: $t: $runs executions"
  if [ $rc -ne 0 ] || grep -qE "^==[0-9]+==ERROR|^SUMMARY|ERROR: libFuzzer" "$logs"/*.log; then
    echo "fuzz: $t FAILED; inputs in fuzz/crashes/$t, log:" >&2
    grep -hE -A30 "^==[0-9]+==ERROR|ERROR: libFuzzer|check failed" "$logs"/*.log | head -60 >&2
    status=1
  fi
done
exit $status
