"""Training data streams: a task per file in a seeded order, and no stage that waits for the whole split."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as pads

from jobs import train
from jobs.train_plan import TrainRun
from rrt.config import load_settings
from rrt.modelling.models import train_tiny_tokenizer
from runtime.parquet import parquet_files
from testing.synthetic_prepared import write_prepared


class _Recorder:
    """Stands in for ray.data and a Dataset: records every call made to build the training set."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return self

        return call


def _settings(data: str, shuffle_rows: int = 4096) -> TrainRun:
    config = load_settings()
    changes = {"data": data, "seed": 13, "shuffle_rows": shuffle_rows, "tokenize_cpus": 0.25}
    return TrainRun(
        train=config.train.model_copy(update=changes),
        ray=config.ray,
        pairs="contextual",
        block=256,
    )


def test_the_training_split_is_read_a_file_per_task_in_a_seeded_order(tmp_path):
    write_prepared(str(tmp_path), 300, rows_per_file=20)
    files = parquet_files(str(tmp_path / "step_pairs" / "contextual" / "train"))
    recorder = _Recorder()
    train.token_dataset(recorder, _settings(str(tmp_path)), "train", "{}")
    assert [name for name, _, _ in recorder.calls] == [
        "from_items",
        "map_batches",
    ]  # no randomize_block_order
    (_, items, made), (_, _, mapped) = recorder.calls
    paths = [item["path"] for item in items[0]]
    assert sorted(paths) == files and paths != files
    assert paths == train.file_order(files, 13)
    assert made["override_num_blocks"] == len(files) and mapped["batch_size"] == 1

    recorder = _Recorder()
    train.token_dataset(recorder, _settings(str(tmp_path), shuffle_rows=0), "train", "{}")
    assert [item["path"] for item in recorder.calls[0][1][0]] == files


def test_a_file_is_tokenized_in_batches_and_filtered_by_constraint(tmp_path, monkeypatch):
    monkeypatch.setattr(train, "TOKENIZE_BATCH", 16)
    write_prepared(str(tmp_path), 200, rows_per_file=200)
    path = parquet_files(str(tmp_path / "step_pairs" / "contextual" / "train"))[0]
    texts = pads.dataset(path).to_table(columns=["text", "constraint"])
    tokenizer = train_tiny_tokenizer(texts.column("text").to_pylist()[:20], vocab_size=300)
    spec = tokenizer.backend_tokenizer.to_str()
    parts = list(train.tokenize_files(pa.table({"path": [path]}), spec, "contextual", 256))
    assert len(parts) > 1 and all(p.num_rows <= train.TOKENIZE_BATCH for p in parts)
    assert sum(p.num_rows for p in parts) == texts.num_rows
    vegan = sum(
        p.num_rows
        for p in train.tokenize_files(pa.table({"path": [path]}), spec, "contextual", 256, "vegan")
    )
    assert vegan == texts.column("constraint").to_pylist().count("vegan") > 0
