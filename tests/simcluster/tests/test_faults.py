"""Faults injected through the simulator's own endpoint (POST /simcluster/v1/faults), seen only
through kubectl and the Python client, as a real cluster shows such failures: a node that stops
reporting (node-lifecycle controller: Unknown conditions, unreachable taints), lost GPUs, a
crash-looping device plugin, refused evictions, API errors and slow container starts."""

import time

import pytest
from kubernetes.client.rest import ApiException

from sim_helpers import pod_manifest, status_of, wait_for, wait_until

CLUSTER = "gpu-faults.yml"
PLUGIN_NS = "kube-system"


@pytest.fixture(autouse=True)
def no_faults_left(simulator):
    yield
    simulator.clear_faults()


@pytest.fixture(scope="module", autouse=True)
def plugin_ready(simulator):
    wait_for(lambda: (simulator.node("h100-node").status.allocatable or {}).get("nvidia.com/gpu") == "8"
             and (simulator.node("l40s-node").status.allocatable or {}).get("nvidia.com/gpu") == "1",
             timeout=20, what="the device plugin's GPUs")


def _ready(node):
    return next(c for c in node.status.conditions if c.type == "Ready")


def test_api_errors_for_n_requests(simulator):
    simulator.fault("api-errors", count=2, code=500)
    for attempt in range(2):
        with pytest.raises(ApiException) as err:
            simulator.core.list_namespaced_pod("default")
        assert err.value.status == 500, attempt
        status = status_of(err.value)
        assert status["kind"] == "Status" and status["reason"] == "InternalError" and status["code"] == 500
    assert simulator.core.list_namespaced_pod("default").items is not None


def test_api_errors_on_one_path_and_verb(simulator):
    simulator.fault("api-errors", count=1, code=500, verb="POST", path="/configmaps")
    assert simulator.kubectl("get", "configmaps").returncode == 0
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: faulted}\n"
    failed = simulator.kubectl("create", "-f", "-", stdin=manifest, check=False)
    assert failed.returncode == 1 and "Error from server (InternalError)" in failed.stderr
    assert simulator.kubectl("get", "configmap", "faulted", check=False).returncode == 1
    simulator.kubectl("create", "-f", "-", stdin=manifest)


def test_a_request_refused_before_its_body_was_read_leaves_the_connection_clean(simulator):
    """The client keeps its connection open after a 500; the body of the refused create must not be read
    as the start of the next request on it (as a real server reads or discards it)."""
    simulator.fault("api-errors", count=1, code=500, verb="POST", path="/configmaps$")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept-alive"}, "data": {"a": "b" * 2000}}
    with pytest.raises(ApiException) as err:
        simulator.core.create_namespaced_config_map("default", body)
    assert err.value.status == 500
    made = simulator.core.create_namespaced_config_map("default", body)
    assert made.metadata.name == "kept-alive" and made.data == body["data"]
    simulator.core.delete_namespaced_config_map("kept-alive", "default")


def test_node_not_ready(simulator):
    simulator.fault("node-not-ready", node="l40s-node", seconds=2)

    def unknown():
        node = simulator.node("l40s-node")
        return _ready(node).status == "Unknown" and len(node.spec.taints or []) == 2 and node
    node = wait_for(unknown, what="Ready Unknown and the unreachable taints")
    assert _ready(node).reason == "NodeStatusUnknown"
    assert _ready(node).message == "Kubelet stopped posting node status."
    assert sorted((t.key, t.effect) for t in node.spec.taints) == [
        ("node.kubernetes.io/unreachable", "NoExecute"), ("node.kubernetes.io/unreachable", "NoSchedule")]
    row = simulator.kubectl("get", "node", "l40s-node", "--no-headers").stdout.split()
    assert row[1] == "NotReady"
    # A new pod does not go to the unreachable node.
    simulator.core.create_namespaced_pod("default", pod_manifest(
        "avoids-down-node", ["sleep", "infinity"], nodeSelector={"kubernetes.io/hostname": "l40s-node"}))
    events = wait_for(lambda: [e for e in simulator.events_for("avoids-down-node") if e.reason == "FailedScheduling"],
                      what="FailedScheduling")
    assert "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }" in events[0].message
    node = wait_until(lambda: simulator.node("l40s-node"), lambda n: _ready(n).status == "True" and not n.spec.taints,
                      what="the node back")
    assert _ready(node).reason == "KubeletReady"
    assert simulator.wait_pod_phase("avoids-down-node", "Running").spec.node_name == "l40s-node"


