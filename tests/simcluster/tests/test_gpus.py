"""GPU nodes: NVIDIA's device plugin (k8s-device-plugin v0.17 README: CONFIG_FILE, MIG strategies,
time-slicing) makes the kubelet advertise GPUs (concepts/extend-kubernetes/compute-storage-net/
device-plugins/), the scheduler counts them, and a container granted GPUs sees exactly those in
`nvidia-smi -L`, as the recorded captures print them."""

import json
import re
import time

import pytest

from sim_gpu import PLUGIN_NS, capture_list_lines, gpu_pod, plugin_config, plugin_daemonset, renumber
from sim_helpers import wait_for, wait_until

CLUSTER = "gpu.yml"
H100 = "nvgpuexp-capture-linux-h100-80gb-hbm3-driver-590.48.01.txt"
H100_MIG = "nvgpuexp-capture-linux-h100-mig-driver-590.48.01.txt"
L40S = "nvgpuexp-capture-linux-l40s-driver-595.80.txt"
GPU_LINE = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$")


def _allocatable(sim, node, resource):
    return (sim.node(node).status.allocatable or {}).get(resource)


def _wait_allocatable(sim, expected):
    """expected: {node: {resource: value or None}}"""
    def check():
        for node, resources in expected.items():
            have = sim.node(node).status.allocatable or {}
            if any(have.get(r) != v for r, v in resources.items()):
                return False
        return True
    wait_for(check, timeout=20, what=f"allocatable {expected}")


def _restart_plugin(sim, config):
    sim.core.replace_namespaced_config_map("nvdp-config", PLUGIN_NS, config)
    # kubectl stamps a restart to the second and refuses a second one within it ("please wait"):
    # tests that restart back to back on a fast machine wait that second out, as kubectl asks.
    for attempt in range(3):
        result = sim.kubectl("rollout", "restart", "ds/nvidia-device-plugin", "-n", PLUGIN_NS, check=attempt == 2)
        if result.returncode == 0:
            return
        assert "within the past second" in result.stderr, result.stderr
        time.sleep(1.1)


def _run_gpu_pod(sim, name, resources, node=None, command=None):
    sim.core.create_namespaced_pod("default", gpu_pod(name, resources, node, command))
    return sim.wait_pod_phase(name, ("Succeeded", "Failed"))


def _listed(sim, name):
    return sim.core.read_namespaced_pod_log(name, "default").splitlines()


