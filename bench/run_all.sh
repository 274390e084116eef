#!/usr/bin/env bash
# The performance benchmarks, one after another, on loopback (see bench/README.md).
#   bench/run_all.sh           full runs (fan-out ~8-10 min, the others 1-3 min each)
#   bench/run_all.sh --quick   smaller sweeps (~5 min in all)
# Results: bench/results/local/{fanout,connections,replay,turn_overhead}[-quick].json (the
# committed results the docs are made from: python -m bench.report --run)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
QUICK=()
if [ "${1:-}" = "--quick" ]; then QUICK=(--quick); fi
"$PY" -c "import socketio" 2>/dev/null || { echo "pip install -e '.[bench]' first" >&2; exit 2; }
"$PY" bench/fanout.py "${QUICK[@]}"
"$PY" bench/connections.py "${QUICK[@]}"
"$PY" bench/replay.py "${QUICK[@]}"
"$PY" bench/turn_overhead.py "${QUICK[@]}"
