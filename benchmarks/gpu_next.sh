#!/bin/sh
# The next GPU measurement as one call of about 9 minutes on one H100 or H200: what
# benchmarks/RESULTS.md still lacks on a GPU, most wanted first.
#   1. Decoding against the fair library baseline (benchmarks/decode_baseline.py: our graph plan
#      against batched generate with a static cache, on the same prompts and rounds), unguarded and
#      with --constrained: the graph plan stays only if it shows 1.3x. It needs a trained model and
#      prepared data, which nothing here downloads: DECODE_MODEL (default .gpu/model) and DECODE_DATA
#      (default .gpu/prepared), copied along with .gpu; without the model folder both are recorded
#      as skipped in decode_baseline.jsonl. Each call gets at most DECODE_S seconds (150), and
#      their time comes off gpu_speed.py's budget (BUDGET, 550 s in all).
#   2. Serving: the service's batching rows in-process by the device's decoding plan (the graph
#      plan on CUDA): one recipe at a time, whole batches, continuous through 8 slots on 32 recipes
#      and 16 slots on 64, steps of real lengths (--stop-share), on real recipes when
#      .gpu/recipes.jsonl is there: the 5x target.
#   3. Training at micro-batch 128, on the real recipes' Contextual texts when .gpu/recipes.jsonl is
#      there (else the bundled sample's): the padded baseline (rerun), packed + compile with the LM head
#      padded to train.pad_vocab_to as training pads it, variable-length attention in rows twice the
#      block (micro-batch 64) and in rows of the block, and the LM head at the labelled positions
#      against every position (the loss on the target).
# Rows that would not fit the budget are recorded as skipped; every row is written when measured.
#
#   sh benchmarks/carry_packages.sh .venv/lib/python3.11/site-packages 3.12   # here, once: fills .gpu/
#   sh benchmarks/gpu_next.sh results/                                        # there, with .gpu copied along
#   PYTHON=.venv/bin/python DECODE_DEVICE=cpu DECODE_MODEL=out/demo/grounded_rule/model DECODE_DATA=out/demo/prepared \
#       sh benchmarks/gpu_next.sh /tmp/gn --model-shape tiny --device cpu      # a try on a CPU
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
BUDGET=${BUDGET:-550}
DECODE_MODEL=${DECODE_MODEL:-.gpu/model}
DECODE_DATA=${DECODE_DATA:-.gpu/prepared}
DECODE_DEVICE=${DECODE_DEVICE:-cuda}
STARTED=$(date +%s)
DECODE_S=${DECODE_S:-150}  # the most seconds of each decode_baseline.py call; its runs print as they end
: >"$DEST/decode_baseline.jsonl"
if [ -d "$DECODE_MODEL" ]; then
    for guard in "" --constrained; do
        # A call that fails or runs out of time is noted, and the plan goes on.
        timeout "$DECODE_S" "$PYTHON" benchmarks/decode_baseline.py --model "$DECODE_MODEL" \
            --data "$DECODE_DATA" --recipes 32 --device "$DECODE_DEVICE" $guard \
            >>"$DEST/decode_baseline.jsonl" 2>>"$DEST/decode_baseline.log" \
            || echo "{\"decode_baseline\": \"${guard:-unguarded}\", \"failed\": \"exit $?, see decode_baseline.log\"}" \
                >>"$DEST/decode_baseline.jsonl"
    done
else
    echo "{\"decode_baseline\": \"skipped\", \"why\": \"no model folder at $DECODE_MODEL\"}" \
        >>"$DEST/decode_baseline.jsonl"
fi
cat "$DEST/decode_baseline.jsonl"
LEFT=$((BUDGET - ($(date +%s) - STARTED)))
[ "$LEFT" -gt 60 ] || LEFT=60
set -- --sections serve,train --train-rows padded,compile,varlen-wide,varlen,target \
    --slots 8,16 --micro-batch 128 --engines "" --budget-s "$LEFT" --out "$DEST/gpu_next.jsonl" "$@"
if [ -f .gpu/recipes.jsonl ]; then
    set -- --serve-recipes-file .gpu/recipes.jsonl --train-recipes-file .gpu/recipes.jsonl "$@"
fi
exec "$PYTHON" benchmarks/gpu_speed.py "$@"
