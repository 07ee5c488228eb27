"""Create, get, update and delete: status codes, resourceVersion preconditions, and deletion
propagation through ownerReferences (kubernetes.io/docs/concepts/architecture/garbage-collection/,
api-conventions.md "Concurrency Control and Consistency")."""

import pytest
import yaml
from kubernetes import watch
from kubernetes.client.rest import ApiException

from sim_helpers import status_of, wait_for

CLUSTER = "basic.yml"


def _cm(name, data=None, namespace="team-a"):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": data or {"a": "1"}}


def _deployment(name, replicas=2, namespace="team-a"):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}}}


def _daemonset(name, namespace="team-a"):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"ds": name}},
                     "template": {"metadata": {"labels": {"ds": name}},
                                  "spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1"}]}}}}


def test_create_get_update_delete(simulator):
    core = simulator.core
    created = core.create_namespaced_config_map("team-a", _cm("crud"))
    assert created.metadata.uid and created.metadata.resource_version
    assert created.metadata.creation_timestamp is not None
    got = core.read_namespaced_config_map("crud", "team-a")
    assert got.data == {"a": "1"} and got.metadata.uid == created.metadata.uid
    got.data["b"] = "2"
    updated = core.replace_namespaced_config_map("crud", "team-a", got)
    assert updated.data == {"a": "1", "b": "2"}
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    assert updated.metadata.uid == created.metadata.uid
    answer = core.delete_namespaced_config_map("crud", "team-a")
    assert answer["kind"] == "Status" and answer["status"] == "Success"
    assert answer["details"] == {"name": "crud", "kind": "configmaps", "uid": created.metadata.uid}
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("crud", "team-a")
    assert missing.value.status == 404


def test_not_found_is_a_status(simulator):
    with pytest.raises(ApiException) as err:
        simulator.core.read_namespaced_config_map("nothing-here", "team-a")
    status = status_of(err.value)
    assert err.value.status == 404
    assert status["kind"] == "Status" and status["status"] == "Failure"
    assert status["reason"] == "NotFound" and status["code"] == 404
    assert status["message"] == 'configmaps "nothing-here" not found'
    assert status["details"] == {"name": "nothing-here", "kind": "configmaps"}
    result = simulator.kubectl("get", "deployment", "nothing-here", "-n", "team-a", check=False)
    assert result.returncode == 1
    assert 'Error from server (NotFound): deployments.apps "nothing-here" not found' in result.stderr
    with pytest.raises(ApiException) as err:
        simulator.core.create_namespaced_config_map("no-such-namespace", _cm("x", namespace="no-such-namespace"))
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'namespaces "no-such-namespace" not found'


def test_create_twice_is_already_exists(simulator):
    simulator.core.create_namespaced_config_map("team-a", _cm("twice"))
    with pytest.raises(ApiException) as err:
        simulator.core.create_namespaced_config_map("team-a", _cm("twice"))
    status = status_of(err.value)
    assert err.value.status == 409 and status["reason"] == "AlreadyExists"
    assert status["message"] == 'configmaps "twice" already exists'
    result = simulator.kubectl("create", "-f", "-", check=False, stdin=yaml.safe_dump(_cm("twice")))
    assert result.returncode == 1
    assert 'Error from server (AlreadyExists): error when creating "STDIN": configmaps "twice" already exists' \
        in result.stderr


def test_update_with_a_stale_resource_version_conflicts(simulator):
    core = simulator.core
    first = core.create_namespaced_config_map("team-a", _cm("stale"))
    first.data = {"a": "2"}
    core.replace_namespaced_config_map("stale", "team-a", first)
    first.data = {"a": "3"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("stale", "team-a", first)
    status = status_of(err.value)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"] == ('Operation cannot be fulfilled on configmaps "stale": the object has been '
                                 'modified; please apply your changes to the latest version and try again')
    assert core.read_namespaced_config_map("stale", "team-a").data == {"a": "2"}
    # Without a resourceVersion an update is unconditional.
    first.metadata.resource_version = None
    assert core.replace_namespaced_config_map("stale", "team-a", first).data == {"a": "3"}


def test_delete_with_stale_precondition_conflicts(simulator):
    core = simulator.core
    created = core.create_namespaced_config_map("team-a", _cm("precondition"))
    core.patch_namespaced_config_map("precondition", "team-a", {"data": {"a": "9"}})
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map("precondition", "team-a", body={
            "preconditions": {"resourceVersion": created.metadata.resource_version}})
    assert err.value.status == 409
    core.delete_namespaced_config_map("precondition", "team-a")


