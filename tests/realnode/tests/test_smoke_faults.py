"""gpu_smoke_test against a real node whose kubelet cannot start the smoke pod: the verdict comes
from the kubelet's and the container runtime's own words (module pods_wait's not_started), well
within the timeout, where a kwok Node runs the same pod at once. The node has a GPU side (NVML's
mock: the facts see eight H100s) but no NVIDIA runtime and no device plugin: its nvidia.com/gpu
capacity is advertised through the API, as Kubernetes' guide to extended resources does (a
STAND-IN for the device plugin's advertising, which only admits the pod)."""

from __future__ import annotations

import json
import pathlib
import sys
import time

import pytest
from kubernetes import client, config

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import realnode  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = HERE.parent / "playbooks" / "smoke.yml"
BUSYBOX = "localhost/gpufleet-test/busybox:1.37.0-glibc"
NODE = "gpufleet-real-smoke"
TIMEOUT = 240


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("smokefaults")
    with realnode.control_plane(folder / "cp", ttl=1800) as state:
        realnode.up(state, [NODE], gpus=True)
        kubeconfig = state / "direct" / "admin.kubeconfig"
        api = client.ApiClient(config.load_kube_config(config_file=str(kubeconfig)) or None)
        core = client.CoreV1Api(api)
        client.NodeV1Api(api).create_runtime_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"})
        core.patch_node_status(NODE, [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "8"}])
        deadline = time.monotonic() + 60
        while "nvidia.com/gpu" not in (core.read_node(NODE).status.allocatable or {}):
            assert time.monotonic() < deadline, "the kubelet did not take the advertised nvidia.com/gpu into allocatable"
            time.sleep(1)
        yield {"folder": folder, "kubeconfig": kubeconfig, "core": core}


def smoke(cluster, name, **settings):
    """Run the smoke playbook; returns (seconds, the play's output, the node's row)."""
    report = cluster["folder"] / f"{name}.json"
    inventory = cluster["folder"] / f"{name}.yml"
    inventory.write_text(json.dumps({"all": {
        "children": {"cluster_controller": {"hosts": {"localhost": {"ansible_connection": "local",
                                                                    "ansible_python_interpreter": sys.executable}}},
                     "gpu_nodes": {"hosts": {NODE: {"ansible_connection": "containers.podman.podman",
                                                    "ansible_python_interpreter": "/usr/bin/python3"}}}},
        "vars": {"gpu_smoke_test_kubeconfig": str(cluster["kubeconfig"]), "gpu_smoke_test_image": BUSYBOX,
                 "gpu_smoke_test_timeout": TIMEOUT, "realnode_smoke_report": str(report), **settings}}}))
    started = time.monotonic()
    result = realnode.ansible_playbook(inventory, PLAYBOOK, timeout=TIMEOUT + 120)
    seconds = time.monotonic() - started
    rows = json.loads(report.read_text()) if report.exists() else []
    row = [r for r in rows if r.get("node") == NODE]
    assert row, result.stdout[-3000:] + result.stderr[-2000:]
    return seconds, result, row[0]


def test_missing_runtime_handler_is_named_without_waiting_the_timeout(cluster):
    """A node where gpu_container_toolkit never ran: containerd refuses the pod's sandbox, and the
    verdict says so with containerd's words and what to run, long before the timeout."""
    seconds, result, row = smoke(cluster, "handler")
    assert result.returncode != 0 and row["ok"] is False
    detail = " ".join(row["detail"])
    assert 'no runtime for "nvidia" is configured' in detail, detail
    assert "no handler 'nvidia'" in detail and "gpu_container_toolkit" in detail, detail
    assert seconds < TIMEOUT / 2, seconds


def test_image_that_cannot_be_pulled_is_named_without_waiting_the_timeout(cluster):
    """An image no registry serves (run with runc, the RuntimeClass left out): the kubelet's
    ErrImagePull or ImagePullBackOff, the image and the settings to change."""
    seconds, result, row = smoke(cluster, "pull", gpu_smoke_test_image="registry.invalid/gpufleet/cuda:1",
                                 gpu_smoke_test_runtime_class="")
    assert result.returncode != 0 and row["ok"] is False
    detail = " ".join(row["detail"])
    assert "ErrImagePull" in detail or "ImagePullBackOff" in detail, detail
    assert "registry.invalid/gpufleet/cuda:1" in detail and "gpu_smoke_test_image" in detail, detail
    assert seconds < TIMEOUT / 2, seconds
