"""Pod and node subresources: pods/log, pods/eviction with PodDisruptionBudgets (kubectl drain),
nodes/status, and cordoning (concepts/scheduling-eviction/api-eviction/,
tasks/administer-cluster/safely-drain-node/, tasks/administer-cluster/extended-resource-node/,
concepts/scheduling-eviction/taint-and-toleration/#taint-nodes-by-condition)."""

import pytest
from kubernetes.client.rest import ApiException

from sim_helpers import pod_manifest, status_of, wait_for, wait_until

CLUSTER = "basic.yml"


def test_pod_logs(simulator):
    simulator.core.create_namespaced_pod("default", pod_manifest(
        "talker", ["sh", "-c", "echo one; echo two; echo three"], restartPolicy="Never"))
    simulator.wait_pod_phase("talker", "Succeeded")
    assert simulator.kubectl("logs", "talker").stdout == "one\ntwo\nthree\n"
    assert simulator.kubectl("logs", "talker", "--tail=2").stdout == "two\nthree\n"
    assert simulator.kubectl("logs", "pod/talker", "-c", "main", "--tail=1").stdout == "three\n"
    assert simulator.core.read_namespaced_pod_log("talker", "default", tail_lines=1) == "three\n"
    stamped = simulator.kubectl("logs", "talker", "--timestamps").stdout.splitlines()
    assert len(stamped) == 3 and stamped[0].endswith("Z one")
    wrong = simulator.kubectl("logs", "talker", "-c", "nope", check=False)
    assert wrong.returncode == 1 and "container nope is not valid for pod talker" in wrong.stderr
    with pytest.raises(ApiException) as err:
        simulator.core.read_namespaced_pod_log("no-such-pod", "default")
    assert err.value.status == 404


def test_logs_of_a_pod_with_two_containers_need_a_name(simulator):
    pod = pod_manifest("pair", ["sleep", "infinity"])
    pod["spec"]["containers"].append({"name": "second", "image": "registry.example/tools:1.0",
                                      "command": ["sleep", "infinity"]})
    simulator.core.create_namespaced_pod("default", pod)
    simulator.wait_pod_phase("pair", "Running")
    with pytest.raises(ApiException) as err:
        simulator.core.read_namespaced_pod_log("pair", "default")
    assert err.value.status == 400
    assert "a container name must be specified for pod pair, choose one of: [main second]" in \
        status_of(err.value)["message"]


def _deployment_with_budget(sim, namespace, name, budget):
    sim.core.create_namespace({"metadata": {"name": namespace}})
    sim.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": name},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}}})
    sim.policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": name}, "spec": dict(budget, selector={"matchLabels": {"app": name}})})

    def settled():
        pods = sim.core.list_namespaced_pod(namespace, label_selector=f"app={name}").items
        pdb = sim.policy.read_namespaced_pod_disruption_budget(name, namespace)
        ready = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
        return len(ready) == 2 and pdb.status.current_healthy == 2 and pdb.status.observed_generation == 1 and \
            (pods, pdb)
    return wait_for(settled, what=f"{name}: two ready pods and the budget's status")


def test_eviction_refused_by_a_budget_is_429(simulator):
    pods, pdb = _deployment_with_budget(simulator, "evict-none", "guarded", {"minAvailable": 2})
    assert pdb.status.disruptions_allowed == 0 and pdb.status.desired_healthy == 2
    assert pdb.status.expected_pods == 2
    target = pods[0].metadata.name
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": target, "namespace": "evict-none"}}
    with pytest.raises(ApiException) as err:
        simulator.core.create_namespaced_pod_eviction(target, "evict-none", eviction)
    assert err.value.status == 429
    status = status_of(err.value)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert status["details"]["causes"][0]["message"] == \
        "The disruption budget guarded needs 2 healthy pods and has 2 currently"
    # The same through the dynamic client's pods/eviction subresource.
    pods_resource = simulator.dynamic.resources.get(api_version="v1", kind="Pod")
    with pytest.raises(ApiException) as err:
        pods_resource.subresources["eviction"].create(body=eviction, name=target, namespace="evict-none")
    assert err.value.status == 429
    assert simulator.core.read_namespaced_pod(target, "evict-none").metadata.deletion_timestamp is None


