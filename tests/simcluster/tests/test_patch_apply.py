"""Patches (merge, strategic merge, JSON), server-side apply with field managers, and dry runs
(kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/,
reference/using-api/server-side-apply/, reference/using-api/api-concepts/#dry-run)."""

import json

import pytest
import yaml
from kubernetes.client.rest import ApiException

CLUSTER = "basic.yml"
NS = "team-a"


def _deployment(sim, name, containers=None):
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS,
                                                                        "labels": {"app": name, "old": "yes"}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": containers or [
                                      {"name": "app", "image": "registry.example/app:1"},
                                      {"name": "side", "image": "registry.example/side:1",
                                       "env": [{"name": "KEEP", "value": "1"}]}]}}}}
    return sim.apps.create_namespaced_deployment(NS, body)


def _containers(sim, name):
    deploy = sim.kubectl_json("get", "deployment", name, "-n", NS)
    return {c["name"]: c for c in deploy["spec"]["template"]["spec"]["containers"]}


def test_strategic_merge_patch_merges_containers_by_name(simulator):
    _deployment(simulator, "smp")
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "side", "env": [{"name": "ADDED", "value": "2"}]},
        {"name": "extra", "image": "registry.example/extra:1"}]}}}}
    simulator.kubectl("patch", "deployment", "smp", "-n", NS, "--type=strategic", "-p", json.dumps(patch))
    containers = _containers(simulator, "smp")
    assert set(containers) == {"app", "side", "extra"}
    assert containers["app"]["image"] == "registry.example/app:1"
    assert containers["side"]["image"] == "registry.example/side:1"
    assert containers["side"]["env"] == [{"name": "KEEP", "value": "1"}, {"name": "ADDED", "value": "2"}]
    # kubectl patch's default type is strategic.
    delete = {"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}}
    simulator.kubectl("patch", "deployment", "smp", "-n", NS, "-p", json.dumps(delete))
    assert set(_containers(simulator, "smp")) == {"app", "extra"}
    deploy = simulator.apps.read_namespaced_deployment("smp", NS)
    assert deploy.metadata.generation == 3


def test_merge_patch_replaces_lists_and_null_removes(simulator):
    _deployment(simulator, "mp")
    patch = {"metadata": {"labels": {"old": None, "new": "yes"}},
             "spec": {"template": {"spec": {"containers": [{"name": "only", "image": "registry.example/only:1"}]}}}}
    simulator.kubectl("patch", "deployment", "mp", "-n", NS, "--type=merge", "-p", json.dumps(patch))
    deploy = simulator.kubectl_json("get", "deployment", "mp", "-n", NS)
    assert deploy["metadata"]["labels"] == {"app": "mp", "new": "yes"}
    assert [c["name"] for c in deploy["spec"]["template"]["spec"]["containers"]] == ["only"]


def test_json_patch(simulator):
    _deployment(simulator, "jp")
    ops = [{"op": "add", "path": "/metadata/labels/added", "value": "1"},
           {"op": "remove", "path": "/metadata/labels/old"},
           {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "registry.example/app:2"},
           {"op": "test", "path": "/spec/replicas", "value": 0}]
    simulator.kubectl("patch", "deployment", "jp", "-n", NS, "--type=json", "-p", json.dumps(ops))
    deploy = simulator.kubectl_json("get", "deployment", "jp", "-n", NS)
    assert deploy["metadata"]["labels"] == {"app": "jp", "added": "1"}
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/app:2"
    failing = [{"op": "test", "path": "/spec/replicas", "value": 5},
               {"op": "replace", "path": "/spec/replicas", "value": 3}]
    result = simulator.kubectl("patch", "deployment", "jp", "-n", NS, "--type=json", "-p", json.dumps(failing),
                               check=False)
    assert result.returncode != 0
    assert simulator.apps.read_namespaced_deployment("jp", NS).spec.replicas == 0
    missing = [{"op": "remove", "path": "/metadata/labels/nope"}]
    result = simulator.kubectl("patch", "deployment", "jp", "-n", NS, "--type=json", "-p", json.dumps(missing),
                               check=False)
    assert result.returncode != 0


def test_patch_through_the_python_client(simulator):
    core = simulator.core
    core.create_namespaced_config_map(NS, {"metadata": {"name": "py-patch"}, "data": {"a": "1", "b": "2"}})
    patched = core.patch_namespaced_config_map("py-patch", NS, {"data": {"b": None, "c": "3"}})
    assert patched.data == {"a": "1", "c": "3"}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("not-there", NS, {"data": {"x": "1"}})
    assert err.value.status == 404


def _cm_yaml(name, data, labels=None):
    meta = {"name": name, "namespace": NS}
    if labels:
        meta["labels"] = labels
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})


def _managers(obj):
    return {m["manager"]: m for m in obj["metadata"].get("managedFields") or []}


