"""The technique set: recipes where a swap alone is not enough, rewritten by the product and by
Rule-Based side by side, for a blind reading.

    python benchmarks/technique_set.py --model out/demo/grounded_rule/model --output out/technique_set
    rrt judge create --study out/technique_study --recipes 40 --judges 2 --judges-per-item 2 \\
        --human-rewrites 0 --rewrites out/technique_set/grounded_rule,out/technique_set/rule_based

Reads `data/technique_set/recipes.tsv` (id, constraint, why) and the recipes it names from the
real web recipes (../shared/data/web_recipes, or RRT_SHARED_DATA); they are kept out of every
training split (`data.held_out`). Writes each system's `rewrites.jsonl` (the product: the
`rewrite` block's defaults, constrained) into --output, prints one JSON line per system (recipes,
steps, steps changed from the source, the product's decisions, seconds) and the ratio last: the
product's changed steps over Rule-Based's.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from testing.shared_data import SHARED


def technique_tasks(table: str, recipes: str) -> list:
    """One rewrite task per row of the technique set's table, with its recipe read and cleaned."""
    from rrt.modelling.rewriter import RewriteTask
    from rrt.recipes.loaders import read_recipes

    with open(table, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    wanted = {row["id"] for row in rows}
    found = {r.id: r for r in read_recipes([recipes]) if r.id in wanted}
    if missing := sorted(wanted - set(found)):
        raise SystemExit(f"technique_set: error: not in {recipes}: {', '.join(missing)}")
    return [
        RewriteTask(
            row["id"],
            [row["constraint"]],
            {
                "title": found[row["id"]].title,
                "ingredients": list(found[row["id"]].ingredients),
                "steps": list(found[row["id"]].steps),
            },
            13,
        )
        for row in rows
    ]


def write_run(folder: str, records: list[dict]) -> None:
    """A rewrite run folder as `rrt judge create` reads it: rewrites.jsonl."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "rewrites.jsonl"), "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def summary(system: str, records: list[dict], seconds: float) -> dict:
    """One system's counts: recipes, steps, steps changed from the source, decisions, seconds."""
    from rrt.evaluation.metrics import decision_counts

    steps = [
        (s, r["source"]["steps"][n]) for r in records for n, s in enumerate(r["rewrite"]["steps"])
    ]
    changed = sum(1 for new, old in steps if " ".join(new.split()) != " ".join(old.split()))
    return {
        "system": system,
        "recipes": len(records),
        "steps": len(steps),
        "changed_steps": changed,
        "decisions": decision_counts(records),
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Rewrite the technique set with the product and Rule-Based; print their counts and the ratio."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="the product's model (<train output>/model)")
    parser.add_argument("--output", default=os.path.join(ROOT, "out", "technique_set"))
    parser.add_argument(
        "--table", default=os.path.join(ROOT, "data", "technique_set", "recipes.tsv")
    )
    parser.add_argument("--candidates", type=int, default=10, help="samples per affected step")
    args = parser.parse_args(argv)
    recipes = os.path.join(SHARED, "web_recipes", "recipes.jsonl")
    if not os.path.exists(recipes):
        raise SystemExit(f"technique_set: error: the real recipes are not in {recipes}")
    from rrt.config import load_settings
    from rrt.evaluation.baselines import rule_based
    from rrt.modelling.loading import build_rewriter, load_model
    from rrt.modelling.scheduler import rewrite_all

    tasks = technique_tasks(args.table, recipes)
    started = time.perf_counter()
    guide = [rule_based(task) for task in tasks]
    lines = [summary("rule_based", guide, time.perf_counter() - started)]
    write_run(os.path.join(args.output, "rule_based"), guide)
    started = time.perf_counter()
    model = load_model(args.model)
    rewriter = build_rewriter(model, load_settings().rewrite, args.candidates, constrained=True)
    product = rewrite_all(rewriter, tasks, slots=8)
    lines.append(summary(f"{rewriter.system}+constrained", product, time.perf_counter() - started))
    write_run(os.path.join(args.output, rewriter.system), product)
    for line in lines:
        print(json.dumps(line), flush=True)
    ratio = lines[1]["changed_steps"] / max(1, lines[0]["changed_steps"])
    print(json.dumps({"ratio_changed_steps_product_over_rule_based": round(ratio, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
