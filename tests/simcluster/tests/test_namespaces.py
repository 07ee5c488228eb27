"""Namespace deletion as kube-apiserver and the namespace controller do it, seen through kubectl and the
Python client: DELETE marks the namespace Terminating; the controller deletes its content, reports
what is left in the namespace's conditions and finalizes it once nothing is left; NamespaceLifecycle
refuses new content meanwhile (pkg/registry/core/namespace/storage/storage.go,
pkg/controller/namespace/deletion/, staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/,
kubernetes.io/docs/tasks/administer-cluster/namespaces/)."""

import json

import pytest
import yaml
from kubernetes import watch
from kubernetes.client.rest import ApiException

from sim_helpers import pod_manifest, status_of, wait_for, wait_until

CLUSTER = "basic.yml"
HOLD = "example.com/hold"
ALL_CLEAR = {
    "NamespaceDeletionDiscoveryFailure": ("False", "ResourcesDiscovered", "All resources successfully discovered"),
    "NamespaceDeletionGroupVersionParsingFailure": ("False", "ParsedGroupVersions",
                                                    "All legacy kube types successfully parsed"),
    "NamespaceDeletionContentFailure": ("False", "ContentDeleted",
                                        "All content successfully deleted, may be waiting on finalization"),
    "NamespaceContentRemaining": ("False", "ContentRemoved", "All content successfully removed"),
    "NamespaceFinalizersRemaining": ("False", "ContentHasNoFinalizers", "All content-preserving finalizers finished"),
}
HELD = dict(ALL_CLEAR, NamespaceContentRemaining=(
    "True", "SomeResourcesRemain", "Some resources are remaining: configmaps. has 1 resource instances"),
    NamespaceFinalizersRemaining=("True", "SomeFinalizersRemain",
                                  f"Some content in the namespace has finalizers remaining: {HOLD} in 1 resource "
                                  "instances"))


def _conditions(namespace):
    return {c.type: (c.status, c.reason, c.message) for c in namespace.status.conditions or []}


def _held_config_map(name, namespace):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "finalizers": [HOLD]}, "data": {"a": "1"}}


def _stuck(sim, name):
    """A namespace deleted while a ConfigMap in it has a finalizer nobody removes."""
    sim.core.create_namespace({"metadata": {"name": name}})
    sim.core.create_namespaced_config_map(name, _held_config_map("held", name))
    sim.core.delete_namespace(name)
    return wait_until(lambda: sim.core.read_namespace(name), lambda ns: _conditions(ns) == HELD,
                      what=f"{name} stuck on its content's finalizer")


def _gone(sim, name):
    def missing():
        try:
            sim.core.read_namespace(name)
        except ApiException as err:
            return err.status == 404
        return False
    wait_for(missing, what=f"namespace {name} gone")


def test_deleting_a_namespace_removes_its_content_then_the_namespace(simulator):
    core = simulator.core
    core.create_namespace({"metadata": {"name": "going"}})
    core.create_namespaced_config_map("going", {"metadata": {"name": "settings"}, "data": {"a": "1"}})
    core.create_namespaced_pod("going", pod_manifest("worker", ["sleep", "infinity"], namespace="going"))
    simulator.wait_pod_phase("worker", "Running", namespace="going")
    start = core.read_namespace("going").metadata.resource_version
    core.delete_namespace("going")
    seen = []
    for event in watch.Watch().stream(core.list_namespace, field_selector="metadata.name=going",
                                      resource_version=start, timeout_seconds=15):
        seen.append((event["type"], event["object"]))
        if event["type"] == "DELETED":
            break
    kinds = [kind for kind, _ns in seen]
    assert kinds[-1] == "DELETED" and set(kinds[:-1]) == {"MODIFIED"}, kinds
    # The DELETE only marks it: deletionTimestamp, phase Terminating, the "kubernetes" finalizer still there.
    marked = seen[0][1]
    assert marked.metadata.deletion_timestamp is not None and marked.status.phase == "Terminating"
    assert marked.spec.finalizers == ["kubernetes"]
    # While the pod's graceful deletion runs, the controller says what remains...
    waiting = [ns for _kind, ns in seen if _conditions(ns).get("NamespaceContentRemaining", ("",))[0] == "True"]
    assert waiting, [_conditions(ns) for _kind, ns in seen]
    assert _conditions(waiting[0]) == dict(ALL_CLEAR, NamespaceContentRemaining=(
        "True", "SomeResourcesRemain", "Some resources are remaining: pods. has 1 resource instances"))
    # ...and once the content is gone all five conditions are False before the namespace goes.
    assert _conditions(seen[-2][1]) == ALL_CLEAR
    assert all(ns.metadata.deletion_timestamp == marked.metadata.deletion_timestamp for _kind, ns in seen)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("settings", "going")
    assert err.value.status == 404


