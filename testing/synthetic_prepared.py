"""Synthetic prepared folders: N step pairs in the layout jobs/train.py reads.

    python testing/synthetic_prepared.py --rows 2000000 --output /tmp/prepared-2m

Writes <output>/step_pairs/<variant>/{train,dev,test}/part-NNNNN.parquet with the columns
jobs/prepare_data.py writes (rrt.corpus.step_pair_table), and a stats.json. Rows are built from the
bundled sample recipes the way the job builds them: a source recipe's title, ingredients and
steps up to n, then target steps rewritten by the substitution guide, for one constraint.
Lengths vary with the step reached. Rows come a dish at a time, as the job's files do, and a
dish lands in one split (about 80/10/10).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pyarrow as pa
import pyarrow.parquet as pq

from rrt.corpus import formats
from rrt.corpus.step_pair_table import STEP_PAIR_SCHEMA
from rrt.recipes.lexicon import CONSTRAINTS
from rrt.recipes.loaders import read_recipes
from rrt.recipes.substitutions import substitute_recipe

SAMPLE = os.path.join(ROOT, "data", "sample", "recipes.jsonl")
SPLITS = ("train", "dev", "test")
# prepare_data's step-pair files hold about a thousand recipe pairs' rows, a few thousand.
ROWS_PER_FILE = 4000
VARIANTS = ("contextual", "no_context")


def _split(dish: str, seed: int) -> str:
    point = int.from_bytes(hashlib.sha1(f"{seed}:{dish}".encode()).digest()[:8], "big") / 2**64
    return "train" if point < 0.8 else "dev" if point < 0.9 else "test"


def _versions(recipes: list) -> list[tuple]:
    """(recipe, constraint, target steps) for every sample recipe a constraint's guide changes."""
    out = []
    for recipe in recipes:
        for constraint in CONSTRAINTS:
            target = substitute_recipe(recipe, constraint).recipe
            if list(target.steps) != list(recipe.steps):
                out.append((recipe, constraint, list(target.steps)))
    return out


def dish_rows(
    version: tuple, dish: int, split: str, variant: str, rng: random.Random
) -> list[dict]:
    """The step pairs of one synthetic recipe pair: every source step linked to its target step,
    the title marked with the dish number so no two dishes write the same texts."""
    recipe, constraint, target = version
    title = f"{recipe.title} {dish}"
    steps = list(recipe.steps)
    source_id, target_id = f"{recipe.id}~{dish}", f"{recipe.id}~{dish}~{constraint}"
    rows = []
    for n in range(min(len(steps), len(target))):
        if variant == "no_context":
            text = formats.no_context(title, steps[n], target[n], constraint)
        else:
            text = formats.contextual(
                title, list(recipe.ingredients), steps[: n + 1], target[: n + 1], constraint
            )
        rows.append(
            {
                "source_id": source_id,
                "target_id": target_id,
                "constraint": constraint,
                "split": split,
                "source_step": n,
                "target_steps": [n],
                "score": round(rng.uniform(50, 100), 1),
                "text": text,
            }
        )
    return rows


def write_prepared(
    output: str,
    rows: int,
    variant: str = "contextual",
    seed: int = 0,
    rows_per_file: int = ROWS_PER_FILE,
    sample: str = SAMPLE,
) -> dict[str, int]:
    """Write `rows` synthetic step pairs of `variant` into `output`; rows per split."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}")
    versions = _versions(list(read_recipes([sample])))
    rng = random.Random(seed)
    base = os.path.join(output, "step_pairs", variant)
    for split in SPLITS:
        os.makedirs(os.path.join(base, split), exist_ok=True)
    pending: dict[str, list[dict]] = {s: [] for s in SPLITS}
    files = {s: 0 for s in SPLITS}
    counts = {s: 0 for s in SPLITS}

    def flush(split: str) -> None:
        batch = pending[split]
        path = os.path.join(base, split, f"part-{files[split]:05d}.parquet")
        pq.write_table(pa.Table.from_pylist(batch, schema=STEP_PAIR_SCHEMA), path)
        files[split] += 1
        counts[split] += len(batch)
        pending[split] = []

    written, dish = 0, 0
    while written < rows:
        split = _split(str(dish), seed)
        # A dish's recipe pairs: a few constraints' versions of one recipe, as a dish group yields.
        for _ in range(rng.randint(1, 4)):
            for row in dish_rows(rng.choice(versions), dish, split, variant, rng)[: rows - written]:
                pending[split].append(row)
                written += 1
                if len(pending[split]) == rows_per_file:
                    flush(split)
        dish += 1
    for split in SPLITS:
        if pending[split] or files[split] == 0:
            flush(split)
    stats = {"synthetic": True, "recipes": dish, "step_pairs": {variant: counts}}
    with open(os.path.join(output, "stats.json"), "w", encoding="utf-8") as handle:
        json.dump(stats, handle, indent=1)
    return counts


def main(argv: list[str] | None = None) -> int:
    """Write one synthetic prepared folder and print its rows per split."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, required=True, help="step pairs in all splits")
    parser.add_argument(
        "--output", required=True, help="the prepared folder to write (train.py --data)"
    )
    parser.add_argument("--variant", default="contextual", choices=VARIANTS)
    parser.add_argument("--rows-per-file", type=int, default=ROWS_PER_FILE)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        json.dumps(
            write_prepared(args.output, args.rows, args.variant, args.seed, args.rows_per_file)
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
