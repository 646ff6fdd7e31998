"""The cluster definitions in cluster/: the fields a V100 training run depends on."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "cluster"
LAUNCHER = CLUSTER / "ray-cluster-v100.yaml"
RAYCLUSTER = CLUSTER / "kuberay-raycluster.yaml"
RAYJOB = CLUSTER / "kuberay-rayjob.yaml"
README = CLUSTER / "README.md"
STORAGE = "/mnt/cluster_storage"
PVC = "rrt-cluster-storage"
# AWS instance types with V100s: (GPUs, vCPUs, memory GiB), as AWS lists them.
V100_INSTANCES = {
    "p3.2xlarge": (1, 8, 61),
    "p3.8xlarge": (4, 32, 244),
    "p3.16xlarge": (8, 64, 488),
    "p3dn.24xlarge": (8, 96, 768),
}
# (vCPUs, GiB) of the smallest node with 8 V100s: a whole v100x8 pod must fit on it.
SMALLEST_V100X8 = min((cpus, memory) for gpus, cpus, memory in V100_INSTANCES.values() if gpus == 8)


def load(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def project_dependencies() -> dict[str, Requirement]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return {canonicalize_name(r.name): r for r in map(Requirement, deps)}


def pod_specs(cluster_spec: dict) -> list[tuple[str, dict]]:
    """(group name, pod spec) for the head group and every worker group of a RayCluster spec."""
    pods = [("head", cluster_spec["headGroupSpec"]["template"]["spec"])]
    pods += [(g["groupName"], g["template"]["spec"]) for g in cluster_spec["workerGroupSpecs"]]
    return pods


def worker_group(cluster_spec: dict, name: str = "v100x8") -> dict:
    groups = {g["groupName"]: g for g in cluster_spec["workerGroupSpecs"]}
    assert name in groups, f"no worker group {name!r}; groups: {sorted(groups)}"
    return groups[name]


def k8s_cluster_specs() -> list[tuple[str, dict]]:
    return [
        ("RayCluster", load(RAYCLUSTER)["spec"]),
        ("RayJob.rayClusterSpec", load(RAYJOB)["spec"]["rayClusterSpec"]),
    ]


K8S_IDS = ["raycluster", "rayjob"]


def training_profile() -> dict:
    """The train block of ray_config.yaml's v100x64 profile, the run the cluster files are sized for."""
    return load(ROOT / "ray_config.yaml")["profiles"]["v100x64"]["train"]


def gibibytes(quantity: str) -> float:
    """A Kubernetes memory quantity in Mi, Gi or Ti, in GiB."""
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi|Ti)", quantity).groups()
    return int(number) * {"Mi": 1 / 1024, "Gi": 1, "Ti": 1024}[unit]


# --- cluster launcher ---------------------------------------------------------------------


