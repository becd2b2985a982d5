#!/bin/sh
# bench/server_bench/run.sh - kgym serve throughput and latency, loopback
# only, bounded runs (wrk; `apt-get install wrk`).
#
#   bench/server_bench/run.sh [STORE_URL] [SECONDS]
#
# STORE_URL: default a fresh sqlite:TMP/kgym.db (sync=full); e.g.
# "sqlite:{tmp}/kgym.db?sync=normal" or redis://127.0.0.1:6390/0
# ({tmp} is replaced by the run's temp dir). Measures, at 64 concurrent
# connections: submissions one by one (POST /evaluate), submissions through
# POST /evaluate/batch (100 tasks a request), status reads (GET /status/{id})
# and leases by 64 registered workers (POST /worker/lease, queue non-empty).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
KGYM=${KGYM_BIN:-$root/build/kgym}
secs=${2:-10}
tmp=$(mktemp -d /tmp/kgym-bench-XXXXXX)
store=${1:-}
[ -n "$store" ] || store="sqlite:$tmp/kgym.db"
store=$(printf '%s' "$store" | sed "s|{tmp}|$tmp|")
threads=${THREADS:-}

"$KGYM" serve --listen 127.0.0.1:0 --store "$store" ${threads:+--threads $threads} \
    >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q listening "$tmp/out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$tmp/out" || { cat "$tmp/err"; exit 1; }
url=$(sed -n 's/.*listening on //p' "$tmp/out")
echo "== kgym serve at $url, $(sed -n 's/.*: store //p' "$tmp/out")"
echo "== $(nproc) CPUs, $(uname -sr), wrk -t2 -c64 -d${secs}s"

run() { # name, then wrk arguments
    name=$1
    shift
    echo "-- $name"
    wrk -t2 -c64 -d"${secs}s" --timeout 10s --latency "$@" | \
        grep -E 'Requests/sec|Non-2xx|Socket errors|^ +(50|90|99)%|Latency  '
}

run "submit one by one: POST /evaluate" -s "$here/submit.lua" "$url"
run "submit in batches of 100: POST /evaluate/batch (tasks/s = req/s x 100)" \
    -s "$here/batch.lua" "$url"
id=$(curl -s -X POST "$url/evaluate" -d '{"reference_code": "r", "kernel_code": "k", "task_id": "bench-status"}' | sed 's/.*"task_id": "\([^"]*\)".*/\1/')
run "status reads: GET /status/$id" "$url/status/$id"
for i in $(seq 0 63); do
    curl -s -o /dev/null -X POST "$url/worker/register" \
        -d "{\"worker_id\": \"bw-$i\", \"device\": \"cpu:$i\"}"
done
echo "   pending before leasing: $(curl -s "$url/queue/status" | sed 's/.*"queue_depth": \([0-9]*\).*/\1/')"
run "leases: POST /worker/lease by 64 workers (200 = a task leased)" \
    -s "$here/lease.lua" "$url"
echo "   pending after leasing: $(curl -s "$url/queue/status" | sed 's/.*"queue_depth": \([0-9]*\).*/\1/')"
