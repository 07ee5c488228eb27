"""The GPU nodes' stand-in (gpunodes.py) on the real control plane, started from a cluster file
by testcluster.py, and driven only through real clients: what NVIDIA's device plugin makes a
Node advertise, what a container's nvidia-smi prints, and the faults."""

import json
import pathlib
import subprocess
import sys
import time

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from test_controlplane import KUBECTL, wait_for

HERE = pathlib.Path(__file__).resolve().parent
TESTCLUSTER = HERE.parent / "testcluster.py"
CAPTURE = "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"
CLUSTER = {
    "timing": {"nodeMonitorGracePeriod": 8, "pluginRegister": 0.5},
    "nodes": [
        {"name": "gpu-x", "labels": {"nvidia.com/gpu.present": "true"}, "gpus": {"capture": CAPTURE},
         "runtime": {"defaultRuntime": "nvidia"}},
        {"name": "cpu-x"},
    ],
    "namespaces": ["work"],
}
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("testcluster")
    cluster_file = state / "cluster.yml"
    cluster_file.write_text(yaml.safe_dump(CLUSTER))
    kubeconfig = state / "kubeconfig"
    subprocess.run([sys.executable, str(TESTCLUSTER), "start", "--cluster", str(cluster_file), "--kubeconfig",
                    str(kubeconfig), "--state", str(state / "run"), "--ttl", "900"], check=True)
    try:
        yield kubeconfig
    finally:
        subprocess.run([sys.executable, str(TESTCLUSTER), "stop", "--state", str(state / "run")], check=True)


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(config.new_client_from_config(str(cluster)))


def run_testcluster(cluster, *args):
    out = subprocess.run([sys.executable, str(TESTCLUSTER), *args[:1], "--kubeconfig", str(cluster), *args[1:]],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def plugin_pod(name="plugin", node="gpu-x"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "plugin"}},
            "spec": {"nodeName": node, "containers": [{
                "name": "nvidia-device-plugin-ctr", "image": PLUGIN_IMAGE,
                "command": ["nvidia-device-plugin"],
                "volumeMounts": [{"name": "dp", "mountPath": "/var/lib/kubelet/device-plugins"}]}],
                "volumes": [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]}}


