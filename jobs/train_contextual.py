"""Train the Contextual Rewriter (the paper's main model) on Ray Train + DeepSpeed.

    python jobs/train_contextual.py --data out/demo/prepared --output out/demo/contextual
    python jobs/train_contextual.py --data out/demo/prepared --output out/demo/contextual_rule --ingredient-prompt rule
    python jobs/train_contextual.py --data out/demo/prepared --output out/demo/grounded_rule \\
        --ingredient-prompt rule --format grounded
    ray job submit --working-dir . -- python jobs/train_contextual.py --data /mnt/cluster_storage/prepared \\
        --output /mnt/cluster_storage/runs/contextual --profile v100x64

The same job as jobs/train.py with the variant fixed: `contextual`, or `contextual_ing`
(the + ingredient prompt variant) with --ingredient-prompt rule; with --format grounded, their
grounded forms beyond the paper (`grounded`, `grounded_ing`: the target's title and ingredient
lines and the source step before the output, rrt.corpus.formats). Outputs: model/,
tokenizer/, metrics.jsonl, loss.png, train_stats.json and ray/ checkpoints in --output.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs.train import build_parser
from jobs.train import main as train_main


def main(argv: list[str] | None = None) -> int:
    """Parse the contextual flags and run the training job with the variant they pick."""
    parser = build_parser(__doc__)
    parser.add_argument(
        "--ingredient-prompt",
        choices=("none", "rule"),
        default="none",
        help="rule: train the + ingredient prompt variant (contextual_ing)",
    )
    parser.add_argument(
        "--format",
        choices=("paper", "grounded"),
        default="paper",
        help="grounded: the target's title and ingredient lines and the source step before the "
        "output (grounded, grounded_ing)",
    )
    args, _ = parser.parse_known_args(argv)
    if args.variant:
        parser.error(
            "the variant is fixed here; use --ingredient-prompt rule or jobs/train.py --variant"
        )
    base = "contextual" if args.format == "paper" else "grounded"
    variant = f"{base}_ing" if args.ingredient_prompt == "rule" else base
    return train_main(
        ["--variant", variant] + _drop_own_flags(argv), build_parser(__doc__), "train_contextual"
    )


def _drop_own_flags(argv: list[str] | None) -> list[str]:
    """The flags without --ingredient-prompt, --format and their values (jobs/train.py does not know them)."""
    items, out, skip = list(argv if argv is not None else sys.argv[1:]), [], False
    for item in items:
        if skip:
            skip = False
        elif item in ("--ingredient-prompt", "--format"):
            skip = True
        elif not item.startswith(("--ingredient-prompt=", "--format=")):
            out.append(item)
    return out


if __name__ == "__main__":
    sys.exit(main())
