#!/usr/bin/env bash
# One device call: bench/device/call.sh NAME SECONDS COMMAND...
# Sources env.sh, runs COMMAND (a bench script) with OUT pointed at a
# scratch folder under the time limit, then hands back to the device's $OUT
# what the tool can carry (8 files): NAME.log (the whole output), NAME.tgz
# (every file the script wrote) and up to 5 of its .txt summaries.
set -u
name=$1 limit=$2; shift 2
cd "$(dirname "$0")/../.." || exit 2
back=${OUT:-bench/results/device-$name}
mkdir -p "$back"
. bench/device/env.sh
export OUT=/tmp/kgym-out-$name
rm -rf "$OUT"; mkdir -p "$OUT"
start=$(date +%s)
timeout --kill-after=20 "$limit" "$@" > >(tee "$back/$name.log") 2>&1
rc=$?
echo "# $name: exit $rc after $(( $(date +%s) - start )) s (limit $limit s)" | tee -a "$back/$name.log"
tar czf "$back/$name.tgz" -C "$OUT" . 2>/dev/null
find "$OUT" -maxdepth 3 -name '*.txt' -size -4M | head -5 | while read -r f; do
    cp "$f" "$back/$name-$(basename "$f")"
done
exit $rc