def test_drain_keeps_retrying_against_a_budget_and_times_out(simulator):
    pods = _deployment_with_budget(simulator, "drain-none", "stuck", {"maxUnavailable": 0})[0]
    node = pods[0].spec.node_name
    result = simulator.kubectl("drain", node, "--ignore-daemonsets", "--pod-selector=app=stuck", "--timeout=2s",
                               check=False, timeout=30)
    assert result.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in result.stderr
    assert "global timeout reached: 2s" in result.stderr
    assert simulator.node(node).spec.unschedulable is True
    assert simulator.core.read_namespaced_pod(pods[0].metadata.name, "drain-none").metadata.deletion_timestamp is None
    simulator.kubectl("uncordon", node)


def test_drain_with_a_budget_that_allows_one(simulator):
    pods, pdb = _deployment_with_budget(simulator, "drain-one", "movable", {"maxUnavailable": 1})
    assert pdb.status.disruptions_allowed == 1
    node = pods[0].spec.node_name
    result = simulator.kubectl("drain", node, "--ignore-daemonsets", "--pod-selector=app=movable",
                               "--timeout=20s", timeout=40)
    assert f"node/{node} drained" in result.stdout
    assert f"pod/{pods[0].metadata.name} evicted" in result.stdout
    gone = pods[0].metadata.name

    def replaced():
        now = simulator.core.list_namespaced_pod("drain-one", label_selector="app=movable").items
        running = [p for p in now if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        return len(running) == 2 and gone not in [p.metadata.name for p in running] and running
    running = wait_for(replaced, what="the ReplicaSet's replacement pod running")
    assert all(p.spec.node_name != node for p in running)
    assert simulator.node(node).spec.unschedulable is True
    simulator.kubectl("uncordon", node)


def test_node_status_patch_advertises_an_extended_resource(simulator):
    simulator.core.patch_node_status("node-c", {"status": {"capacity": {"example.com/dongle": "4"}}})
    node = wait_until(lambda: simulator.node("node-c"), lambda n: n.status.allocatable.get("example.com/dongle") == "4",
                      what="the kubelet to copy the capacity into allocatable")
    assert node.status.capacity["example.com/dongle"] == "4"
    pod = pod_manifest("dongle-user", ["sleep", "infinity"],
                       container={"resources": {"limits": {"example.com/dongle": "3"}}})
    simulator.core.create_namespaced_pod("default", pod)
    running = simulator.wait_pod_phase("dongle-user", "Running")
    assert running.spec.node_name == "node-c"
    assert running.spec.containers[0].resources.requests == {"example.com/dongle": "3"}


def test_cordon_and_uncordon(simulator):
    simulator.kubectl("cordon", "node-b")
    node = wait_until(lambda: simulator.node("node-b"), lambda n: n.spec.taints, what="the taint")
    assert node.spec.unschedulable is True
    assert [(t.key, t.effect) for t in node.spec.taints] == [("node.kubernetes.io/unschedulable", "NoSchedule")]
    assert node.spec.taints[0].time_added is not None
    row = simulator.kubectl("get", "node", "node-b", "--no-headers").stdout.split()
    assert row[1] == "Ready,SchedulingDisabled"
    simulator.core.create_namespaced_pod("default", pod_manifest("wants-b", ["sleep", "infinity"],
                                                                 nodeSelector={"zone": "b"}))
    pending = wait_until(lambda: simulator.pod("wants-b"), lambda p: p.status.conditions, what="a scheduling verdict")
    assert pending.status.phase == "Pending"
    scheduled = next(c for c in pending.status.conditions if c.type == "PodScheduled")
    assert scheduled.status == "False" and scheduled.reason == "Unschedulable"
    assert "1 node(s) were unschedulable" in scheduled.message
    simulator.kubectl("uncordon", "node-b")
    node = wait_until(lambda: simulator.node("node-b"), lambda n: not n.spec.taints, what="no taint")
    assert not node.spec.unschedulable
    assert simulator.wait_pod_phase("wants-b", "Running").spec.node_name == "node-b"