def test_a_terminating_namespace_refuses_new_content(simulator):
    _stuck(simulator, "closing")
    with pytest.raises(ApiException) as err:
        simulator.core.create_namespaced_config_map("closing", {"metadata": {"name": "late"}})
    status = status_of(err.value)
    assert err.value.status == 403 and status["reason"] == "Forbidden" and status["code"] == 403
    assert status["message"] == ('configmaps "late" is forbidden: unable to create new content in namespace '
                                 "closing because it is being terminated")
    assert status["details"] == {"name": "late", "kind": "configmaps", "causes": [
        {"reason": "NamespaceTerminating", "message": "namespace closing is being terminated",
         "field": "metadata.namespace"}]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "closing"},
                  "spec": {"selector": {"matchLabels": {"app": "web"}},
                           "template": {"metadata": {"labels": {"app": "web"}},
                                        "spec": {"containers": [{"name": "web", "image": "registry.example/app:1"}]}}}}
    made = simulator.kubectl("create", "-f", "-", check=False, stdin=yaml.safe_dump(deployment))
    assert made.returncode == 1
    assert ('Error from server (Forbidden): error when creating "STDIN": deployments.apps "web" is forbidden: unable '
            "to create new content in namespace closing because it is being terminated") in made.stderr
    # An Eviction is a create too (kubectl drain waits for such pods instead).
    with pytest.raises(ApiException) as err:
        simulator.core.create_namespaced_pod_eviction("anything", "closing", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "anything", "namespace": "closing"}})
    assert err.value.status == 403 and status_of(err.value)["details"]["causes"][0]["reason"] == \
        "NamespaceTerminating"
    # What is there may still change.
    simulator.core.patch_namespaced_config_map("held", "closing", {"data": {"a": "2"}})
    assert simulator.core.read_namespaced_config_map("held", "closing").data == {"a": "2"}


def test_apply_to_a_terminating_namespace_neither_deletes_nor_revives_it(simulator):
    before = _stuck(simulator, "applied")
    manifest = {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "applied", "labels": {"team": "a"}}, "spec": {"finalizers": []}}
    simulator.apply_yaml(yaml.safe_dump(manifest), "--server-side", "--field-manager=operator")
    simulator.apply_yaml(yaml.safe_dump(manifest))
    after = simulator.core.read_namespace("applied")
    assert after.metadata.uid == before.metadata.uid
    assert after.metadata.deletion_timestamp == before.metadata.deletion_timestamp
    assert after.status.phase == "Terminating" and after.spec.finalizers == ["kubernetes"]
    assert after.metadata.labels["team"] == "a"
    created = simulator.kubectl("create", "-f", "-", check=False, stdin=yaml.safe_dump(manifest))
    assert created.returncode == 1
    assert 'Error from server (AlreadyExists): error when creating "STDIN": namespaces "applied" already exists' \
        in created.stderr
    row = simulator.kubectl("get", "namespace", "applied", "--no-headers").stdout.split()
    assert row[:2] == ["applied", "Terminating"]
    # An apply that would create content in it is a create, and refused.
    refused = simulator.kubectl("apply", "--server-side", "-f", "-", check=False,
                                stdin="{apiVersion: v1, kind: ConfigMap, metadata: {name: again, namespace: applied}}")
    assert refused.returncode == 1
    assert ('configmaps "again" is forbidden: unable to create new content in namespace applied because it is '
            "being terminated") in refused.stderr


