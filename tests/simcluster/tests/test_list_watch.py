"""List and watch with resourceVersion, label selectors and field selectors
(kubernetes.io/docs/reference/using-api/api-concepts/ "Efficient detection of changes",
concepts/overview/working-with-objects/labels/ and field-selectors/)."""

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from sim_helpers import pod_manifest, status_of

CLUSTER = "basic.yml"


def _cm(name, labels):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {}}


def test_watch_from_a_resource_version(simulator):
    core = simulator.core
    listed = core.list_namespaced_config_map("team-a")
    start = listed.metadata.resource_version
    core.create_namespaced_config_map("team-a", {"metadata": {"name": "watched"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("watched", "team-a", {"data": {"v": "2"}})
    core.delete_namespaced_config_map("watched", "team-a")
    seen = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_config_map, "team-a", resource_version=start,
                               timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name, event["object"].data,
                     int(event["object"].metadata.resource_version)))
        if event["type"] == "DELETED":
            stream.stop()
    assert [s[:2] for s in seen] == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]
    assert seen[0][2] == {"v": "1"} and seen[1][2] == {"v": "2"}
    versions = [s[3] for s in seen]
    assert versions == sorted(versions) and versions[0] > int(start)


def test_watch_without_resource_version_starts_with_the_state(simulator):
    core = simulator.core
    core.create_namespaced_config_map("default", _cm("present", {"w": "now"}))
    stream = watch.Watch()
    events = []
    for event in stream.stream(core.list_namespaced_config_map, "default", label_selector="w=now",
                               timeout_seconds=2):
        events.append((event["type"], event["object"].metadata.name))
        stream.stop()
    assert events == [("ADDED", "present")]


def test_watch_sees_objects_entering_and_leaving_the_selection(simulator):
    core = simulator.core
    core.create_namespaced_config_map("default", _cm("mover", {"tier": "cold"}))
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.patch_namespaced_config_map("mover", "default", {"metadata": {"labels": {"tier": "hot"}}})
    core.patch_namespaced_config_map("mover", "default", {"metadata": {"labels": {"tier": "cold"}}})
    stream = watch.Watch()
    seen = []
    for event in stream.stream(core.list_namespaced_config_map, "default", label_selector="tier=hot",
                               resource_version=start, timeout_seconds=3):
        seen.append(event["type"])
        if len(seen) == 2:
            stream.stop()
    assert seen == ["ADDED", "DELETED"]


def test_watch_from_a_compacted_version_is_gone(simulator):
    # A resourceVersion older than the server's history answers 410 Gone ("Expired").
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(simulator.core.list_namespaced_config_map, "team-a", resource_version="1",
                                  timeout_seconds=2))
    assert err.value.status == 410
    assert "Expired" in err.value.reason


LABELLED = {"sel-1": {"env": "prod", "tier": "web"}, "sel-2": {"env": "dev", "tier": "web"},
            "sel-3": {"env": "qa"}, "sel-4": {"tier": "db"}}


@pytest.fixture(scope="module")
def labelled(simulator):
    namespace = {"metadata": {"name": "selectors"}}
    simulator.core.create_namespace(namespace)
    for name, labels in LABELLED.items():
        simulator.core.create_namespaced_config_map("selectors", _cm(name, labels))
    return simulator


@pytest.mark.parametrize("selector, names", [
    ("env=prod", ["sel-1"]),
    ("env==prod", ["sel-1"]),
    ("env!=prod", ["sel-2", "sel-3", "sel-4"]),
    ("env in (prod,qa)", ["sel-1", "sel-3"]),
    ("env notin (prod,qa)", ["sel-2", "sel-4"]),
    ("tier", ["sel-1", "sel-2", "sel-4"]),
    ("!tier", ["sel-3"]),
    ("tier=web,env!=dev", ["sel-1"]),
    ("env,!tier", ["sel-3"]),
])
def test_label_selectors(labelled, selector, names):
    listed = labelled.core.list_namespaced_config_map("selectors", label_selector=selector)
    assert sorted(i.metadata.name for i in listed.items) == names
    out = labelled.kubectl("get", "configmaps", "-n", "selectors", "-l", selector, "-o", "name").stdout.split()
    assert sorted(out) == [f"configmap/{n}" for n in names]


def test_an_unparsable_label_selector_is_a_bad_request(labelled):
    with pytest.raises(ApiException) as err:
        labelled.core.list_namespaced_config_map("selectors", label_selector="env in prod")
    assert err.value.status == 400 and status_of(err.value)["reason"] == "BadRequest"


def test_field_selectors(simulator):
    core = simulator.core
    core.create_namespaced_pod("default", pod_manifest("fs-runs", ["sleep", "infinity"], nodeName="node-b"))
    core.create_namespaced_pod("default", pod_manifest("fs-done", ["true"], restartPolicy="Never",
                                                       nodeName="node-c"))
    simulator.wait_pod_phase("fs-runs", "Running")
    simulator.wait_pod_phase("fs-done", "Succeeded")
    names = sorted(p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-b").items)
    assert names == ["fs-runs"]
    names = [p.metadata.name for p in core.list_namespaced_pod("default", field_selector="metadata.name=fs-done").items]
    assert names == ["fs-done"]
    names = [p.metadata.name for p in core.list_namespaced_pod("default", field_selector="status.phase=Succeeded").items]
    assert names == ["fs-done"]
    names = [p.metadata.name for p in core.list_namespaced_pod(
        "default", field_selector="status.phase!=Succeeded,spec.nodeName=node-b").items]
    assert names == ["fs-runs"]
    out = simulator.kubectl("get", "pods", "--field-selector", "status.phase=Running", "-o", "name").stdout.split()
    assert out == ["pod/fs-runs"]
    nodes = core.list_node(field_selector="metadata.name=node-a").items
    assert [n.metadata.name for n in nodes] == ["node-a"]


def test_an_unsupported_field_label_is_a_bad_request(simulator):
    with pytest.raises(ApiException) as err:
        simulator.core.list_namespaced_pod("default", field_selector="spec.containers=x")
    status = status_of(err.value)
    assert err.value.status == 400 and status["reason"] == "BadRequest"
    assert "field label not supported: spec.containers" in status["message"]
    result = simulator.kubectl("get", "configmaps", "--field-selector", "data.a=1", check=False)
    assert result.returncode == 1 and "field label not supported: data.a" in result.stderr


def test_list_pagination(labelled):
    first = labelled.core.list_namespaced_config_map("selectors", limit=3)
    assert len(first.items) == 3 and first.metadata._continue
    rest = labelled.core.list_namespaced_config_map("selectors", limit=3, _continue=first.metadata._continue)
    names = [i.metadata.name for i in first.items + rest.items]
    # The namespace also holds kube-root-ca.crt in a real cluster; only ours are counted here.
    assert sorted(n for n in names if n.startswith("sel-")) == sorted(LABELLED)
    assert not rest.metadata._continue
