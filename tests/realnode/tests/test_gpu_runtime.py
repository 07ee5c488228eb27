"""gpu_container_toolkit on a real node with a GPU side (realnode.up(gpus=True): NVML's mock as the
driver's library, device nodes): the role installs NVIDIA's toolkit from the local mirror (its
nvidia-ctk, nvidia-container-runtime, nvidia-container-runtime-hook and nvidia-cdi-hook built from
NVIDIA's module), registers the `nvidia` runtime with the node's real containerd while the node
serves, and writes the CDI spec nvidia-ctk generates from NVML; then pods of RuntimeClass nvidia
are started by NVIDIA's runtime with the spec's devices and files."""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import time

import pytest
import yaml
from kubernetes import client, config

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import realnode  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = HERE.parent / "playbooks" / "toolkit.yml"
MIRRORS = pathlib.Path(os.environ.get("GPUFLEET_MIRRORS", realnode.REPO / ".cache" / "mirrors"))
BUSYBOX = "localhost/gpufleet-test/busybox:1.37.0-glibc"
NODE = "gpufleet-real-gpu"


def playbook(inventory, *args):
    return realnode.ansible_playbook(inventory, PLAYBOOK, *args)


def recap(result):
    found = re.search(rf"^{NODE}\s+:\s+(.*)$", result.stdout, re.MULTILINE)
    assert found, result.stdout[-3000:] + result.stderr[-2000:]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", found.group(1))}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpuruntime")
    with realnode.control_plane(folder / "cp") as state:
        realnode.up(state, [NODE], gpus=True, volumes=[f"{MIRRORS}:/srv/mirrors:ro"])
        inventory = folder / "hosts.yml"
        inventory.write_text(json.dumps({"all": {
            "children": {"real_gpu_nodes": {"hosts": {NODE: {}}}},
            "vars": {"ansible_connection": "containers.podman.podman", "ansible_python_interpreter": "/usr/bin/python3",
                     "gpu_container_toolkit_repo_url": "file:///srv/toolkit-mirror",
                     "gpu_container_toolkit_repo_key_fingerprint": (MIRRORS / "toolkit" / "fingerprint").read_text().strip(),
                     "gpu_container_toolkit_cdi": True}}}))
        first = playbook(inventory)
        api = client.ApiClient(config.load_kube_config(config_file=str(state / "direct" / "admin.kubeconfig")) or None)
        core = client.CoreV1Api(api)
        client.NodeV1Api(api).create_runtime_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"})
        yield {"state": state, "core": core, "inventory": inventory, "first": first}


def node_shell(command):
    return realnode.node_exec(NODE, "sh", "-c", command).stdout


def run_pod(core, name, env=None, runtime_class="nvidia"):
    container = {"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                 "command": ["sh", "-c", "nvidia-smi -L; echo devices: $(ls /dev | grep '^nvidia' | sort | tr '\\n' ' ')"]}
    if env:
        container["env"] = [{"name": key, "value": value} for key, value in env.items()]
    spec = {"nodeName": NODE, "restartPolicy": "Never", "containers": [container], "terminationGracePeriodSeconds": 1}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pod_status = core.read_namespaced_pod(name, "default").status
        if pod_status.phase in ("Succeeded", "Failed"):
            return pod_status.phase, core.read_namespaced_pod_log(name, "default")
        time.sleep(0.5)
    events = [e.message for e in core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items]
    raise AssertionError(f"{name} did not finish in 60 s: {events}")


def test_role_registers_the_runtime_on_a_serving_node(cluster):
    """The role's run on the real node: the runtime in containerd's own configuration, containerd
    restarted and the Node still Ready, the CDI spec generated from NVML (one device per GPU)."""
    counts = recap(cluster["first"])
    assert counts["failed"] == 0 and counts["changed"] > 0, cluster["first"].stdout[-3000:]
    dump = node_shell("containerd config dump")
    assert re.search(r'runtimes\.nvidia\.options\]\s+BinaryName = "/usr/bin/nvidia-container-runtime"', dump)
    assert 'enable_cdi = true' in dump
    for program in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-cdi-hook"):
        assert "version 1.17.8" in node_shell(f"{program} --version | head -1"), program
    listed = node_shell("nvidia-smi -L")
    gpus = len(re.findall(r"^GPU \d+:", listed, re.MULTILINE))
    assert gpus == 8
    # NVML's lookup by UUID (jit-cdi's, from toolkit 1.18), through Debian's pynvml as nvml_facts uses it
    third = re.search(r"^GPU 3: .*\(UUID: (GPU-[0-9a-f-]+)\)$", listed, re.MULTILINE).group(1)
    lookup = node_shell("python3 -c 'import sys, pynvml; pynvml.nvmlInit(); "
                        "print(pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(sys.argv[1].encode())))"
                        f"' {third}; python3 -c 'import pynvml; pynvml.nvmlInit(); "
                        "pynvml.nvmlDeviceGetHandleByUUID(b\"GPU-00000000-0000-0000-0000-000000000000\")' 2>&1 | tail -1")
    assert lookup.splitlines()[0] == "3" and "Not Found" in lookup.splitlines()[-1], lookup
    spec = yaml.safe_load(node_shell("cat /etc/cdi/nvidia.yaml"))
    assert spec["kind"] == "nvidia.com/gpu"
    names = {str(device["name"]) for device in spec["devices"]}
    assert {str(i) for i in range(gpus)} <= names and "all" in names, names
    ready = [c for c in cluster["core"].read_node(NODE).status.conditions if c.type == "Ready"]
    assert ready[0].status == "True"


def test_second_run_changes_nothing(cluster):
    counts = recap(playbook(cluster["inventory"]))
    assert counts["failed"] == 0 and counts["changed"] == 0, counts


def test_pod_gets_every_gpu_through_the_runtime(cluster):
    """NVIDIA's runtime turns NVIDIA_VISIBLE_DEVICES into the CDI spec's edits: the device nodes,
    NVML's library and nvidia-smi mounted from the node, so the container lists the node's GPUs."""
    phase, log = run_pod(cluster["core"], "all-gpus", {"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=all"})
    assert phase == "Succeeded", log
    assert node_shell("nvidia-smi -L").strip() in log
    devices = log.split("devices:", 1)[1].split()
    assert {f"nvidia{i}" for i in range(8)} | {"nvidiactl"} <= set(devices), devices


def test_pod_gets_only_the_gpu_it_names(cluster):
    """One GPU by its CDI name: only that GPU's device node is in the container. (NVML's mock cannot
    see the container's devices, so its nvidia-smi still lists all eight, where the real driver
    would list one.)"""
    phase, log = run_pod(cluster["core"], "one-gpu", {"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=3"})
    assert phase == "Succeeded", log
    devices = set(log.split("devices:", 1)[1].split())
    assert "nvidia3" in devices and not {f"nvidia{i}" for i in (0, 1, 2, 4, 5, 6, 7)} & devices, devices


def test_runc_pod_gets_no_gpu(cluster):
    """The same pod without the RuntimeClass is runc's: no nvidia-smi, no device node."""
    phase, log = run_pod(cluster["core"], "no-runtime-class", {"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=all"},
                         runtime_class=None)
    assert phase == "Succeeded", log
    assert "nvidia-smi: not found" in log
    assert log.split("devices:", 1)[1].split() == []