def test_a_stuck_namespace_goes_once_its_finalizer_is_removed(make_simulator):
    sim = make_simulator({
        "timing": {"tick": 0.02, "podShutdown": 0.05},
        "nodes": [{"name": "node-a"}],
        "namespaces": ["team-a", {"name": "stuck", "deleted": True, "labels": {"owner": "ops"}}],
        "objects": [_held_config_map("held", "stuck"),
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "loose", "namespace": "stuck"}}]})
    stuck = wait_until(lambda: sim.core.read_namespace("stuck"), lambda ns: _conditions(ns) == HELD,
                       what="the stuck namespace's conditions")
    assert stuck.status.phase == "Terminating" and stuck.metadata.labels["owner"] == "ops"
    # The content without a finalizer went; the held ConfigMap is being deleted but stays.
    names = sim.kubectl("get", "configmaps", "-n", "stuck", "-o", "name").stdout.split()
    assert names == ["configmap/held"]
    assert sim.core.read_namespaced_config_map("held", "stuck").metadata.deletion_timestamp is not None
    shown = json.loads(sim.kubectl("get", "namespace", "stuck", "-o", "json").stdout)
    assert {c["type"]: c["status"] for c in shown["status"]["conditions"]}["NamespaceFinalizersRemaining"] == "True"
    assert sim.kubectl("get", "namespace", "stuck", "--no-headers").stdout.split()[1] == "Terminating"
    sim.kubectl("patch", "configmap", "held", "-n", "stuck", "--type=json",
                "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
    _gone(sim, "stuck")


def test_the_finalize_subresource_releases_a_namespace(simulator):
    _stuck(simulator, "forced")
    with pytest.raises(ApiException) as err:
        simulator.dynamic.request("get", "/api/v1/namespaces/forced/finalize")
    assert err.value.status == 405
    # The operators' last resort: PUT the namespace with no spec.finalizers to namespaces/finalize.
    body = json.loads(simulator.kubectl("get", "namespace", "forced", "-o", "json").stdout)
    body["spec"]["finalizers"] = []
    simulator.kubectl("replace", "--raw", "/api/v1/namespaces/forced/finalize", "-f", "-", stdin=json.dumps(body))
    _gone(simulator, "forced")


def test_system_namespaces_may_not_be_deleted(simulator):
    result = simulator.kubectl("delete", "namespace", "kube-public", check=False)
    assert result.returncode == 1
    assert 'Error from server (Forbidden): namespaces "kube-public" is forbidden: this namespace may not be ' \
        "deleted" in result.stderr
    assert simulator.core.read_namespace("kube-public").metadata.deletion_timestamp is None


def test_kubectl_get_pdb_columns(simulator):
    simulator.apply_yaml("""
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: at-least-two, namespace: team-a}
spec: {minAvailable: 2, selector: {matchLabels: {app: none}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: half, namespace: team-a}
spec: {maxUnavailable: 50%, selector: {matchLabels: {app: none}}}
""")
    lines = simulator.kubectl("get", "pdb", "-n", "team-a").stdout.splitlines()
    assert lines[0].split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert [line.split()[:4] for line in lines[1:]] == [["at-least-two", "2", "N/A", "0"], ["half", "N/A", "50%", "0"]]
    answer = simulator.dynamic.request(
        "get", "/apis/policy/v1/namespaces/team-a/poddisruptionbudgets", serialize=False,
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    answer = json.loads(answer.data)
    assert answer["kind"] == "Table"
    assert [(c["name"], c["type"], c["format"], c["priority"]) for c in answer["columnDefinitions"]] == [
        ("Name", "string", "name", 0), ("Min Available", "string", "", 0), ("Max Unavailable", "string", "", 0),
        ("Allowed Disruptions", "integer", "", 0), ("Age", "string", "", 0)]
    descriptions = [c["description"] for c in answer["columnDefinitions"]]
    assert descriptions[1:4] == ["The minimum number of pods that must be available.",
                                 "The maximum number of pods that may be unavailable.",
                                 "Calculated number of pods that may be disrupted at this time."]
    assert descriptions[0].startswith("Name must be unique within a namespace.")
    assert descriptions[4].startswith("CreationTimestamp is a timestamp representing the server time")
    assert [row["cells"][:4] for row in answer["rows"]] == [["at-least-two", "2", "N/A", 0], ["half", "N/A", "50%", 0]]