def test_launcher_v100_worker_type_holds_a_v100x64_run():
    """The v100x8 node type is a V100 instance with the GPUs and vCPUs it declares to the
    autoscaler, a training worker's CPUs for each GPU, and it scales from 0 to the nodes a
    v100x64 run needs at once."""
    cfg = load(LAUNCHER)
    assert cfg["provider"]["type"] == "aws"
    worker = cfg["available_node_types"]["v100x8"]
    instance = worker["node_config"]["InstanceType"]
    assert instance in V100_INSTANCES, f"{instance} is not an instance type with V100s"
    gpus, cpus, _memory = V100_INSTANCES[instance]
    declared = worker["resources"]
    assert declared["GPU"] == gpus and declared["CPU"] <= cpus, (instance, declared)
    train = training_profile()
    assert declared["CPU"] >= declared["GPU"] * train["cpus_per_worker"]
    nodes = -(-train["num_workers"] // declared["GPU"])
    assert worker["min_workers"] == 0
    assert worker["max_workers"] >= nodes and cfg["max_workers"] >= nodes


def test_launcher_head_is_cpu_only():
    """The head node type declares CPUs and no GPUs, so training workers land on V100 nodes."""
    cfg = load(LAUNCHER)
    head = cfg["available_node_types"][cfg["head_node_type"]]
    assert head["resources"].get("CPU", 0) > 0
    assert head["resources"].get("GPU", 0) == 0
    assert not head["node_config"]["InstanceType"].startswith(("p", "g"))


def test_launcher_docker_image_and_run_options():
    """The container is the Ray 2.60.0 GPU image with raised file limits, a large /dev/shm and the shared mount."""
    docker = load(LAUNCHER)["docker"]
    image = docker["image"]
    assert "2.60.0" in image and "gpu" in image
    assert docker["container_name"]
    options = " ".join(docker["run_options"])
    assert "--ulimit nofile=65536:65536" in options
    assert re.search(r"--shm-size=\d+g", options)
    assert f"-v {STORAGE}:{STORAGE}" in options


def test_launcher_setup_installs_cuda_torch_then_the_project():
    """setup_commands install torch 2.13.0 from the CUDA index first, then the project synced to ~/rrt."""
    cfg = load(LAUNCHER)
    assert cfg["file_mounts"].get("~/rrt") == "."
    commands = cfg["setup_commands"]
    torch_at = [i for i, c in enumerate(commands) if "pip install" in c and "torch==" in c]
    project_at = [
        i for i, c in enumerate(commands) if "~/rrt" in c and re.search(r"pip install .*-e \.", c)
    ]
    assert torch_at, "no setup command installs torch"
    assert project_at, "no setup command installs the project from ~/rrt"
    assert torch_at[0] < project_at[0], "torch must be installed before the project"
    torch_cmd = commands[torch_at[0]]
    assert "download.pytorch.org/whl/cu" in torch_cmd
    pinned = Version(re.search(r"torch==(\S+)", torch_cmd).group(1))
    assert project_dependencies()["torch"].specifier.contains(pinned, prereleases=True)


def test_launcher_mounts_shared_storage_before_docker():
    """initialization_commands mount the EFS share at /mnt/cluster_storage on every host."""
    init = " ".join(load(LAUNCHER)["initialization_commands"])
    assert "mount -t nfs4" in init
    assert STORAGE in init
    assert "fs-XXXXXXXX" in init, "the EFS id placeholder users must edit is gone or renamed"


# --- KubeRay RayCluster -------------------------------------------------------------------


def test_raycluster_kind_version_and_autoscaling():
    """The RayCluster is ray.io/v1, Ray 2.60.0, with the in-tree autoscaler on."""
    doc = load(RAYCLUSTER)
    assert doc["apiVersion"] == "ray.io/v1"
    assert doc["kind"] == "RayCluster"
    assert doc["spec"]["rayVersion"] == "2.60.0"
    assert doc["spec"]["enableInTreeAutoscaling"] is True


@pytest.mark.parametrize("label,spec", k8s_cluster_specs(), ids=K8S_IDS)
def test_v100_worker_group_resources(label, spec):
    """The v100x8 group scales from 0 to the pods of 8 GPUs a v100x64 run needs, each pod fitting
    the smallest 8-V100 node with room for the kubelet, pinned to V100 nodes and tolerating the
    GPU taint."""
    group = worker_group(spec)
    train = training_profile()
    assert group["minReplicas"] == 0
    assert group["maxReplicas"] * 8 >= train["num_workers"]
    assert 0 <= group["replicas"] <= group["maxReplicas"]
    pod = group["template"]["spec"]
    (container,) = pod["containers"]
    limits = container["resources"]["limits"]
    assert int(limits["nvidia.com/gpu"]) == 8
    cpus, memory = int(limits["cpu"]), gibibytes(limits["memory"])
    node_cpus, node_memory = SMALLEST_V100X8
    assert 8 * train["cpus_per_worker"] <= cpus < node_cpus
    assert memory < node_memory
    assert "V100" in pod["nodeSelector"]["nvidia.com/gpu.product"]
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])


