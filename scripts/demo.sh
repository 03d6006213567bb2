#!/usr/bin/env bash
# `make demo`: the whole loop on bundled defaults (`make setup` has built everything).
#   profile proxy v1 (several runs) and v2 -> build-dataset -> train on v1
#   -> report v1 -> v2 -> characterize -> export -> a C++ consumer via find_package
#   -> v2 again, with the exported model predicting inside the sampler (online)
#   -> a full trace of v2 through the LLAMA heap simulator (simulate)
#   -> v2 on real memory under each allocator (`lifetime run`: glibc, jemalloc, mimalloc,
#      gperftools' tcmalloc, LLAMA alone, LLAMA + the exported model)
# The summary ends with what the proxy shows: the simulated heap in one line, then the
# real allocators' peak RSS and wall time side by side.
# Knobs: DEMO_SECONDS (per profiled run, default 12), DEMO_RUNS (v1 runs, default 3),
# DEMO_TRACE_SECONDS (the simulated full trace, default 15),
# DEMO_ALLOC_SECONDS (each allocator's run, default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=out/demo
SECONDS_PER_RUN=${DEMO_SECONDS:-12}
RUNS=${DEMO_RUNS:-3}
TRACE_SECONDS=${DEMO_TRACE_SECONDS:-15}
ALLOC_SECONDS=${DEMO_ALLOC_SECONDS:-5}
PROXY=build/workloads/proxy_server
START=$(date +%s)
step() { echo; echo "== [$(( $(date +%s) - START ))s] $*"; }

rm -rf "$OUT"
mkdir -p "$OUT/logs"

# The profiled runs are independent and the proxy is paced (about a fifth of a core each),
# so they run side by side, each into its own log, shown in order once all have ended.
PIDS=() LOGS=()
trap '[ ${#PIDS[@]} -eq 0 ] || kill "${PIDS[@]}" 2> /dev/null' EXIT
background() { local log=$1; shift; "$@" > "$log" 2>&1 & PIDS+=("$!"); LOGS+=("$log"); }
step "profiling side by side: proxy_server_v1 x$RUNS and proxy_server_v2 (${SECONDS_PER_RUN}s each), and a full trace of v2 for simulate (${TRACE_SECONDS}s)"
for i in $(seq 1 "$RUNS"); do
  background "$OUT/logs/profile-v1-$i.log" $BIN/lifetime profile --out "$OUT/profiles/v1" \
    --version-label v1 -- "$PROXY/proxy_server_v1" --seconds "$SECONDS_PER_RUN"
done
background "$OUT/logs/profile-v2.log" $BIN/lifetime profile --out "$OUT/profiles/v2" \
  --version-label v2 -- "$PROXY/proxy_server_v2" --seconds "$SECONDS_PER_RUN"
background "$OUT/logs/profile-v2-full.log" $BIN/lifetime profile --full-trace \
  --out "$OUT/profiles/v2-full" --version-label v2 -- "$PROXY/proxy_server_v2" --seconds "$TRACE_SECONDS"
failed=0
for k in "${!PIDS[@]}"; do
  wait "${PIDS[$k]}" || failed=$?
  cat "${LOGS[$k]}"
done
PIDS=()
[ "$failed" -eq 0 ] || exit "$failed"
$BIN/lifetime inspect --samples 0 "$OUT"/profiles/v2/*.ltprof

step "build-dataset (Beam, DirectRunner): v1, then v2 cut like v1 (its wrappers, vocabulary)"
$BIN/lifetime build-dataset --profiles "$OUT/profiles/v1/*.ltprof" --version-label v1 \
  --out "$OUT/datasets/v1"
$BIN/lifetime build-dataset --profiles "$OUT/profiles/v2/*.ltprof" --version-label v2 \
  --like "$OUT/datasets/v1" --out "$OUT/datasets/v2"

step "train on v1 (refit on all of v1 once early stopping has picked the epochs)"
$BIN/lifetime train --dataset "$OUT/datasets/v1" --out "$OUT/model" --refit

step "report: trained on v1, tested on v2"
$BIN/lifetime report --model "$OUT/model" --train "$OUT/datasets/v1" \
  --test "$OUT/datasets/v2" --out "$OUT/report"

step "characterize v1 and v2"
$BIN/lifetime characterize --profiles "$OUT/profiles/*/*.ltprof" --out "$OUT/characterize"

step "export: XLA AOT -> static library + CMake package"
$BIN/lifetime export "$OUT/model" --out "$OUT/export"

step "a C++ consumer built with find_package(LifetimeModel)"
cmake -S export/examples/consumer -B "$OUT/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PWD/$OUT/export" > /dev/null
cmake --build "$OUT/consumer" > /dev/null
"$OUT/consumer/lifetime_consumer"

step "online: proxy_server_v2 with the exported model inside the sampler"
$BIN/lifetime profile --model "$OUT/export" --out "$OUT/profiles/v2-online" --version-label v2 -- \
  "$PROXY/proxy_server_v2" --seconds "$SECONDS_PER_RUN"
$BIN/lifetime evaluate-online --model "$OUT/model" "$OUT"/profiles/v2-online/*.ltprof --json "$OUT/online.json"

step "simulate: the full trace of proxy_server_v2 (${TRACE_SECONDS}s) through LLAMA and a TCMalloc-like baseline"
$BIN/lifetime simulate "$OUT"/profiles/v2-full/*.ltprof --train "$OUT/datasets/v1" \
  --model "$OUT/export" --out "$OUT/simulate"

step "run: proxy_server_v2 (${ALLOC_SECONDS}s) on real memory under each allocator (lifetime run)"
# --no-drain: every site allocates until the end (a drained 5 s run opens sessions only in
# its first 1.25 s); the proxy is paced, so each run takes its seconds whatever the allocator.
$BIN/python scripts/demo_summary.py --run-allocators "$OUT" --model "$OUT/export" -- \
  "$PROXY/proxy_server_v2" --seconds "$ALLOC_SECONDS" --no-drain

step "done in $(( $(date +%s) - START ))s"
$BIN/python scripts/demo_summary.py "$OUT"
