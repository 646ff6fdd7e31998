"""Where benchmarks find the real data: RRT_SHARED_DATA, else ../shared/data beside the project."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("RRT_SHARED_DATA") or os.path.join(os.path.dirname(ROOT), "shared", "data")


def web_recipes_or_sample() -> str:
    """The real web recipes when the shared data holds them, else the bundled sample."""
    web = os.path.join(SHARED, "web_recipes", "recipes.jsonl")
    return web if os.path.exists(web) else os.path.join(ROOT, "data", "sample", "recipes.jsonl")
