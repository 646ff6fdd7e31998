"""The columns of the prepared step pairs (`<prepared>/step_pairs/<variant>/<split>/*.parquet`)."""

from __future__ import annotations

import pyarrow as pa

# One row per learned step: the recipe pair, the constraint, the source step and the target steps
# aligned to it, their link score and the training text of the variant.
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
    ]
)
