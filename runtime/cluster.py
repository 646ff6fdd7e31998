"""The Ray a job or the service runs on: join a cluster or start a local one, and the worker
environment (allocator preload) that jobs hand their Ray workers."""

from __future__ import annotations

# ray is imported where used: the jobs import this module, and their --help starts without ray.
import ctypes.util
import logging
import os
import sys
import threading

from rrt.config import RaySettings
from runtime.runs import JobError

# Allocators a job can preload into its Ray workers, by the library name the loader looks up.
ALLOCATORS = {"tcmalloc": "tcmalloc_minimal", "system": None}
# Whether this process started the Ray it runs on (a local Ray keeps its size; a cluster may grow).
_STARTED = {"local": False}
# Ray Train's placement-group cleaner's monitor thread, by its name.
CLEANER_THREAD = "PlacementGroupCleanerMonitor"
# A local job Ray's workers without --verbose: no Hugging Face progress bars ("Loading weights")
# and only transformers' errors, which the job's own progress and results would drown in.
QUIET_WORKERS = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}
# What a job whose own Ray is too small can do about it.
JOIN = "ask for less, or join a cluster that has them (RAY_ADDRESS or ray.address)"


def start_ray(ray_settings: RaySettings, verbose: bool = False) -> bool:
    """Join RAY_ADDRESS / ray.address, or start a local Ray with the configured CPUs and memory;
    True when this call started a local Ray. Unless `verbose`, Ray's INFO lines stay off the
    console (its session folder's logs keep them)."""
    import ray

    if ray.is_initialized():
        return False
    if not verbose:
        quiet_ray_console()
    address = ray_settings.address or os.environ.get("RAY_ADDRESS")
    local = (
        {}
        if address
        else {
            "num_cpus": ray_settings.num_cpus,
            "object_store_memory": ray_settings.object_store_memory,
        }
    )
    if not address:
        local["runtime_env"] = {
            "worker_process_setup_hook": quiet_local_ray,
            **({} if verbose else {"env_vars": dict(QUIET_WORKERS)}),
        }
    # "local": with no address named, ray.init would join whatever Ray it finds on this machine (and
    # refuse the local settings with a traceback); the documented rule is a Ray of the job's own.
    ray.init(
        address=address or "local",
        include_dashboard=False,
        logging_level=logging.INFO if verbose else logging.WARNING,
        **local,
    )
    _STARTED["local"] = not address
    return not address


def unplaced(nodes: list[dict[str, float]], bundles: int, each: dict[str, float]) -> int:
    """How many of `bundles` bundles of `each` resources find no room on `nodes` (each node's
    total resources), a bundle on one node, first fit."""
    free = [dict(node) for node in nodes]
    wanted = {key: value for key, value in each.items() if value > 0}
    missing = 0
    for _ in range(bundles):
        node = next(
            (
                n
                for n in free
                if all(n.get(key, 0.0) >= value - 1e-9 for key, value in wanted.items())
            ),
            None,
        )
        if node is None:
            missing += 1
            continue
        for key, value in wanted.items():
            node[key] -= value
    return missing


def describe(resources: dict[str, float]) -> str:
    """`1 GPU and 8 CPUs`: resources as words, GPUs first."""
    return " and ".join(
        f"{resources[key]:g} {key}{'' if resources[key] == 1 else 's'}"
        for key in ("GPU", "CPU")
        if key in resources
    )


def bundle(cpus: float, gpus: float = 0.0) -> dict[str, float]:
    """One worker's or actor's resources; GPUs only when asked."""
    return {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}