def test_gpu_lost(simulator):
    simulator.fault("gpu-lost", node="h100-node", gpus=1)
    wait_for(lambda: simulator.node("h100-node").status.allocatable["nvidia.com/gpu"] == "7",
             what="one GPU less allocatable")
    assert simulator.node("h100-node").status.capacity["nvidia.com/gpu"] == "8"
    simulator.clear_faults()
    wait_for(lambda: simulator.node("h100-node").status.allocatable["nvidia.com/gpu"] == "8",
             what="the GPU back")


def _plugin_pod(sim, node):
    pods = sim.core.list_namespaced_pod(PLUGIN_NS, field_selector=f"spec.nodeName={node}").items
    return next((p for p in pods if p.metadata.deletion_timestamp is None), None)


def test_plugin_crashloop(simulator):
    simulator.fault("plugin-crashloop", node="l40s-node")
    old = _plugin_pod(simulator, "l40s-node")
    simulator.core.delete_namespaced_pod(old.metadata.name, PLUGIN_NS)

    def looping():
        pod = _plugin_pod(simulator, "l40s-node")
        status = pod and pod.metadata.uid != old.metadata.uid and (pod.status.container_statuses or [None])[0]
        return status and status.restart_count >= 1 and status.state.waiting and \
            status.state.waiting.reason == "CrashLoopBackOff" and pod
    pod = wait_for(looping, what="the new plugin pod in CrashLoopBackOff")
    assert pod.status.container_statuses[0].last_state.terminated.exit_code != 0
    assert "failed to initialize NVML" in simulator.core.read_namespaced_pod_log(pod.metadata.name, PLUGIN_NS)
    wait_for(lambda: simulator.node("l40s-node").status.allocatable["nvidia.com/gpu"] == "0",
             what="no GPU allocatable while the plugin is down")
    simulator.clear_faults()
    wait_for(lambda: simulator.node("l40s-node").status.allocatable["nvidia.com/gpu"] == "1", timeout=20,
             what="the plugin's GPU back after its next restart")


def test_eviction_refused_for_some_seconds(simulator):
    simulator.core.create_namespaced_pod("default", pod_manifest("evictee", ["sleep", "infinity"]))
    simulator.wait_pod_phase("evictee", "Running")
    simulator.fault("eviction-refused", seconds=1)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "evictee", "namespace": "default"}}
    with pytest.raises(ApiException) as err:
        simulator.core.create_namespaced_pod_eviction("evictee", "default", eviction)
    assert err.value.status == 429 and status_of(err.value)["reason"] == "TooManyRequests"
    wait_for(lambda: simulator.core.create_namespaced_pod_eviction("evictee", "default", eviction), timeout=5,
             what="the eviction accepted once the fault is over")
    wait_for(lambda: not simulator.core.list_namespaced_pod("default", field_selector="metadata.name=evictee").items,
             what="the evicted pod gone")


def test_slow_pod_start(simulator):
    simulator.fault("slow-pod-start", delay=1)
    started = time.monotonic()
    simulator.core.create_namespaced_pod("default", pod_manifest("slow", ["sleep", "infinity"]))

    def creating():
        pod = simulator.pod("slow")
        statuses = pod.status.container_statuses or []
        return statuses and statuses[0].state.waiting and pod
    pod = wait_for(creating, what="the pod bound, its container not started")
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert simulator.kubectl("get", "pod", "slow", "--no-headers").stdout.split()[2] == "ContainerCreating"
    simulator.wait_pod_phase("slow", "Running")
    assert time.monotonic() - started >= 0.9
