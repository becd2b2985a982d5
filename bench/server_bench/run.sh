#!/bin/sh
# bench/server_bench/run.sh - kgym serve throughput and latency, loopback
# only, bounded runs (wrk; `apt-get install wrk`), several stores side by
# side.
#
#   bench/server_bench/run.sh [SECONDS] [STORE ...]
#
# STORE: sqlite (a fresh file, synchronous=full, the default),
# sqlite-normal (sync=normal), redis-always / redis-everysec (a private
# redis-server on a free loopback port with that appendfsync, AOF on), or
# any --store URL ({tmp} is replaced by the run's temp dir). Default:
# "sqlite redis-always", the two with the same promise (an acknowledged
# submission is on disk). THREADS=N passes --threads N to kgym serve.
# PHASES="submit lease" runs only those phases (default: submit batch
# status lease; lease needs tasks queued, so it implies one
# submission phase before it). HOG=N runs N busy-looping processes
# beside the bench for the whole run (CPU contention made repeatable:
# other work on the same CPUs, as in CI); they are killed at the end.
# BATCH=N sends N tasks per /evaluate/batch request (default 100; with
# 64 clients, 100 a request keeps 6,400 tasks in flight, so a request's
# latency is bounded below by 6,400 / throughput). RATE=T paces the
# batch phase to T tasks/s in all (batch.lua), for its latency at that
# throughput instead of at saturation.
#
# For each store, at 64 concurrent connections: submissions one by one
# (POST /evaluate), submissions through POST /evaluate/batch (BATCH tasks
# a request), status reads (GET /status/{id}) and leases by 64 registered
# workers (POST /worker/lease, queue non-empty). Ends with a table of
# requests (or tasks) per second and p99 latency per store.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
KGYM=${KGYM_BIN:-$root/build/kgym}
secs=${1:-10}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- sqlite redis-always
threads=${THREADS:-}
phases=${PHASES:-submit batch status lease}
batch=${BATCH:-100}  # tasks per /evaluate/batch request (batch.lua reads it too)
export BATCH="$batch"
hog=${HOG:-}
top=$(mktemp -d /tmp/kgym-bench-XXXXXX)
pids=""
# (|| true: under set -e a failed kill, of a server already stopped, would
# end the trap before the Redis servers and the temp dir)
trap 'for p in $pids; do kill $p 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$top"' EXIT
summary="$top/summary"
: >"$summary"
i=0
while [ "$i" -lt "${hog:-0}" ]; do
    sh -c 'while :; do :; done' &
    pids="$pids $!"
    i=$((i + 1))
done

want() { case " $phases " in *" $1 "*) return 0 ;; esac; return 1; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# redis-server with appendfsync $1 in dir $2; its URL into redis_url
start_redis() {
    port=$(free_port)
    mkdir -p "$2"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$2" --appendonly yes \
        --appendfsync "$1" --save '' --daemonize no >"$2/log" 2>&1 &
    pids="$pids $!"
    for _ in $(seq 50); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis_url="redis://127.0.0.1:$port/0"
}

# one wrk phase: label for the summary, name, then wrk arguments
run() {
    key=$1 name=$2
    shift 2
    echo "-- $name"
    wrk -t2 -c64 -d"${secs}s" --timeout 10s --latency "$@" >"$tmp/wrk" 2>&1
    grep -E 'Requests/sec|Non-2xx|Socket errors|^ +(50|90|99)%|Latency  ' "$tmp/wrk"
    rps=$(sed -n 's/^Requests\/sec: *//p' "$tmp/wrk")
    p99=$(sed -n 's/^ *99% *//p' "$tmp/wrk")
    echo "$label|$key|$rps|$p99" >>"$summary"
}

