"""The DaemonSet controller: which nodes get a pod (nodeSelector, node affinity, taints and
tolerations), the pods it makes, its status counters, rolling updates and kubectl rollout
(concepts/workloads/controllers/daemonset/, tasks/manage-daemon/update-daemon-set/)."""

import json

from sim_helpers import wait_for

CLUSTER = "daemonset.yml"
NS = "default"


def _ds(name, **pod_spec):
    spec = {"containers": [{"name": "agent", "image": "registry.example/agent:1", "command": ["sleep", "infinity"]}]}
    spec.update(pod_spec)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"ds": name}},
                     "template": {"metadata": {"labels": {"ds": name}}, "spec": spec}}}


def _nodes_of(sim, name):
    pods = sim.core.list_namespaced_pod(NS, label_selector=f"ds={name}").items
    return sorted(p.spec.node_name for p in pods if p.metadata.deletion_timestamp is None)


def _rolled_out(sim, name, desired):
    def check():
        ds = sim.apps.read_namespaced_daemon_set(name, NS)
        status = ds.status
        return status.observed_generation == ds.metadata.generation and \
            status.desired_number_scheduled == desired and status.number_ready == desired and \
            (status.updated_number_scheduled or 0) == desired and (status.number_available or 0) == desired and ds
    return wait_for(check, what=f"daemonset {name} rolled out on {desired} nodes")


def test_a_daemonset_skips_nodes_with_untolerated_taints(simulator):
    simulator.apps.create_namespaced_daemon_set(NS, _ds("everywhere"))
    ds = _rolled_out(simulator, "everywhere", 3)
    assert _nodes_of(simulator, "everywhere") == ["cpu-1", "cpu-2", "gpu-1"]
    status = ds.status
    assert status.current_number_scheduled == 3 and status.number_misscheduled == 0
    assert not status.number_unavailable


def test_tolerating_the_taint_adds_the_node(simulator):
    simulator.apps.create_namespaced_daemon_set(NS, _ds("tolerant", tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]))
    _rolled_out(simulator, "tolerant", 4)
    assert _nodes_of(simulator, "tolerant") == ["cpu-1", "cpu-2", "gpu-1", "gpu-2"]
    simulator.apps.create_namespaced_daemon_set(NS, _ds("wrong-value", tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}]))
    _rolled_out(simulator, "wrong-value", 3)
    assert "gpu-2" not in _nodes_of(simulator, "wrong-value")


def test_node_selector_and_affinity(simulator):
    simulator.apps.create_namespaced_daemon_set(NS, _ds("selected", nodeSelector={"gpu": "true"},
                                                        tolerations=[{"operator": "Exists"}]))
    _rolled_out(simulator, "selected", 2)
    assert _nodes_of(simulator, "selected") == ["gpu-1", "gpu-2"]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}, {"key": "disk", "operator": "Exists"}]}]}}}
    simulator.apps.create_namespaced_daemon_set(NS, _ds("affine", affinity=affinity))
    _rolled_out(simulator, "affine", 1)
    assert _nodes_of(simulator, "affine") == ["cpu-2"]
    pod = simulator.core.list_namespaced_pod(NS, label_selector="ds=affine").items[0]
    # The controller pins its pod to the node: its required terms become one matchFields term
    # (ReplaceDaemonSetPodNodeNameNodeAffinity).
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert len(terms) == 1 and not terms[0].match_expressions
    assert [(f.key, f.operator, f.values) for f in terms[0].match_fields] == [("metadata.name", "In", ["cpu-2"])]


def test_relabelled_node_loses_its_pod(simulator):
    simulator.core.patch_node("cpu-1", {"metadata": {"labels": {"role": "edge"}}})
    simulator.apps.create_namespaced_daemon_set(NS, _ds("edge", nodeSelector={"role": "edge"}))
    _rolled_out(simulator, "edge", 1)
    assert _nodes_of(simulator, "edge") == ["cpu-1"]
    simulator.core.patch_node("cpu-1", {"metadata": {"labels": {"role": None}}})
    wait_for(lambda: not _nodes_of(simulator, "edge"), what="the pod removed from the relabelled node")
    wait_for(lambda: simulator.apps.read_namespaced_daemon_set("edge", NS).status.desired_number_scheduled == 0,
             what="desired 0")


