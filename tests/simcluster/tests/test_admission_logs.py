"""Admission and logs as kube-apiserver and the kubelet do them: ServiceAccount admission refuses a
pod whose account does not exist (plugin/pkg/admission/serviceaccount), server-side apply needs a
fieldManager, list items carry no kind, an eviction of a pod that is not running yet skips the
disruption budget (pkg/registry/core/pod/storage/eviction.go canIgnorePDB), and logs are kept per
container instance (`kubectl logs --previous`)."""

import json

import pytest
from kubernetes.client.rest import ApiException

from sim_helpers import pod_manifest, status_of, wait_for

CLUSTER = "basic.yml"


def test_a_pod_needs_its_service_account(simulator):
    assert simulator.core.read_namespaced_service_account("default", "team-a").metadata.name == "default"
    pod = pod_manifest("no-account", serviceAccountName="builder")
    with pytest.raises(ApiException) as err:
        simulator.core.create_namespaced_pod("default", pod)
    assert err.value.status == 403
    assert status_of(err.value)["message"] == ('pods "no-account" is forbidden: error looking up service account '
                                               'default/builder: serviceaccount "builder" not found')


def test_a_new_namespace_gets_a_default_service_account(simulator):
    simulator.apply_yaml("{apiVersion: v1, kind: Namespace, metadata: {name: fresh}}")
    simulator.core.create_namespaced_pod("fresh", pod_manifest("first", ["sleep", "infinity"], namespace="fresh"))
    assert simulator.pod("first", "fresh").spec.service_account_name == "default"


def test_server_side_apply_needs_a_field_manager(simulator):
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "no-manager"}})
    with pytest.raises(ApiException) as err:
        simulator.dynamic.request("patch", "/api/v1/namespaces/default/configmaps/no-manager", body=body,
                                  content_type="application/apply-patch+yaml")
    assert err.value.status == 422
    assert "fieldManager: Required value" in status_of(err.value)["message"]


def test_list_items_carry_no_kind(simulator):
    simulator.kubectl("create", "-f", "-", stdin=json.dumps(pod_manifest("listed", ["sleep", "infinity"])))
    answer = json.loads(simulator.dynamic.request("get", "/api/v1/namespaces/default/pods",
                                                  serialize=False, _preload_content=False).data)
    assert answer["kind"] == "PodList" and answer["items"]
    assert all("kind" not in item and "apiVersion" not in item for item in answer["items"])


def test_a_pending_pod_is_evicted_whatever_its_budget(simulator):
    simulator.apply_yaml("""
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: strict}
spec: {minAvailable: 5, selector: {matchLabels: {app: waiting}}}
""")
    pod = pod_manifest("waiting", ["sleep", "infinity"], nodeSelector={"zone": "nowhere"})
    pod["metadata"]["labels"] = {"app": "waiting"}
    simulator.core.create_namespaced_pod("default", pod)
    simulator.core.create_namespaced_pod_eviction("waiting", "default", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "waiting", "namespace": "default"}})
    wait_for(lambda: "waiting" not in [p.metadata.name for p in simulator.core.list_namespaced_pod("default").items],
             what="the pending pod gone")


def test_logs_are_kept_per_container_instance(simulator):
    pod = pod_manifest("counting", ["sh", "-c", "echo run; exit 1"], restartPolicy="Always")
    simulator.core.create_namespaced_pod("default", pod)
    wait_for(lambda: (simulator.pod("counting").status.container_statuses or [None])[0]
             and simulator.pod("counting").status.container_statuses[0].restart_count >= 2,
             timeout=20, what="two restarts")
    assert simulator.kubectl("logs", "counting").stdout == "run\n"
    assert simulator.kubectl("logs", "counting", "--previous").stdout == "run\n"
    fresh = pod_manifest("fresh-logs", ["sh", "-c", "echo once"], restartPolicy="Never")
    simulator.core.create_namespaced_pod("default", fresh)
    simulator.wait_pod_phase("fresh-logs", "Succeeded")
    answer = simulator.kubectl("logs", "fresh-logs", "--previous", check=False)
    assert answer.returncode != 0
    assert 'previous terminated container "main" in pod "fresh-logs" not found' in answer.stderr
