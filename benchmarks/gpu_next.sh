#!/bin/sh
# The next GPU measurement as one call of about 9 minutes on one H100 or H200: what
# benchmarks/RESULTS.md ("The next GPU run") still lacks, most wanted first.
#   1. Rewriting: the generate loop (the baseline, rerun), then our graph-captured engine with the
#      copied and the shared prompt cache, a token check, then the service's batching rows (one
#      recipe at a time, whole batches, continuous through 8 slots round- and step-level) with the
#      faster cache, steps of real lengths (--stop-share), on real recipes when .gpu/recipes.jsonl
#      is there.
#   2. Training at micro-batch 128, on the real recipes' Contextual texts when .gpu/recipes.jsonl is
#      there (else the bundled sample's): the padded baseline (rerun), packed + compile (the 36.5% MFU
#      row), then variable-length attention in rows twice the block (micro-batch 64), the fused
#      linear cross-entropy of cut-cross-entropy and of liger-kernel, the wide varlen rows with
#      cut-cross-entropy's loss (both at once), and variable-length attention in rows of the block.
#   3. If time is left: a Llama of SmolLM2-135M's shape rewriting with the growing cache against
#      the graph-captured static step (what decode_step auto picks on CUDA for the Llama family).
# Rows that would not fit the budget are recorded as skipped; every row is written when measured.
#
#   sh benchmarks/carry_packages.sh .venv/lib/python3.11/site-packages 3.12   # here, once: fills .gpu/
#   sh benchmarks/gpu_next.sh results/                                        # there, with .gpu copied along
#   PYTHON=.venv/bin/python sh benchmarks/gpu_next.sh /tmp --model-shape tiny --device cpu \
#       --rewrite-modes static,static-shared                                  # a try on a CPU
#
# Later flags override the plan's (gpu_speed.py reads the last of each).
set -e
cd "$(dirname "$0")/.."
DEST=${1:?usage: gpu_next.sh OUTPUT_FOLDER [gpu_speed.py flags]}
shift
mkdir -p "$DEST"
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# The copied packages (built for the GPU machine's Python) only where this Python lacks them.
if ! "$PYTHON" -c "import pydantic" 2>/dev/null; then
    export PYTHONPATH="$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH}"
fi
set -- --sections rewrite,train,llama --rewrite-modes graph,graph-shared --train-rows padded,compile,varlen-wide,combined,varlen --fused-ce cce,liger \
    --slots 8 --micro-batch 128 --engines "" --budget-s 520 --out "$DEST/gpu_next.jsonl" "$@"
if [ -f .gpu/recipes.jsonl ]; then
    set -- --serve-recipes-file .gpu/recipes.jsonl --train-recipes-file .gpu/recipes.jsonl "$@"
fi
exec "$PYTHON" benchmarks/gpu_speed.py "$@"
