#!/usr/bin/env bash
# `make demo`: the main job on bundled defaults.  Today: profile the proxy
# workload (v1 and v2) under the sampler and summarize each profile.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
OUT=out/demo
SECONDS_PER_RUN=${DEMO_SECONDS:-12}
rm -rf "$OUT/profiles"
mkdir -p "$OUT/profiles"
for v in v1 v2; do
  echo "== profiling proxy_server_$v for ${SECONDS_PER_RUN}s"
  $BIN/lifetime profile --out "$OUT/profiles/$v" --version-label "proxy-$v" -- \
    build/workloads/proxy_server/proxy_server_$v --seconds "$SECONDS_PER_RUN"
done
echo "== summaries"
$BIN/lifetime inspect --samples 3 "$OUT"/profiles/*/*.ltprof
echo "profiles are in $OUT/profiles"