def ensure_room(
    noun: str,
    settings: str,
    bundles: int,
    each: dict[str, float],
    needed: int | None = None,
    remedy: str = JOIN,
) -> None:
    """Check that the running Ray can place `needed` (default: all) of `bundles` bundles of `each`,
    named by `noun` and the `settings` that ask for them. A Ray this process started keeps its
    size, so a shortfall is a JobError; a joined cluster may add nodes, so there it is one warning
    line and the job waits."""
    import ray

    local = _STARTED["local"] and ray.is_initialized()
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    placed = bundles - unplaced(nodes, bundles, each)
    if placed >= (bundles if needed is None else needed):
        return
    has = describe({key: sum(node.get(key, 0.0) for node in nodes) for key in each})
    asked = f"{bundles} {noun}{'' if bundles == 1 else 's'} of {describe(each)} each ({settings})"
    if local:
        raise JobError(
            f"{asked} cannot start on this machine's Ray, which has {has} in all: {remedy}"
        )
    print(
        f"warning: {asked} cannot start on the Ray cluster now, which has {has} in all; the job waits for "
        f"nodes to be added",
        file=sys.stderr,
        flush=True,
    )


def quiet_ray_console() -> None:
    """Ray's notes off the console: Ray Data's at errors only (its INFO lines give each
    dataset's plan and timing, its warnings note the job's own settings, such as progress bars
    off; ray-data.log in the session folder keeps every line), and the token-authentication
    note of a local start."""
    import ray.data  # noqa: F401 - configures Ray Data's loggers, which this then adjusts

    # A new local Ray turns token authentication on (Ray's default since 2.59) and says so at
    # WARNING on every start; the job keeps the default and leaves the note out. Naming the mode
    # in RAY_AUTH_MODE instead would not do: Ray reads it once, when it is imported.
    logging.getLogger("ray._private.authentication").setLevel(logging.ERROR)

    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            handler.setLevel(logging.ERROR)


def start_local_ray(ray_settings: RaySettings, verbose: bool = False) -> str:
    """Start a new local Ray with the configured CPUs and object store, never joining another; its
    logs folder. Unless `verbose`, its processes' output stays in that folder, off the console."""
    import ray

    if not verbose:
        quiet_ray_console()
    # address="local" starts a new Ray: without it, ray.init joins the latest `ray start` cluster.
    context = ray.init(
        address="local",
        include_dashboard=False,
        num_cpus=ray_settings.num_cpus,
        object_store_memory=ray_settings.object_store_memory,
        logging_level=logging.INFO if verbose else logging.WARNING,
        log_to_driver=verbose,
    )
    _STARTED["local"] = True
    return os.path.join(context.address_info["session_dir"], "logs")


def quiet_local_ray() -> None:
    """Worker setup hook of a local Ray: silence Ray Train's placement-group cleaner, which cannot
    read actor state without a dashboard and would warn every second, and whose monitor thread dies
    with a traceback when another Ray runs on the same machine (it cannot tell which is its own);
    a local Ray ends with its job, so nothing is left for it to clean."""
    logging.getLogger(
        "ray.train.v2._internal.execution.controller.placement_group_cleaner"
    ).setLevel(logging.ERROR)
    earlier = threading.excepthook

    def hook(args) -> None:
        """Drop the cleaner's monitor thread's death; every other thread's error as before."""
        if args.thread is None or args.thread.name != CLEANER_THREAD:
            earlier(args)

    threading.excepthook = hook


def allocator_env(name: str) -> dict[str, str]:
    """Worker environment that preloads the named malloc: {} for the system's or when the library
    is not installed here. The bare soname is used, so each node's loader finds its own copy."""
    library = ALLOCATORS[name] and ctypes.util.find_library(ALLOCATORS[name])
    if not library:
        return {}
    return {"LD_PRELOAD": ":".join(filter(None, [library, os.environ.get("LD_PRELOAD")]))}


def own_tools_first() -> None:
    """This environment's bin first on the process's PATH, so the tools a process runs by name (DeepSpeed's
    JIT `ninja`, `python` for `ray job submit`) are this environment's. The system's ninja and pip's keep
    different build logs, so a run without this environment's bin first rebuilt DeepSpeed's CPU comm op
    after every run with it."""
    own, path = os.path.dirname(sys.executable), os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != own:
        os.environ["PATH"] = f"{own}{os.pathsep}{path}"