def test_no_gpus_before_the_device_plugin(simulator):
    assert _allocatable(simulator, "h100-node", "nvidia.com/gpu") is None
    simulator.core.create_namespaced_pod("default", gpu_pod("too-early", {"nvidia.com/gpu": "1"}))
    pod = wait_until(lambda: simulator.pod("too-early"), lambda p: p.status.conditions, what="a verdict")
    assert pod.status.conditions[-1].message.startswith("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
    simulator.core.delete_namespaced_pod("too-early", "default", grace_period_seconds=0)


@pytest.fixture(scope="module")
def plugin(simulator):
    simulator.core.create_namespaced_config_map(PLUGIN_NS, plugin_config("none"))
    simulator.apps.create_namespaced_daemon_set(PLUGIN_NS, plugin_daemonset())
    # When the L40S node's plugin pod runs, and when the node advertises its GPU.
    seen = {}
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        pods = simulator.core.list_namespaced_pod(PLUGIN_NS, field_selector="spec.nodeName=l40s-node").items
        if pods and pods[0].status.phase == "Running":
            seen.setdefault("running", time.monotonic())
        if "nvidia.com/gpu" in (simulator.node("l40s-node").status.allocatable or {}):
            seen.setdefault("advertised", time.monotonic())
        time.sleep(0.01)
    simulator.plugin_times = seen
    return simulator


def test_the_device_plugin_advertises_the_gpus(plugin):
    _wait_allocatable(plugin, {"h100-node": {"nvidia.com/gpu": "8"}, "h100-mig-node": {"nvidia.com/gpu": "1"},
                               "l40s-node": {"nvidia.com/gpu": "1"}})
    assert plugin.node("h100-node").status.capacity["nvidia.com/gpu"] == "8"
    assert _allocatable(plugin, "cpu-node", "nvidia.com/gpu") is None
    pods = plugin.core.list_namespaced_pod(PLUGIN_NS, label_selector="app=nvidia-device-plugin").items
    assert sorted(p.spec.node_name for p in pods) == ["h100-mig-node", "h100-node", "l40s-node"]
    log = plugin.core.read_namespaced_pod_log(pods[0].metadata.name, PLUGIN_NS)
    assert "Starting to serve 'nvidia.com/gpu' on /var/lib/kubelet/device-plugins/nvidia-gpu.sock" in log
    plugin.kubectl("rollout", "status", "ds/nvidia-device-plugin", "-n", PLUGIN_NS, "--timeout=20s")
    # The node advertises its GPUs a while after the plugin started: the plugin registers with the
    # kubelet first (the cluster file gives that 0.5 s).
    times = plugin.plugin_times
    assert times["advertised"] - times["running"] > 0.25


def test_a_container_sees_the_gpus_it_was_granted(plugin):
    name = GPU_LINE.match(capture_list_lines(H100)[0]).group(2)
    _run_gpu_pod(plugin, "all-eight", {"nvidia.com/gpu": "8"}, "h100-node")
    lines = _listed(plugin, "all-eight")
    parsed = [GPU_LINE.match(line).groups() for line in lines]
    assert [int(p[0]) for p in parsed] == list(range(8))
    assert {p[1] for p in parsed} == {name}
    board = [p[2] for p in parsed]
    assert len(set(board)) == 8
    _run_gpu_pod(plugin, "two", {"nvidia.com/gpu": "2"}, "h100-node")
    two = [GPU_LINE.match(line).groups() for line in _listed(plugin, "two")]
    assert [p[0] for p in two] == ["0", "1"]
    assert len({p[2] for p in two}) == 2 and {p[2] for p in two} <= set(board)


def test_a_single_gpu_node_prints_the_capture_lines(plugin):
    pod = _run_gpu_pod(plugin, "l40s-list", {"nvidia.com/gpu": "1"}, "l40s-node")
    assert pod.status.phase == "Succeeded"
    assert _listed(plugin, "l40s-list") == [renumber(line, 0) for line in capture_list_lines(L40S)]


def test_without_the_nvidia_runtime_nothing_is_seen(plugin):
    plugin.core.create_namespaced_pod("default", gpu_pod("runc-list", {"nvidia.com/gpu": "1"}, "l40s-node",
                                                         ["sh", "-c", "nvidia-smi -L"], runtime=None))
    pod = plugin.wait_pod_phase("runc-list", "Failed")
    # runc does not inject the driver's tools: the image has no nvidia-smi.
    assert pod.status.container_statuses[0].state.terminated.exit_code == 127
    assert "nvidia-smi: not found" in plugin.core.read_namespaced_pod_log("runc-list", "default")


def test_pods_get_distinct_gpus_and_the_rest_waits(plugin):
    hold = ["sh", "-c", "nvidia-smi -L; sleep infinity"]
    for name, count in (("holder-a", "5"), ("holder-b", "3")):
        plugin.core.create_namespaced_pod("default", gpu_pod(name, {"nvidia.com/gpu": count}, "h100-node", hold))
        plugin.wait_pod_phase(name, "Running")
    uuids = {}
    for name in ("holder-a", "holder-b"):
        lines = wait_for(lambda n=name: _listed(plugin, n), what=f"{name}'s list")
        uuids[name] = {GPU_LINE.match(line).group(3) for line in lines}
    assert len(uuids["holder-a"]) == 5 and len(uuids["holder-b"]) == 3
    assert not uuids["holder-a"] & uuids["holder-b"]
    plugin.core.create_namespaced_pod("default", gpu_pod("one-more", {"nvidia.com/gpu": "1"}, "h100-node"))
    message = ("0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node "
               "affinity/selector. preemption: 0/4 nodes are available: 1 No preemption victims found for "
               "incoming pod, 3 Preemption is not helpful for scheduling.")
    events = wait_for(lambda: [e for e in plugin.events_for("one-more") if e.reason == "FailedScheduling"],
                      what="FailedScheduling")
    assert events[0].message == message and events[0].type == "Warning"
    pod = plugin.pod("one-more")
    assert pod.status.phase == "Pending"
    condition = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", message)
    plugin.core.create_namespaced_pod("default", gpu_pod("nine", {"nvidia.com/gpu": "9"}))
    events = wait_for(lambda: [e for e in plugin.events_for("nine") if e.reason == "FailedScheduling"],
                      what="FailedScheduling")
    assert events[0].message == ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes "
                                 "are available: 4 No preemption victims found for incoming pod.")
    plugin.core.delete_namespaced_pod("holder-b", "default")
    assert plugin.wait_pod_phase("one-more", "Succeeded").spec.node_name == "h100-node"
    assert {GPU_LINE.match(line).group(3) for line in _listed(plugin, "one-more")} <= uuids["holder-b"]
    for name in ("holder-a", "nine"):
        plugin.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_mixed_mig_strategy(plugin):
    _restart_plugin(plugin, plugin_config("mixed"))
    _wait_allocatable(plugin, {"h100-mig-node": {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                                                 "nvidia.com/mig-1g.10gb": "2", "nvidia.com/gpu": "0"},
                               "h100-node": {"nvidia.com/gpu": "8"}})
    # The whole GPU stays in the capacity with nothing allocatable once the plugin stopped offering it.
    assert plugin.node("h100-mig-node").status.capacity["nvidia.com/gpu"] == "1"
    _run_gpu_pod(plugin, "mig-slice", {"nvidia.com/mig-1g.10gb": "1"}, "h100-mig-node")
    capture = capture_list_lines(H100_MIG)
    gpu_line, mig_line = _listed(plugin, "mig-slice")
    assert gpu_line == renumber(capture[0], 0)
    assert mig_line in [renumber(line, 0) for line in capture[1:] if "MIG 1g.10gb" in line]


