#!/usr/bin/env bash
# Long fuzz runs: each target for RUNS executions (default 10,000,000), one after the other,
# one process each. New inputs go to $WORK/<target> (not the committed corpus: keep what is worth keeping with
# `cargo +nightly fuzz cmin`); crashes and hangs (-timeout, seconds per input) to artifacts/<target>/.
# Prints one summary line per target: executions, seconds, exec/s, corpus size, crashes.
#
#   fuzz/long-run.sh [target ...]        # RUNS=, WORK=, CARGO_TARGET_DIR= (default /work/target-fuzz) to change
#
# SANITIZER=none builds without AddressSanitizer (cargo-fuzz `-s none`): 2-3x more executions per second. The
# fuzzed crates forbid `unsafe` code, so what ASan adds is checking their dependencies' unsafe code; libFuzzer
# still catches panics, aborts, hangs (-timeout) and memory blow-ups (-rss_limit_mb). Default: address.
set -uo pipefail
cd "$(dirname "$0")"
RUNS=${RUNS:-10000000}
WORK=${WORK:-/tmp/tower-chat-fuzz}
TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-fuzz}
SANITIZER=${SANITIZER:-address}
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(sse openai_stream anthropic_stream responses_stream gemini_stream gateway_request approvals)
for target in "${targets[@]}"; do
  mkdir -p "$WORK/$target" "artifacts/$target"
  log="$WORK/$target.log"
  start=$(date +%s)
  cargo +nightly fuzz run --sanitizer "$SANITIZER" --target-dir "$TARGET_DIR" "$target" "$WORK/$target" "corpus/$target" -- \
    -runs="$RUNS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="artifacts/$target/" >"$log" 2>&1
  status=$?
  took=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
  corpus=$(ls "$WORK/$target" | wc -l)
  crashes=$(ls "artifacts/$target" | grep -c -E '^(crash|timeout|oom|leak)-' || true)
  echo "$target (sanitizer $SANITIZER): exit $status, ${execs:-?} executions in ${took}s (${rate:-?} exec/s), corpus $corpus new + $(ls "corpus/$target" | wc -l) committed, crashes/hangs $crashes"
done
