"""gpu_kubelet on a real node, in the layout kubeadm join 1.37 left (its unit drop-in, an empty
kubeadm-flags.env, /var/lib/kubelet/config.yaml with the runtime's socket): the role restarts the
kubelet that runs the node and checks it stays up; a setting the real kubelet refuses is rolled
back with the kubelet's own last words."""

from __future__ import annotations

import json
import pathlib
import re
import sys
import time

import pytest
from kubernetes import client, config

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import realnode  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = HERE.parent / "playbooks" / "kubelet.yml"
NODE = "gpufleet-real-kubelet"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kubelet")
    with realnode.control_plane(folder / "cp") as state:
        realnode.up(state, [NODE], gpus=True)
        inventory = folder / "hosts.yml"
        inventory.write_text(json.dumps({"all": {"children": {"real_gpu_nodes": {"hosts": {NODE: {
            "ansible_connection": "containers.podman.podman", "ansible_python_interpreter": "/usr/bin/python3"}}}}}}))
        api = client.ApiClient(config.load_kube_config(config_file=str(state / "direct" / "admin.kubeconfig")) or None)
        yield {"inventory": inventory, "core": client.CoreV1Api(api), "first": realnode.ansible_playbook(inventory, PLAYBOOK)}


def recap(result):
    found = re.search(rf"^{NODE}\s+:\s+(.*)$", result.stdout, re.MULTILINE)
    assert found, result.stdout[-3000:] + result.stderr[-2000:]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", found.group(1))}


def node_shell(command):
    return realnode.node_exec(NODE, "sh", "-c", command).stdout


def ready(core):
    return [c.status for c in core.read_node(NODE).status.conditions if c.type == "Ready"] == ["True"]


def test_role_restarts_the_kubelet_that_runs_the_node(cluster):
    counts = recap(cluster["first"])
    assert counts["failed"] == 0 and counts["changed"] > 0, cluster["first"].stdout[-3000:]
    assert node_shell("systemctl is-active kubelet").strip() == "active"
    command = node_shell("tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value kubelet)/cmdline")
    assert "--config-dir=/etc/kubernetes/kubelet.conf.d" in command
    assert "nvidia.com/gpu.present=true" in command and "nvidia.com/gpu.count=8" in command, command
    # kubeadm's own arguments are still there
    assert "--config=/var/lib/kubelet/config.yaml" in command and "--kubeconfig=/etc/kubernetes/kubelet.conf" in command
    deadline = time.monotonic() + 60
    while not ready(cluster["core"]):
        assert time.monotonic() < deadline, "the Node is not Ready after the role's restart"
        time.sleep(1)
    counts = recap(realnode.ansible_playbook(cluster["inventory"], PLAYBOOK))
    assert counts["failed"] == 0 and counts["changed"] == 0, counts


def test_node_labels_come_with_registration_only(cluster):
    """The kubelet applies --node-labels when it registers its Node: a Node that exists keeps its
    labels through the role's restart (site.yml's cluster part writes them through the API); a node
    registering anew gets them."""
    core = cluster["core"]
    assert "nvidia.com/gpu.present" not in core.read_node(NODE).metadata.labels
    core.delete_node(NODE)
    node_shell("systemctl restart kubelet")
    deadline = time.monotonic() + 60
    while True:
        try:
            labels = core.read_node(NODE).metadata.labels
            if "nvidia.com/gpu.present" in labels:
                break
        except client.exceptions.ApiException as err:
            if err.status != 404:
                raise
        assert time.monotonic() < deadline, "the Node did not register again with the GPU labels"
        time.sleep(1)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" and labels["nvidia.com/gpu.count"] == "8"


def test_a_setting_the_kubelet_refuses_is_rolled_back_with_its_words(cluster):
    """DynamicResourceAllocation is locked on since 1.35: the real kubelet 1.37 panics on it when it
    starts; the role puts the previous drop-in back, the kubelet runs again, and the failure quotes the
    panic, not the goroutine trace after it."""
    result = realnode.ansible_playbook(cluster["inventory"], PLAYBOOK,
                                       "-e", json.dumps({"gpu_kubelet_feature_gates": {"DynamicResourceAllocation": False}}))
    assert result.returncode != 0
    assert "cannot set feature gate DynamicResourceAllocation to false, feature is locked to true" in result.stdout
    assert "The previous drop-in is back and kubelet is running again" in result.stdout
    said = result.stdout.split("kubelet's journal says:", 1)[1].splitlines()[0]
    assert "panic: " in said and "+0x" not in said and "goroutine" not in said, said
    assert node_shell("systemctl is-active kubelet").strip() == "active"
    assert "featureGates" not in node_shell("cat /etc/kubernetes/kubelet.conf.d/90-gpufleet-nvidia.conf")