def test_single_mig_strategy_refuses_mixed_profiles(plugin):
    _restart_plugin(plugin, plugin_config("single"))

    def crashing():
        pods = plugin.core.list_namespaced_pod(PLUGIN_NS, field_selector="spec.nodeName=h100-mig-node").items
        pods = [p for p in pods if p.metadata.deletion_timestamp is None and p.status.container_statuses]
        status = pods and pods[0].status.container_statuses[0]
        return status and status.restart_count >= 1 and pods[0]
    pod = wait_for(crashing, timeout=20, what="the plugin on the MIG node restarting")
    log = plugin.core.read_namespaced_pod_log(pod.metadata.name, PLUGIN_NS)
    assert "invalid MIG configuration" in log
    _wait_allocatable(plugin, {"h100-node": {"nvidia.com/gpu": "8"}, "h100-mig-node": {"nvidia.com/mig-1g.10gb": "0"}})


def test_time_slicing_with_rename_by_default(plugin):
    slicing = {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    _restart_plugin(plugin, plugin_config("none", slicing))
    _wait_allocatable(plugin, {"h100-node": {"nvidia.com/gpu.shared": "32", "nvidia.com/gpu": "0"},
                               "l40s-node": {"nvidia.com/gpu.shared": "4"},
                               "h100-mig-node": {"nvidia.com/gpu.shared": "4"}})
    _run_gpu_pod(plugin, "shared", {"nvidia.com/gpu.shared": "1"}, "l40s-node")
    assert _listed(plugin, "shared") == [renumber(line, 0) for line in capture_list_lines(L40S)]


def test_deleting_the_plugin_leaves_nothing_allocatable(plugin):
    plugin.kubectl("delete", "ds", "nvidia-device-plugin", "-n", PLUGIN_NS, "--wait=true", "--timeout=20s")
    _wait_allocatable(plugin, {"h100-node": {"nvidia.com/gpu.shared": "0", "nvidia.com/gpu": "0"},
                               "l40s-node": {"nvidia.com/gpu.shared": "0"}})
    assert plugin.node("h100-node").status.capacity["nvidia.com/gpu"] == "8"
    plugin.core.create_namespaced_pod("default", gpu_pod("after", {"nvidia.com/gpu": "1"}))
    events = wait_for(lambda: [e for e in plugin.events_for("after") if e.reason == "FailedScheduling"],
                      what="FailedScheduling")
    assert "Insufficient nvidia.com/gpu" in events[0].message
    assert json.loads(plugin.kubectl("get", "pod", "after", "-o", "json").stdout)["status"]["phase"] == "Pending"


def test_the_plugin_without_the_nvidia_runtime_crash_loops(plugin):
    """NVIDIA's image brings no NVML: only the NVIDIA runtime puts it into the container, so a plugin
    under the default runc runtime finds no GPU and, failing on init errors, restarts."""
    plain = plugin_daemonset("plain-plugin")
    del plain["spec"]["template"]["spec"]["runtimeClassName"]
    plugin.apps.create_namespaced_daemon_set(PLUGIN_NS, plain)

    def restarted():
        pods = plugin.core.list_namespaced_pod(PLUGIN_NS, label_selector="app=plain-plugin",
                                               field_selector="spec.nodeName=l40s-node").items
        statuses = pods and pods[0].status.container_statuses
        return statuses and statuses[0].restart_count >= 1 and pods[0]
    pod = wait_for(restarted, timeout=20, what="the plugin without the NVIDIA runtime restarting")
    assert "did you configure the NVIDIA Container Toolkit?" in plugin.core.read_namespaced_pod_log(
        pod.metadata.name, PLUGIN_NS)
    assert _allocatable(plugin, "l40s-node", "nvidia.com/gpu") in ("0", None)