def test_server_side_apply_conflicts_and_force(simulator):
    simulator.apply_yaml(_cm_yaml("ssa", {"shared": "from-a", "only-a": "1"}), "--server-side",
                         "--field-manager=mgr-a")
    obj = simulator.kubectl_json("get", "configmap", "ssa", "-n", NS, "--show-managed-fields")
    assert _managers(obj)["mgr-a"]["operation"] == "Apply"
    assert set(_managers(obj)["mgr-a"]["fieldsV1"]["f:data"]) == {"f:shared", "f:only-a"}
    result = simulator.kubectl("apply", "-f", "-", "--server-side", "--field-manager=mgr-b", check=False,
                               stdin=_cm_yaml("ssa", {"shared": "from-b"}))
    assert result.returncode != 0
    assert 'conflict with "mgr-a"' in result.stderr
    assert ".data.shared" in result.stderr
    assert simulator.core.read_namespaced_config_map("ssa", NS).data["shared"] == "from-a"
    # Applying the same value is no conflict: both managers own it then.
    simulator.apply_yaml(_cm_yaml("ssa", {"only-a": "1"}), "--server-side", "--field-manager=mgr-c")
    simulator.apply_yaml(_cm_yaml("ssa", {"shared": "from-b"}), "--server-side", "--field-manager=mgr-b",
                         "--force-conflicts")
    obj = simulator.kubectl_json("get", "configmap", "ssa", "-n", NS, "--show-managed-fields")
    assert obj["data"] == {"shared": "from-b", "only-a": "1"}
    managers = _managers(obj)
    assert "f:shared" in managers["mgr-b"]["fieldsV1"]["f:data"]
    assert set(managers["mgr-a"]["fieldsV1"]["f:data"]) == {"f:only-a"}
    assert set(managers["mgr-c"]["fieldsV1"]["f:data"]) == {"f:only-a"}


def test_server_side_apply_removes_fields_left_out(simulator):
    simulator.apply_yaml(_cm_yaml("ssa-drop", {"keep": "1", "drop": "2"}, {"l1": "a", "l2": "b"}),
                         "--server-side", "--field-manager=owner")
    simulator.apply_yaml(_cm_yaml("ssa-drop", {"keep": "1"}, {"l1": "a"}), "--server-side",
                         "--field-manager=owner")
    obj = simulator.core.read_namespaced_config_map("ssa-drop", NS)
    assert obj.data == {"keep": "1"}
    assert obj.metadata.labels == {"l1": "a"}


def test_server_side_apply_keeps_fields_another_manager_owns(simulator):
    simulator.apply_yaml(_cm_yaml("ssa-shared", {"p": "1", "q": "2"}), "--server-side", "--field-manager=one")
    simulator.apply_yaml(_cm_yaml("ssa-shared", {"q": "2"}), "--server-side", "--field-manager=two")
    simulator.apply_yaml(_cm_yaml("ssa-shared", {"p": "1"}), "--server-side", "--field-manager=one")
    assert simulator.core.read_namespaced_config_map("ssa-shared", NS).data == {"p": "1", "q": "2"}


def test_server_side_apply_twice_changes_nothing(simulator):
    manifest = _cm_yaml("ssa-idem", {"a": "1"})
    first = simulator.apply_yaml(manifest, "--server-side", "--field-manager=idem")
    assert "configmap/ssa-idem serverside-applied" in first.stdout
    before = simulator.core.read_namespaced_config_map("ssa-idem", NS).metadata.resource_version
    simulator.apply_yaml(manifest, "--server-side", "--field-manager=idem")
    after = simulator.core.read_namespaced_config_map("ssa-idem", NS).metadata.resource_version
    assert before == after


def test_server_side_apply_with_the_python_dynamic_client(simulator):
    configmaps = simulator.dynamic.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa-py", "namespace": NS},
            "data": {"k": "v"}}
    created = configmaps.server_side_apply(body=body, name="ssa-py", namespace=NS, field_manager="py")
    assert created.data.k == "v"
    body["data"] = {"k": "w"}
    with pytest.raises(ApiException) as err:
        configmaps.server_side_apply(body=body, name="ssa-py", namespace=NS, field_manager="other")
    assert err.value.status == 409
    status = json.loads(err.value.body)
    assert status["reason"] == "Conflict"
    assert status["details"]["causes"][0]["reason"] == "FieldManagerConflict"
    assert status["details"]["causes"][0]["field"] == ".data.k"
    forced = configmaps.server_side_apply(body=body, name="ssa-py", namespace=NS, field_manager="other",
                                          force_conflicts=True)
    assert forced.data.k == "w"


def test_server_dry_run_persists_nothing(simulator):
    manifest = _cm_yaml("dry", {"a": "1"})
    out = simulator.kubectl("create", "-f", "-", "--dry-run=server", "-o", "json", stdin=manifest).stdout
    assert json.loads(out)["data"] == {"a": "1"}
    assert simulator.kubectl("get", "configmap", "dry", "-n", NS, check=False).returncode == 1
    applied = simulator.kubectl("apply", "-f", "-", "--server-side", "--dry-run=server", stdin=manifest)
    assert "(server dry run)" in applied.stdout
    assert simulator.kubectl("get", "configmap", "dry", "-n", NS, check=False).returncode == 1
    simulator.kubectl("create", "-f", "-", stdin=manifest)
    before = simulator.core.read_namespaced_config_map("dry", NS)
    simulator.kubectl("patch", "configmap", "dry", "-n", NS, "--type=merge", "-p", '{"data":{"a":"2"}}',
                      "--dry-run=server")
    simulator.apply_yaml(_cm_yaml("dry", {"a": "3"}), "--server-side", "--dry-run=server", "--force-conflicts")
    deleted = simulator.kubectl("delete", "configmap", "dry", "-n", NS, "--dry-run=server")
    assert "(server dry run)" in deleted.stdout
    after = simulator.core.read_namespaced_config_map("dry", NS)
    assert after.data == {"a": "1"}
    assert after.metadata.resource_version == before.metadata.resource_version


def test_dry_run_pod_is_neither_stored_nor_scheduled(simulator):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dry-pod"},
           "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}]}}
    answer = simulator.core.create_namespaced_pod("default", pod, dry_run="All")
    assert answer.metadata.name == "dry-pod"
    # Defaults and admission ran on the answer.
    assert answer.spec.restart_policy == "Always"
    assert answer.spec.service_account_name == "default"
    assert answer.status.phase == "Pending"
    with pytest.raises(ApiException) as err:
        simulator.core.read_namespaced_pod("dry-pod", "default")
    assert err.value.status == 404
