#!/usr/bin/env bash
# Fills the ignored .device/ for a device call: the shared libraries that
# build/kgym links (the H200 image lacks some; env.sh uses only those it
# lacks), and optionally a build of an earlier commit for side-by-side runs.
#   bench/device/pack.sh [PREV_COMMIT]   (run here, after make)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/kgym ] || { echo "pack: build/kgym missing: run make first" >&2; exit 1; }
mkdir -p .device/lib
ldd build/kgym build/libkgym_sandbox.so | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -E "/lib(jansson|microhttpd|hiredis|seccomp|sqlite3|curl|nghttp2|idn2|rtmp|ssh2|psl)\.so" |
    while read -r l; do cp -L "$l" .device/lib/; done
if [ $# -ge 1 ]; then
    prev=$1 t=$(mktemp -d)
    git worktree add -q --detach "$t" "$prev"
    make -C "$t" -j2 all >/dev/null
    rm -rf .device/build-prev && cp -r "$t/build" .device/build-prev
    # the harness and python of that commit, for runs that need its judge
    rm -rf .device/prev-src && mkdir -p .device/prev-src
    cp -r "$t/harness" "$t/python" "$t/scripts" "$t/problems" .device/prev-src/
    git worktree remove --force "$t"
fi
du -sh .device/* | sed 's/^/pack: /'
