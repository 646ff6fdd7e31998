#!/bin/sh
# The next GPU measurement as one call of about 9 minutes on one H100 or H200: what
# benchmarks/RESULTS.md ("The next GPU run") still lacks after the H200 run of 2026-11-28, most wanted first.
#   1. Serving: the service's batching rows in-process (one recipe at a time, whole batches, continuous
#      through 8 slots on 32 recipes and 16 slots on 64, round- and step-level) with the graph step and
#      the shared prompt cache, steps of real lengths (--stop-share), on real recipes when
#      .gpu/recipes.jsonl is there: the 5x target (4.91x through 8 slots on 2026-11-28).
#   2. Training at micro-batch 128, on the real recipes' Contextual texts when .gpu/recipes.jsonl is
#      there (else the bundled sample's): the padded baseline (rerun), packed + compile with the LM head
#      padded to train.pad_vocab_to as training pads it (its steps timed again with a wait for the
#      device after each, as the training job's loop waited before), variable-length attention in
#      rows twice the block (micro-batch 64, head padded), Liger's fused linear cross-entropy (never
#      measured), then packed + compile with the head unpadded (the 37.6% row of 2026-11-28, like
#      for like).
# Rows that would not fit the budget are recorded as skipped; every row is written when measured.
#
#   sh benchmarks/carry_packages.sh .venv/lib/python3.11/site-packages 3.12   # here, once: fills .gpu/
#   sh benchmarks/gpu_next.sh results/                                        # there, with .gpu copied along
#   PYTHON=.venv/bin/python sh benchmarks/gpu_next.sh /tmp --model-shape tiny --device cpu   # a try on a CPU
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
set -- --sections serve,train --train-rows padded,compile,unpadded-head,varlen-wide --fused-ce liger \
    --slots 8,16 --micro-batch 128 --engines "" --budget-s 550 --out "$DEST/gpu_next.jsonl" "$@"
if [ -f .gpu/recipes.jsonl ]; then
    set -- --serve-recipes-file .gpu/recipes.jsonl --train-recipes-file .gpu/recipes.jsonl "$@"
fi
exec "$PYTHON" benchmarks/gpu_speed.py "$@"
