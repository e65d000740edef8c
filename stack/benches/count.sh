#!/usr/bin/env bash
# Instructions per tool conversation for every variant of the stack bench, by callgrind:
# each variant runs LOW and HIGH conversations (after one warm-up); the slope (HIGH - LOW) / (HIGH - LOW
# conversations) is one conversation's cost with start-up removed. Prints one markdown table per shape.
# A shape's optional fifth field runs that many conversations at a time (the concurrent workload, whose `raw`
# splits SSE with memchr); such a shape runs CLOW and CHIGH conversations instead (after a warm-up round of that
# many at once).
#
#   stack/benches/count.sh                 # the base shape, streamed and not, the growth shapes, the concurrent
#   SHAPES="2,1,10,1" stack/benches/count.sh   # rounds,parallel,history,stream[,concurrent] (space-separated)
#   LOW=5 HIGH=25 VARIANTS="raw loop full" stack/benches/count.sh
#
# Needs the bench built first: cargo bench -p tower-chat-stack --bench stack --no-run
set -euo pipefail
cd "$(dirname "$0")/../.."
target_dir=${CARGO_TARGET_DIR:-target}
bin=$(ls -t "$target_dir"/release/deps/stack-* 2>/dev/null | grep -v '\.d$' | head -n 1)
[ -x "$bin" ] || { echo "build it first: cargo bench -p tower-chat-stack --bench stack --no-run" >&2; exit 1; }
LOW=${LOW:-10}
HIGH=${HIGH:-60}
CLOW=${CLOW:-64}
CHIGH=${CHIGH:-256}
VARIANTS=${VARIANTS:-"raw loop loop_tracing loop_approval loop_persistence full"}
SHAPES=${SHAPES:-"2,1,10,1 2,1,10,0 8,1,10,1 32,1,10,1 2,8,10,1 2,1,1000,1 2,1,2,1,32 2,1,2,0,32"}

instructions() { # variant conversations -> Ir
  STACK_COUNT_VARIANT=$1 STACK_COUNT_CONVERSATIONS=$2 \
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" 2>&1 \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p' | tail -n 1
}

echo "binary: $bin; LOW=$LOW HIGH=$HIGH conversations (concurrent: $CLOW, $CHIGH); $(date -u '+%Y-%m-%d %H:%M UTC')"
for shape in $SHAPES; do
  IFS=, read -r rounds parallel history stream concurrent <<<"$shape"
  concurrent=${concurrent:-1}
  export STACK_ROUNDS=$rounds STACK_PARALLEL=$parallel STACK_HISTORY=$history STACK_STREAM=$stream \
    STACK_CONCURRENT=$concurrent
  low_n=$LOW high_n=$HIGH
  [ "$concurrent" -gt 1 ] && low_n=$CLOW high_n=$CHIGH
  echo
  echo "rounds=$rounds parallel=$parallel history=$history stream=$stream concurrent=$concurrent"
  echo
  echo "| variant | Ir ($low_n) | Ir ($high_n) | per conversation | × raw |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  raw=""
  for variant in $VARIANTS; do
    low=$(instructions "$variant" "$low_n")
    high=$(instructions "$variant" "$high_n")
    per=$(( (high - low) / (high_n - low_n) ))
    [ -z "$raw" ] && [ "$variant" = raw ] && raw=$per
    ratio=$([ -n "$raw" ] && awk -v a="$per" -v b="$raw" 'BEGIN { printf "%.3f", a / b }' || echo "?")
    printf '| %s | %s | %s | %s | %s |\n' "$variant" "$low" "$high" "$per" "$ratio"
  done
done
