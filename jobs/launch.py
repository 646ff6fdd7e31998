"""What every job shares: one-line errors, the run folder it claims, the Ray it joins, and
the Parquet folders it reads."""
from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import time

# Allocators a job can preload into its Ray workers, by the library name the loader looks up.
ALLOCATORS = {"tcmalloc": "tcmalloc_minimal", "system": None}


class JobError(Exception):
    """A problem to report as one line before (or instead of) any work."""


def claim_output(out: str, fingerprint: str, settings: dict, overwrite: bool, resume: bool | None = None) -> bool:
    """Create or resume a run folder; refuse one that holds another run. True = resuming.

    resume None resumes a matching run silently; False refuses any earlier run; True needs one.
    """
    manifest = os.path.join(out, "run.json")
    if overwrite and os.path.exists(out):
        shutil.rmtree(out)
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8") as handle:
            earlier = json.load(handle)
        if earlier.get("fingerprint") != fingerprint:
            raise JobError(f"{out} holds a run with other inputs or settings; use a new --output, "
                           "or --overwrite to replace it")
        if resume is False:
            raise JobError(f"{out} holds an earlier run; pass --resume to continue it or --overwrite to replace it")
        return True
    if resume:
        raise JobError(f"nothing to resume in {out}: it holds no run")
    if os.path.isdir(out) and os.listdir(out):
        raise JobError(f"{out} is not empty and holds no rrt run; choose an empty or new folder")
    os.makedirs(out, exist_ok=True)
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump({"fingerprint": fingerprint, "settings": settings,
                   "started": time.strftime("%Y-%m-%dT%H:%M:%S")}, handle, indent=2, default=str)
    return False


def start_ray(ray_settings: dict) -> bool:
    """Join RAY_ADDRESS / ray.address, or start a local Ray with the configured CPUs and memory;
    True when this call started a local Ray."""
    import ray

    if ray.is_initialized():
        return False
    address = ray_settings.get("address") or os.environ.get("RAY_ADDRESS")
    local = {} if address else {"num_cpus": ray_settings.get("num_cpus"),
                                "object_store_memory": ray_settings.get("object_store_memory")}
    if not address:
        local["runtime_env"] = {"worker_process_setup_hook": quiet_local_ray}
    ray.init(address=address, include_dashboard=False, **local)
    return not address


def quiet_local_ray() -> None:
    """Worker setup hook of a local Ray: silence Ray Train's placement-group cleaner, which cannot
    read actor state without a dashboard and would warn every second; a local Ray ends with its
    job, so nothing is left for it to clean."""
    import logging

    logging.getLogger("ray.train.v2._internal.execution.controller.placement_group_cleaner").setLevel(logging.ERROR)


def allocator_env(name: str) -> dict[str, str]:
    """Worker environment that preloads the named malloc: {} for the system's or when the library
    is not installed here. The bare soname is used, so each node's loader finds its own copy."""
    library = ALLOCATORS[name] and ctypes.util.find_library(ALLOCATORS[name])
    if not library:
        return {}
    return {"LD_PRELOAD": ":".join(filter(None, [library, os.environ.get("LD_PRELOAD")]))}


def parquet_files(path: str) -> list[str]:
    """Every Parquet file under a folder, in a stable order."""
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f.endswith(".parquet"))


def count_rows(path: str) -> int:
    """Rows in a Parquet folder (0 when it holds no file), from the files' metadata."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in parquet_files(path))
