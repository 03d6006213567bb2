#!/usr/bin/env bash
# `make demo`: the whole loop on bundled defaults (`make setup` has built everything).
#   profile proxy v1 (several runs) and v2 -> build-dataset -> train on v1
#   -> report v1 -> v2 -> characterize -> export -> a C++ consumer via find_package
#   -> v2 again, with the exported model predicting inside the sampler (online)
#   -> a full trace of v2 through the LLAMA heap simulator (simulate)
# Knobs: DEMO_SECONDS (per profiled run, default 12), DEMO_RUNS (v1 runs, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=out/demo
SECONDS_PER_RUN=${DEMO_SECONDS:-12}
RUNS=${DEMO_RUNS:-3}
PROXY=build/workloads/proxy_server
START=$(date +%s)
step() { echo; echo "== [$(( $(date +%s) - START ))s] $*"; }

rm -rf "$OUT"
mkdir -p "$OUT"

for i in $(seq 1 "$RUNS"); do
  step "profiling proxy_server_v1, run $i of $RUNS (${SECONDS_PER_RUN}s)"
  $BIN/lifetime profile --out "$OUT/profiles/v1" --version-label v1 -- \
    "$PROXY/proxy_server_v1" --seconds "$SECONDS_PER_RUN"
done
step "profiling proxy_server_v2 (${SECONDS_PER_RUN}s)"
$BIN/lifetime profile --out "$OUT/profiles/v2" --version-label v2 -- \
  "$PROXY/proxy_server_v2" --seconds "$SECONDS_PER_RUN"
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

step "simulate: a full trace of proxy_server_v2 (4s) through LLAMA and a TCMalloc-like baseline"
$BIN/lifetime profile --full-trace --out "$OUT/profiles/v2-full" --version-label v2 -- \
  "$PROXY/proxy_server_v2" --seconds 4
$BIN/lifetime simulate "$OUT"/profiles/v2-full/*.ltprof --train "$OUT/datasets/v1" \
  --model "$OUT/export" --out "$OUT/simulate"

step "done in $(( $(date +%s) - START ))s"
$BIN/python scripts/demo_summary.py "$OUT"