def smoke_pod(name, gpus=1, node=None):
    spec = {"restartPolicy": "Never", "containers": [{
        "name": "smoke", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        "command": ["/bin/sh", "-c", "nvidia-smi -L >/dev/termination-log 2>&1; status=$?; "
                                     "cat /dev/termination-log; exit $status"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def finished(core, name):
    pod = core.read_namespaced_pod(name, "default")
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


def test_nodes_come_from_the_cluster_file(core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert set(nodes) == {"gpu-x", "cpu-x"}
    assert nodes["gpu-x"].metadata.labels["nvidia.com/gpu.present"] == "true"
    assert "nvidia.com/gpu" not in (nodes["gpu-x"].status.allocatable or {})
    assert core.read_namespace("work").status.phase == "Active"


def test_device_plugin_makes_the_node_advertise_its_gpus(core):
    core.create_namespaced_pod("default", plugin_pod())
    node = wait_for(lambda: (n := core.read_node("gpu-x")).status.allocatable.get("nvidia.com/gpu") == "2" and n,
                    what="gpu-x advertising its 2 GPUs")
    assert node.status.capacity["nvidia.com/gpu"] == "2"


def test_a_container_sees_the_gpu_it_was_granted(cluster, core):
    core.create_namespaced_pod("default", smoke_pod("smoke-one", gpus=1))
    pod = wait_for(lambda: finished(core, "smoke-one"), what="smoke-one finished")
    assert pod.spec.node_name == "gpu-x"  # placed by the real scheduler on the node with GPUs
    assert pod.status.phase == "Succeeded"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0
    lines = terminated.message.splitlines()
    assert len(lines) == 1 and lines[0].startswith("GPU 0: NVIDIA RTX A5000 (UUID: GPU-")
    logs = subprocess.run([KUBECTL, "--kubeconfig", str(cluster), "logs", "smoke-one"], capture_output=True,
                          text=True, check=True).stdout
    assert logs == terminated.message


def test_two_pods_get_distinct_gpus(core):
    core.create_namespaced_pod("default", smoke_pod("smoke-two", gpus=2))
    pod = wait_for(lambda: finished(core, "smoke-two"), what="smoke-two finished")
    message = pod.status.container_statuses[0].state.terminated.message
    uuids = [line.split("UUID: ")[1].rstrip(")") for line in message.splitlines()]
    assert len(set(uuids)) == 2


def test_a_container_without_the_nvidia_runtime_sees_no_gpu(core):
    pod = smoke_pod("no-runtime", gpus=0, node="cpu-x")
    core.create_namespaced_pod("default", pod)
    done = wait_for(lambda: finished(core, "no-runtime"), what="no-runtime finished")
    terminated = done.status.container_statuses[0].state.terminated
    assert done.status.phase == "Failed"
    assert terminated.exit_code == 127
    assert "nvidia-smi: not found" in terminated.message


def test_gpu_lost_lowers_allocatable_and_comes_back(cluster, core):
    run_testcluster(cluster, "fault", "gpu-lost", "node=gpu-x", "gpus=1")
    wait_for(lambda: core.read_node("gpu-x").status.allocatable.get("nvidia.com/gpu") == "1",
             what="gpu-x allocatable 1")
    assert core.read_node("gpu-x").status.capacity["nvidia.com/gpu"] == "2"
    assert run_testcluster(cluster, "faults", "--clear")["faults"] == []
    wait_for(lambda: core.read_node("gpu-x").status.allocatable.get("nvidia.com/gpu") == "2",
             what="gpu-x allocatable 2 again")


def test_plugin_crash_loop_and_recovery(cluster, core):
    run_testcluster(cluster, "fault", "plugin-crashloop", "node=gpu-x")

    def crash_looping():
        statuses = core.read_namespaced_pod("plugin", "default").status.container_statuses or []
        waiting = statuses[0].state.waiting if statuses else None
        return statuses[0] if waiting and waiting.reason == "CrashLoopBackOff" else None

    status = wait_for(crash_looping, what="the plugin in CrashLoopBackOff")
    assert status.last_state.terminated.exit_code == 1
    assert "failed to initialize NVML" in status.last_state.terminated.message
    assert status.restart_count >= 1
    # the kubelet marks a disconnected plugin's devices unhealthy: none allocatable, the capacity kept
    node = core.read_node("gpu-x")
    assert (node.status.allocatable["nvidia.com/gpu"], node.status.capacity["nvidia.com/gpu"]) == ("0", "2")
    run_testcluster(cluster, "faults", "--clear")
    wait_for(lambda: core.read_namespaced_pod("plugin", "default").status.container_statuses[0].ready,
             what="the plugin ready again")
    wait_for(lambda: core.read_node("gpu-x").status.allocatable.get("nvidia.com/gpu") == "2",
             what="gpu-x advertising again")
    time.sleep(3)  # and it stays so: no crash-loop kwok had queued is played over it
    recovered = core.read_namespaced_pod("plugin", "default").status.container_statuses[0]
    assert recovered.ready and recovered.state.running


def test_plugin_gone_leaves_no_gpu_allocatable(core):
    core.delete_namespaced_pod("plugin", "default", grace_period_seconds=0)
    wait_for(lambda: core.read_node("gpu-x").status.allocatable.get("nvidia.com/gpu") == "0",
             what="gpu-x allocatable 0")
    core.create_namespaced_pod("default", plugin_pod("plugin-again"))
    wait_for(lambda: core.read_node("gpu-x").status.allocatable.get("nvidia.com/gpu") == "2",
             what="gpu-x allocatable 2")


def test_eviction_refused_by_the_real_eviction_api(cluster, core):
    """Pods with no budget get one of the fault's; a pod its own budget covers keeps that one only
    (two budgets over one pod make the eviction API answer 500, not 429), set to allow nothing
    while the fault lasts and put back after."""
    policy = client.PolicyV1Api(core.api_client)
    for name in ("held", "budgeted"):
        core.create_namespaced_pod("work", {"apiVersion": "v1", "kind": "Pod",
                                            "metadata": {"name": name, "labels": {"app": name}},
                                            "spec": {"nodeName": "cpu-x", "containers": [
                                                {"name": "c", "image": "example.invalid/app:1",
                                                 "command": ["sleep", "infinity"]}]}})
    # minAvailable, not maxUnavailable: a budget over a pod no controller owns can only count it
    # with a whole number of pods (the disruption controller allows nothing otherwise)
    policy.create_namespaced_pod_disruption_budget("work", {
        "metadata": {"name": "budgeted"}, "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "budgeted"}}}})
    for name in ("held", "budgeted"):
        wait_for(lambda name=name: core.read_namespaced_pod(name, "work").status.phase == "Running",
                 what=f"{name} Running")
    run_testcluster(cluster, "fault", "eviction-refused", "namespace=work", "seconds=6")
    assert policy.read_namespaced_pod_disruption_budget("budgeted", "work").spec.max_unavailable == 0
    for name in ("gpufleet-test-eviction-refused", "budgeted"):
        wait_for(lambda name=name: (s := policy.read_namespaced_pod_disruption_budget(name, "work").status)
                 and s.observed_generation == policy.read_namespaced_pod_disruption_budget(name, "work").metadata.generation
                 and s.disruptions_allowed == 0, what=f"the disruption controller's status of {name}")
    for name in ("held", "budgeted"):
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod_eviction(name, "work", {"metadata": {"name": name, "namespace": "work"}})
        assert refused.value.status == 429, refused.value.body
        assert "disruption budget" in json.loads(refused.value.body)["message"]
    # the fault ends by itself after its seconds: the budget of the fault gone, the other put back
    wait_for(lambda: [b.metadata.name for b in policy.list_namespaced_pod_disruption_budget("work").items] == ["budgeted"],
             timeout=20, what="the fault's budget gone")
    restored = policy.read_namespaced_pod_disruption_budget("budgeted", "work").spec
    assert (restored.min_available, restored.max_unavailable) == (0, None)
    assert "gpufleet.test/eviction-refused" not in (core.read_namespaced_pod("held", "work").metadata.labels or {})
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget("budgeted", "work").status.disruptions_allowed == 1,
             what="budgeted allowing one disruption again")
    for name in ("held", "budgeted"):
        core.create_namespaced_pod_eviction(name, "work", {"metadata": {"name": name, "namespace": "work"}})


def pod_ready(core, name, namespace="work"):
    conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
    return next((c.status for c in conditions if c.type == "Ready"), None)


def test_node_not_ready_after_the_grace_period(cluster, core):
    core.create_namespaced_pod("work", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "steady"},
                                        "spec": {"nodeName": "cpu-x", "containers": [
                                            {"name": "c", "image": "example.invalid/app:1",
                                             "command": ["sleep", "infinity"]}]}})
    wait_for(lambda: pod_ready(core, "steady") == "True", what="steady Ready")
    started = time.monotonic()
    run_testcluster(cluster, "fault", "node-not-ready", "node=cpu-x")

    def unknown():
        ready = next(c for c in core.read_node("cpu-x").status.conditions if c.type == "Ready")
        return ready if ready.status == "Unknown" else None

    ready = wait_for(unknown, timeout=60, what="cpu-x Unknown")
    assert ready.reason == "NodeStatusUnknown"
    # not before kube-controller-manager's grace period (8 s) counted from the last renewal of the Node's
    # Lease, which kwok renews every quarter of its 8 s duration: at least 6 s after the fault
    assert time.monotonic() - started >= 6
    taints = {t.key for t in core.read_node("cpu-x").spec.taints or []}
    assert "node.kubernetes.io/unreachable" in taints
    # the node lifecycle controller marks the node's pods not Ready
    wait_for(lambda: pod_ready(core, "steady") == "False", what="steady marked not Ready")
    run_testcluster(cluster, "faults", "--clear")
    wait_for(lambda: next(c for c in core.read_node("cpu-x").status.conditions if c.type == "Ready").status == "True",
             timeout=60, what="cpu-x Ready again")
    # and its kubelet, back, writes them Ready again
    wait_for(lambda: pod_ready(core, "steady") == "True", what="steady Ready again")
