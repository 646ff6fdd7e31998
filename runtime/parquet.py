"""The Parquet folders jobs read and write."""

from __future__ import annotations

# pyarrow.parquet is imported where used: parquet_files needs none of it, and jobs/evaluate.py,
# which imports only that, starts without it.
import os


def parquet_files(path: str) -> list[str]:
    """Every Parquet file under a folder, in a stable order."""
    return sorted(
        os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")
    )


def count_rows(path: str) -> int:
    """Rows in a Parquet folder (0 when it holds no file), from the files' metadata."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_files(path))
