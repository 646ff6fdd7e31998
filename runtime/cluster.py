"""The Ray a job or the service runs on: join a cluster or start a local one, and the worker
environment (allocator preload) that jobs hand their Ray workers."""
from __future__ import annotations

import ctypes.util
import os

# Allocators a job can preload into its Ray workers, by the library name the loader looks up.
ALLOCATORS = {"tcmalloc": "tcmalloc_minimal", "system": None}


def start_ray(ray_settings: dict) -> bool:
    """Join RAY_ADDRESS / ray.address, or start a local Ray with the configured CPUs and memory;
    True when this call started a local Ray."""
    import ray

    if ray.is_initialized():
        return False
    address = ray_settings["address"] or os.environ.get("RAY_ADDRESS")
    local = {} if address else {"num_cpus": ray_settings["num_cpus"],
                                "object_store_memory": ray_settings["object_store_memory"]}
    if not address:
        local["runtime_env"] = {"worker_process_setup_hook": quiet_local_ray}
    ray.init(address=address, include_dashboard=False, **local)
    return not address


def start_local_ray(ray_settings: dict) -> None:
    """Start a new local Ray with the configured CPUs and object store, never joining another."""
    import ray

    # address="local" starts a new Ray: without it, ray.init joins the latest `ray start` cluster.
    ray.init(address="local", include_dashboard=False, num_cpus=ray_settings["num_cpus"],
             object_store_memory=ray_settings["object_store_memory"])


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