bench_store() {
    label=$1 store=$2
    tmp="$top/$label"
    mkdir -p "$tmp"
    store=$(printf '%s' "$store" | sed "s|{tmp}|$tmp|")
    "$KGYM" serve --listen 127.0.0.1:0 --store "$store" \
        ${threads:+--threads $threads} >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    pids="$pids $pid"
    for _ in $(seq 100); do grep -q listening "$tmp/out" 2>/dev/null && break; sleep 0.1; done
    grep -q listening "$tmp/out" || { cat "$tmp/err"; exit 1; }
    url=$(sed -n 's/.*listening on //p' "$tmp/out")
    echo
    echo "== $label: kgym serve at $url, $(sed -n 's/.*: store //p' "$tmp/out")"
    echo "== $(nproc) CPUs, $(uname -sr), wrk -t2 -c64 -d${secs}s${threads:+, --threads $threads}${hog:+, $hog busy loops beside}, load $(cut -d' ' -f1-3 /proc/loadavg)"
    if want submit || { want lease && ! want batch; }; then
        run submit "submit one by one: POST /evaluate" -s "$here/submit.lua" "$url"
    fi
    if want batch; then
        run batch "submit in batches of $batch${RATE:+, paced to $RATE tasks/s}: POST /evaluate/batch (tasks/s = req/s x $batch)" \
            -s "$here/batch.lua" "$url"
    fi
    curl -s -o /dev/null -X POST "$url/evaluate" \
        -d '{"reference_code": "r", "kernel_code": "k", "task_id": "bench-status"}'
    if want status; then
        run status "status reads: GET /status/bench-status" "$url/status/bench-status"
    fi
    if ! want lease; then
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        return
    fi
    # each worker's worker_secret, one a line in id order, for lease.lua
    : >"$tmp/secrets"
    for i in $(seq 0 63); do
        curl -s -X POST "$url/worker/register" \
            -d "{\"worker_id\": \"bw-$i\", \"device\": \"cpu:$i\"}" |
            sed 's/.*"worker_secret": *"\([0-9a-f]*\)".*/\1/' >>"$tmp/secrets"
    done
    export SECRETS="$tmp/secrets"
    depth() { curl -s "$url/queue/status" | sed 's/.*"queue_depth": \([0-9]*\).*/\1/'; }
    echo "   pending before leasing: $(depth)"
    run lease "leases: POST /worker/lease by 64 workers (200 = a task leased)" \
        -s "$here/lease.lua" "$url"
    echo "   pending after leasing: $(depth)"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

for s in "$@"; do
    case $s in
    sqlite) bench_store sqlite-full "sqlite:{tmp}/kgym.db" ;;
    sqlite-normal) bench_store sqlite-normal "sqlite:{tmp}/kgym.db?sync=normal" ;;
    redis-always | redis-everysec)
        start_redis "${s#redis-}" "$top/$s-redis"
        bench_store "$s" "$redis_url" ;;
    *) bench_store "$(printf '%s' "$s" | tr -c 'A-Za-z0-9.-' _)" "$s" ;;
    esac
done

echo
echo "== summary (64 connections; batch: tasks/s = req/s x $batch)"
awk -F'|' -v batch="$batch" '
    { if (!($1 in seen)) { seen[$1] = 1; order[n++] = $1 }
      v[$1, $2] = $3; p[$1, $2] = $4 }
    END {
        printf "%-34s", ""; for (i = 0; i < n; i++) printf " %16s", order[i]; print ""
        split("submit batch status lease", ks, " ")
        split("submissions one by one, req/s|/evaluate/batch, tasks/s|status reads, req/s|leases by 64 workers, req/s", names, "|")
        for (k = 1; k <= 4; k++) {
            printf "%-34s", names[k]
            for (i = 0; i < n; i++) {
                x = v[order[i], ks[k]]; if (ks[k] == "batch") x *= batch
                printf " %16.0f", x
            }
            print ""
            printf "%-34s", "  p99 latency"
            for (i = 0; i < n; i++) printf " %16s", p[order[i], ks[k]]
            print ""
        }
    }' "$summary"
