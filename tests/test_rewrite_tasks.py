"""The rewrite job's tasks travel as Arrow columns (jobs/rewrite_actor.py TASK_SCHEMA), not JSON."""

from __future__ import annotations

import pyarrow as pa

from jobs.rewrite_actor import TASK_SCHEMA, _tasks, task_table

SOURCE = {
    "title": "Pancakes",
    "ingredients": ["2 eggs", "1 cup milk"],
    "steps": ["Whisk.", "Fry."],
    "dish": "pancake",
}


def test_tasks_cross_as_typed_columns_and_come_back_whole():
    tasks = [
        {
            "id": "a\u2028b",
            "constraints": ["vegan", "nut-free"],
            "retrieved": None,
            "source": {
                **SOURCE,
                "non_steps": [{"kind": "header", "text": "For the batter", "before": 0}],
            },
        },
        {
            "id": "c",
            "constraints": ["vegan"],
            "source": SOURCE,
            "retrieved": {
                "id": "r1",
                "title": "Vegan Pancakes",
                "ingredients": ["1 cup oat milk"],
                "steps": ["Stir."],
            },
        },
    ]
    table = task_table(tasks)
    assert table.schema == TASK_SCHEMA and table.num_rows == 2
    assert not any(
        pa.types.is_string(table.schema.field(name).type) and name not in ("id", "title")
        for name in table.schema.names
    )  # no JSON blobs: every nested field is typed
    first, second = _tasks(table)
    assert (first.id, first.constraints, first.retrieved) == (
        "a\u2028b",
        ["vegan", "nut-free"],
        None,
    )
    assert first.source["non_steps"] == [{"kind": "header", "text": "For the batter", "before": 0}]
    assert second.source == {k: SOURCE[k] for k in ("title", "ingredients", "steps")}
    assert second.retrieved == tasks[1]["retrieved"]