def test_daemon_pods_carry_the_controllers_marks(simulator):
    simulator.apps.create_namespaced_daemon_set(NS, _ds("marks"))
    ds = _rolled_out(simulator, "marks", 3)
    pods = simulator.core.list_namespaced_pod(NS, label_selector="ds=marks").items
    for pod in pods:
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid, owner.controller) == ("DaemonSet", "marks", ds.metadata.uid, True)
        assert pod.metadata.labels["pod-template-generation"] == "1"
        assert pod.metadata.labels["controller-revision-hash"]
        tolerations = {(t.key, t.effect, t.operator) for t in pod.spec.tolerations}
        assert {("node.kubernetes.io/not-ready", "NoExecute", "Exists"),
                ("node.kubernetes.io/unreachable", "NoExecute", "Exists"),
                ("node.kubernetes.io/disk-pressure", "NoSchedule", "Exists"),
                ("node.kubernetes.io/memory-pressure", "NoSchedule", "Exists"),
                ("node.kubernetes.io/pid-pressure", "NoSchedule", "Exists"),
                ("node.kubernetes.io/unschedulable", "NoSchedule", "Exists")} <= tolerations
        # No tolerationSeconds: daemon pods stay on a node that is not ready.
        assert all(t.toleration_seconds is None for t in pod.spec.tolerations if t.effect == "NoExecute")
    events = simulator.core.list_namespaced_event(NS, field_selector="involvedObject.kind=DaemonSet,"
                                                                     "involvedObject.name=marks").items
    assert sum(1 for e in events if e.reason == "SuccessfulCreate") == 3


def test_rolling_update_and_rollout_status(simulator):
    simulator.apps.create_namespaced_daemon_set(NS, _ds("rolling"))
    simulator.kubectl("rollout", "status", "ds/rolling", "--timeout=20s")
    first = {p.metadata.labels["controller-revision-hash"]
             for p in simulator.core.list_namespaced_pod(NS, label_selector="ds=rolling").items}
    assert len(first) == 1
    simulator.kubectl("set", "image", "ds/rolling", "agent=registry.example/agent:2")
    out = simulator.kubectl("rollout", "status", "ds/rolling", "--timeout=20s").stdout
    assert 'daemon set "rolling" successfully rolled out' in out
    ds = _rolled_out(simulator, "rolling", 3)
    assert ds.metadata.generation == 2 and ds.status.observed_generation == 2
    pods = simulator.core.list_namespaced_pod(NS, label_selector="ds=rolling").items
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    assert len(live) == 3
    hashes = {p.metadata.labels["controller-revision-hash"] for p in live}
    assert len(hashes) == 1 and hashes != first
    assert {p.spec.containers[0].image for p in live} == {"registry.example/agent:2"}
    assert {p.metadata.labels["pod-template-generation"] for p in live} == {"2"}


def test_controller_revisions_record_the_history(simulator):
    simulator.apps.create_namespaced_daemon_set(NS, _ds("history"))
    _rolled_out(simulator, "history", 3)
    patch = {"spec": {"template": {"metadata": {"annotations": {"changed": "yes"}}}}}
    simulator.kubectl("patch", "ds", "history", "-p", json.dumps(patch))
    _rolled_out(simulator, "history", 3)
    revisions = [r for r in simulator.apps.list_namespaced_controller_revision(NS).items
                 if r.metadata.owner_references and r.metadata.owner_references[0].name == "history"]
    assert sorted(r.revision for r in revisions) == [1, 2]
    hashes = {p.metadata.labels["controller-revision-hash"]
              for p in simulator.core.list_namespaced_pod(NS, label_selector="ds=history").items}
    newest = max(revisions, key=lambda r: r.revision)
    assert hashes == {newest.metadata.labels["controller-revision-hash"]}
    history = simulator.kubectl("rollout", "history", "ds/history").stdout
    assert "REVISION" in history and "1 " in history and "2 " in history
