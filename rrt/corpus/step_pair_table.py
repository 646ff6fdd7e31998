"""The columns of the prepared step pairs (`<prepared>/step_pairs/<variant>/<split>/*.parquet`)."""

from __future__ import annotations

import pyarrow as pa

# One row per learned step: the recipe pair, the constraint, the source step and the target steps
# aligned to it, their link score, the training text of the variant, and where the pair came from:
# `aligned` (two recipes of a dish, rrt.corpus.pairing) or `edit` (rrt.corpus.edit_pairs).
STEP_PAIR_SCHEMA = pa.schema(
    [
        ("source_id", pa.string()),
        ("target_id", pa.string()),
        ("constraint", pa.string()),
        ("split", pa.string()),
        ("source_step", pa.int64()),
        ("target_steps", pa.list_(pa.int64())),
        ("score", pa.float64()),
        ("text", pa.string()),
        ("pair_source", pa.string()),
    ]
)