def test_generate_name(simulator):
    obj = _cm("unused")
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = "gen-"
    created = simulator.core.create_namespaced_config_map("team-a", obj)
    assert created.metadata.name.startswith("gen-") and len(created.metadata.name) == len("gen-") + 5


def _owned_pods(sim, label):
    return sim.core.list_namespaced_pod("team-a", label_selector=label).items


def test_deleting_a_deployment_removes_its_replicaset_and_pods(simulator):
    simulator.apps.create_namespaced_deployment("team-a", _deployment("cascade"))
    pods = wait_for(lambda: len(_owned_pods(simulator, "app=cascade")) == 2 and _owned_pods(simulator, "app=cascade"),
                    what="two pods")
    rs = simulator.apps.list_namespaced_replica_set("team-a", label_selector="app=cascade").items
    assert len(rs) == 1
    assert rs[0].metadata.owner_references[0].kind == "Deployment"
    assert rs[0].metadata.owner_references[0].controller is True
    assert pods[0].metadata.owner_references[0].name == rs[0].metadata.name
    simulator.kubectl("delete", "deployment", "cascade", "-n", "team-a", "--wait=true", "--timeout=20s")
    wait_for(lambda: not _owned_pods(simulator, "app=cascade"), what="pods gone")
    assert not simulator.apps.list_namespaced_replica_set("team-a", label_selector="app=cascade").items


def test_deleting_a_daemonset_removes_its_pods(simulator):
    simulator.apps.create_namespaced_daemon_set("team-a", _daemonset("cascade-ds"))
    wait_for(lambda: len(_owned_pods(simulator, "ds=cascade-ds")) == 3, what="a pod per node")
    simulator.apps.delete_namespaced_daemon_set("cascade-ds", "team-a")
    wait_for(lambda: not _owned_pods(simulator, "ds=cascade-ds"), what="daemon pods gone")


def test_orphan_keeps_the_pods(simulator):
    simulator.apps.create_namespaced_daemon_set("team-a", _daemonset("orphaner"))
    wait_for(lambda: len(_owned_pods(simulator, "ds=orphaner")) == 3, what="a pod per node")
    simulator.kubectl("delete", "daemonset", "orphaner", "-n", "team-a", "--cascade=orphan", "--wait=true",
                      "--timeout=20s")
    wait_for(lambda: all(not p.metadata.owner_references for p in _owned_pods(simulator, "ds=orphaner")),
             what="owner references removed")
    with pytest.raises(ApiException):
        simulator.apps.read_namespaced_daemon_set("orphaner", "team-a")
    pods = _owned_pods(simulator, "ds=orphaner")
    assert len(pods) == 3
    assert all(p.metadata.deletion_timestamp is None for p in pods)
    # Still there a little later: nothing collects orphans.
    assert len(_owned_pods(simulator, "ds=orphaner")) == 3
    simulator.core.delete_collection_namespaced_pod("team-a", label_selector="ds=orphaner", grace_period_seconds=0)
    wait_for(lambda: not _owned_pods(simulator, "ds=orphaner"), what="pods deleted")


def test_foreground_deletion_waits_for_dependents(simulator):
    simulator.apps.create_namespaced_deployment("team-a", _deployment("fg", replicas=2))
    wait_for(lambda: len(_owned_pods(simulator, "app=fg")) == 2, what="two pods")
    start = simulator.core.list_namespaced_pod("team-a").metadata.resource_version
    simulator.apps.delete_namespaced_deployment("fg", "team-a", propagation_policy="Foreground")
    deployment_events = []
    stream = watch.Watch()
    for event in stream.stream(simulator.apps.list_namespaced_deployment, "team-a",
                               field_selector="metadata.name=fg", resource_version=start, timeout_seconds=10):
        meta = event["object"].metadata
        deployment_events.append((event["type"], meta.deletion_timestamp is not None, meta.finalizers,
                                  int(meta.resource_version)))
        if event["type"] == "DELETED":
            stream.stop()
    deleting = [e for e in deployment_events if e[1]]
    assert deleting[0][:3] == ("MODIFIED", True, ["foregroundDeletion"])
    assert deployment_events[-1][0] == "DELETED"
    gone_at = deployment_events[-1][3]
    pod_deletions = []
    stream = watch.Watch()
    for event in stream.stream(simulator.core.list_namespaced_pod, "team-a", label_selector="app=fg",
                               resource_version=start, timeout_seconds=5):
        if event["type"] == "DELETED":
            pod_deletions.append(int(event["object"].metadata.resource_version))
        if len(pod_deletions) == 2:
            stream.stop()
    # The Deployment goes only after its ReplicaSet's pods are gone.
    assert len(pod_deletions) == 2 and max(pod_deletions) < gone_at
