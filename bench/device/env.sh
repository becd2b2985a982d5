# Sourced at the start of every device call (bench/*/run.sh do it):
#   . bench/device/env.sh
# Puts the carried build on PATH, the carried shared libraries the device
# lacks on LD_LIBRARY_PATH, and the tree's Python packages on PYTHONPATH.
KGYM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export KGYM_ROOT
if [ -d "$KGYM_ROOT/.device/lib" ]; then
    # real copies inside the tree (not links, not /tmp): the candidate's own
    # root shows the LD_LIBRARY_PATH entries, and its /tmp is private
    _kg_missing="$KGYM_ROOT/.device/missing-libs"
    mkdir -p "$_kg_missing"
    for _l in "$KGYM_ROOT"/.device/lib/*.so*; do
        _n=$(basename "$_l")
        ldconfig -p | grep -q "^[[:space:]]*$_n " || cp -L "$_l" "$_kg_missing/$_n"
    done
    chmod -R a+rX "$KGYM_ROOT/.device"
    export LD_LIBRARY_PATH="$_kg_missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# the first CUDA use on a machine creates /dev/nvidia-uvm; a candidate's
# own /dev is made from the nodes that exist when it starts
if command -v nvidia-smi >/dev/null 2>&1 && [ ! -e /dev/nvidia-uvm ]; then
    python3 -c 'import torch; torch.cuda.init()' 2>/dev/null || true
fi
export PATH="$KGYM_ROOT/build:$PATH"
export PYTHONPATH="$KGYM_ROOT/harness:$KGYM_ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export KGYM_BIN="$KGYM_ROOT/build/kgym" KGYM_LIB="$KGYM_ROOT/build/libkgym.so"
export PYTHONUNBUFFERED=1
export OUT="${OUT:-$KGYM_ROOT/bench/results}"
# candidates run as nobody and import from the tree
_d="$KGYM_ROOT"; while [ "$_d" != / ]; do chmod o+x "$_d" 2>/dev/null; _d=$(dirname "$_d"); done
echo "# device env: $(date -u +%FT%TZ) commit ${KGYM_COMMIT:-$(git -C "$KGYM_ROOT" rev-parse --short HEAD 2>/dev/null || echo "?")}" \
     "missing libs: $(ls "$KGYM_ROOT/.device/missing-libs" 2>/dev/null | tr '\n' ' ')"
"$KGYM_ROOT/build/kgym" --version >/dev/null 2>&1 || echo "# device env: build/kgym does not start: $("$KGYM_ROOT/build/kgym" --version 2>&1 | head -2)"
