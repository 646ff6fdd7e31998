"""Padding of packed training rows by row width (`train.pack_width`): Contextual training texts
of real recipes, tokenized as the training job does, packed first-fit longest first into rows of
the block and of two and four blocks. Wider rows pair examples longer than half the block, which
rows of the block cannot. Prints one table, the padding of 2-block rows against 1-block rows last.

    python benchmarks/packing_padding.py                                     # the bundled sample
    python benchmarks/packing_padding.py --recipes ../shared/data/web_recipes/recipes.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def main() -> None:
    """Pack the recipes' examples at each width and print the padding."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", help="JSON-lines recipes (default: the bundled sample)")
    parser.add_argument(
        "--block", type=int, default=256, help="the block (train.block_size.contextual)"
    )
    parser.add_argument("--limit", type=int, default=300, help="recipes read at most")
    parser.add_argument("--out", help="JSON file for the figures")
    args = parser.parse_args()

    import numpy as np
    import pyarrow as pa
    from gpu_speed import contextual_texts, read_recipes

    from rrt.modelling.batching import tokenize_table
    from rrt.modelling.models import train_tiny_tokenizer
    from rrt.modelling.packing import pack_rows

    if args.recipes and not os.path.exists(args.recipes):
        sys.exit(f"packing_padding: error: no such file: {args.recipes}")
    recipes = read_recipes(args.recipes)[: args.limit]
    texts = contextual_texts(recipes)
    tokenizer = train_tiny_tokenizer(texts, 8000)
    table = tokenize_table(
        pa.table({"text": texts}), tokenizer.backend_tokenizer.to_str(), "contextual", args.block
    )
    lengths = [n for n in table.column("length").to_pylist() if n]
    examples = [(np.zeros(n, dtype=np.int32), 0) for n in lengths]
    tokens = sum(lengths)
    rows_out = []
    print(
        f"{len(recipes)} recipes, {len(texts)} texts, {len(examples)} examples within the block of {args.block}, "
        f"mean {tokens / max(1, len(examples)):.1f} tokens"
    )
    print(
        "| row width | rows | the fewest rows that hold the tokens | padding |\n| --- | --- | --- | --- |"
    )
    for blocks in (1, 2, 4):
        width = blocks * args.block
        rows = pack_rows(examples, width)
        padding = 1 - tokens / (len(rows) * width)
        rows_out.append(
            {
                "width": width,
                "rows": len(rows),
                "lower_bound": -(-tokens // width),
                "padding": round(padding, 4),
            }
        )
        print(f"| {width} | {len(rows)} | {-(-tokens // width)} | {padding:.3f} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "recipes": len(recipes),
                    "examples": len(examples),
                    "block": args.block,
                    "rows": rows_out,
                },
                handle,
                indent=1,
            )
    one, two = rows_out[0]["padding"], rows_out[1]["padding"]
    print(
        f"padding of {2 * args.block}-token rows against {args.block}-token rows: {two:.3f} / {one:.3f} = "
        f"{two / one if one else float('nan'):.2f}"
    )


if __name__ == "__main__":
    main()