@pytest.mark.parametrize("label,spec", k8s_cluster_specs(), ids=K8S_IDS)
def test_head_has_no_gpus_and_serves_the_dashboard(label, spec):
    """The head starts Ray with num-gpus 0, requests no GPU and exposes the dashboard on 8265."""
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    (container,) = head["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    assert 8265 in [p["containerPort"] for p in container["ports"]]


@pytest.mark.parametrize("label,spec", k8s_cluster_specs(), ids=K8S_IDS)
def test_shared_storage_and_shm_on_head_and_workers(label, spec):
    """Every pod mounts the ReadWriteMany claim at /mnt/cluster_storage and a memory-backed /dev/shm."""
    for group, pod in pod_specs(spec):
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert STORAGE in mounts, f"{group}: nothing mounted at {STORAGE}"
            claim = volumes[mounts[STORAGE]]["persistentVolumeClaim"]["claimName"]
            assert claim == PVC, f"{group}: {STORAGE} is {claim!r}, not {PVC!r}"
            assert "/dev/shm" in mounts, f"{group}: no /dev/shm mount"
            assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"


# --- KubeRay RayJob -----------------------------------------------------------------------


def test_rayjob_entrypoint_trains_contextual_on_shared_storage():
    """The RayJob runs jobs/train_contextual.py with --profile v100x64 and --data/--output on the shared volume."""
    doc = load(RAYJOB)
    assert doc["apiVersion"] == "ray.io/v1"
    assert doc["kind"] == "RayJob"
    argv = shlex.split(doc["spec"]["entrypoint"])
    assert argv[:2] == ["python", "jobs/train_contextual.py"]
    flags = dict(zip(argv[2::2], argv[3::2]))
    assert flags["--profile"] == "v100x64"
    for flag in ("--data", "--output"):
        assert flags[flag].startswith(STORAGE + "/"), f"{flag} {flags[flag]} is not on {STORAGE}"


def test_rayjob_lifecycle():
    """The RayJob submits as a Kubernetes Job and deletes its cluster after the run."""
    spec = load(RAYJOB)["spec"]
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["shutdownAfterJobFinishes"] is True
    assert isinstance(spec["ttlSecondsAfterFinished"], int) and spec["ttlSecondsAfterFinished"] > 0


def test_rayjob_runtime_env_has_working_dir_and_project_dependencies():
    """runtimeEnvYAML parses, names a zip working_dir, and pip-installs every project dependency except ray."""
    runtime_env = yaml.safe_load(load(RAYJOB)["spec"]["runtimeEnvYAML"])
    assert isinstance(runtime_env, dict)
    assert str(runtime_env["working_dir"]).endswith(".zip")
    pip = runtime_env["pip"]
    packages = pip["packages"] if isinstance(pip, dict) else pip
    reqs = {
        canonicalize_name(r.name): r
        for r in (Requirement(p) for p in packages if not p.startswith("-"))
    }
    wanted = set(project_dependencies()) - {"ray"}
    assert wanted <= set(reqs), f"missing from runtimeEnvYAML pip: {sorted(wanted - set(reqs))}"
    assert "ray" not in reqs, (
        "ray comes with the image; reinstalling it in the job env breaks the cluster"
    )
    torch_pin = next(iter(reqs["torch"].specifier))
    assert torch_pin.operator == "==" and Version(torch_pin.version).local == "cu126"
    assert project_dependencies()["torch"].specifier.contains(
        Version(torch_pin.version), prereleases=True
    )
    assert any("download.pytorch.org/whl/cu126" in p for p in packages if p.startswith("-"))


def test_rayjob_cluster_spec_matches_raycluster():
    """The RayJob's embedded rayClusterSpec is the RayCluster's spec, so both define the same cluster."""
    assert load(RAYJOB)["spec"]["rayClusterSpec"] == load(RAYCLUSTER)["spec"]


# --- across files -------------------------------------------------------------------------


def test_one_image_everywhere_matching_ray_version():
    """Every container and the launcher use one image, whose tag matches rayVersion and the project's ray pin."""
    images = {load(LAUNCHER)["docker"]["image"]}
    versions = set()
    for _label, spec in k8s_cluster_specs():
        versions.add(spec["rayVersion"])
        for _group, pod in pod_specs(spec):
            images.update(c["image"] for c in pod["containers"])
    assert len(images) == 1, f"different images: {sorted(images)}"
    (image,) = images
    assert versions == {"2.60.0"}
    assert image.startswith("rayproject/ray:2.60.0-") and image.endswith("-gpu")
    assert project_dependencies()["ray"].specifier.contains(Version("2.60.0"))


def named_in_cluster_files(pattern: str) -> set[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in (LAUNCHER, RAYCLUSTER, RAYJOB, README))
    return set(re.findall(pattern, text))


def test_named_job_scripts_exist():
    """Every jobs/*.py the cluster files and README run exists in the repository."""
    scripts = named_in_cluster_files(r"\bjobs/[\w/]+\.py\b")
    assert "jobs/train_contextual.py" in scripts
    missing = sorted(s for s in scripts if not (ROOT / s).exists())
    assert not missing, f"named but missing: {missing}"


def test_named_profiles_exist_in_ray_config():
    """Every --profile the cluster files and README pass is a profile in ray_config.yaml."""
    profiles = named_in_cluster_files(r"--profile[ =]([\w-]+)")
    assert "v100x64" in profiles
    defined = load(ROOT / "ray_config.yaml")["profiles"]
    missing = sorted(profiles - set(defined))
    assert not missing, f"profiles not in ray_config.yaml: {missing}"


def test_shared_storage_belongs_to_the_ray_user_alone():
    """Resuming unpickles checkpoints from the share: it must not be world-writable."""
    init = " ".join(load(LAUNCHER)["initialization_commands"])
    assert not re.search(r"chmod\s+(0?7[0-7]7|0?777|[ao]\+w|o\+w)", init), init
    assert (
        "chown 1000:100 /mnt/cluster_storage" in init and "chmod 0750 /mnt/cluster_storage" in init
    )
    readme = (ROOT / "cluster" / "README.md").read_text()
    assert "## Trust" in readme and "pickle" in readme


def test_launcher_yaml_is_valid_against_rays_own_cluster_schema():
    import json
    from importlib import resources

    import jsonschema

    schema = json.loads(resources.files("ray.autoscaler").joinpath("ray-schema.json").read_text())
    jsonschema.validate(load(LAUNCHER), schema)
    broken = {**load(LAUNCHER), "max_workers": "eight"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
