# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""drain_refusal and drain_blockers over what kubernetes.core.k8s_drain and the API server really answer."""

from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.internal.drain import (
    FilterModule, drain_blockers, drain_refusal, selects)

# The Status the eviction subresource answers when a PodDisruptionBudget allows no disruption
# (kubernetes pkg/registry/core/pod/storage/eviction.go, checkAndDecrement), as it goes on the wire.
PDB_REFUSAL = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "reason": "TooManyRequests",
    "details": {"causes": [{"reason": "DisruptionBudget",
                            "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]},
    "code": 429,
}
PDB_STALE = dict(PDB_REFUSAL, details={"causes": [
    {"reason": "DisruptionBudget", "message": "The disruption budget web is still being processed by the server."}]})
APF_SHED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Too many requests, please try again later.", "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": 1}, "code": 429}
TWO_BUDGETS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
                          "support.", "reason": "InternalError", "code": 500}
FORBIDDEN = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": "pods \"web-1\" is forbidden: User \"system:serviceaccount:ops:upgrader\" cannot create "
                        "resource \"pods/eviction\" in API group \"\" in the namespace \"shop\"",
             "reason": "Forbidden", "details": {"name": "web-1", "kind": "pods"}, "code": 403}


def evict_failed(namespace, name, status, content_type="application/json"):
    """The module's message, built as k8s_drain's evict_pods and format_dynamic_api_exc build it."""
    body = json.dumps(status)
    reason = status["message"] if content_type == "application/json" else body
    return {"failed": True, "changed": False,
            "msg": "Failed to delete pod {0}/{1} due to: {2}".format(namespace, name, reason)}


@pytest.mark.parametrize("result,pod,retry,reason", [
    (evict_failed("shop", "web-1", PDB_REFUSAL), "shop/web-1", True,
     "Cannot evict pod as it would violate the pod's disruption budget."),
    (evict_failed("shop", "web-1", PDB_STALE), "shop/web-1", True,
     "Cannot evict pod as it would violate the pod's disruption budget."),
    (evict_failed("kube-system", "coredns-5d78c9869d-x2x7z", APF_SHED), "kube-system/coredns-5d78c9869d-x2x7z",
     True, "Too many requests, please try again later."),
    # No Status body: format_dynamic_api_exc says "<code> Reason: <HTTP reason>".
    ({"failed": True, "msg": "Failed to delete pod shop/web-1 due to: 429 Reason: Too Many Requests"}, "shop/web-1",
     True, "429 Reason: Too Many Requests"),
    (evict_failed("shop", "web-1", TWO_BUDGETS), "shop/web-1", False,
     "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."),
    (evict_failed("shop", "web-1", FORBIDDEN), "shop/web-1", False, FORBIDDEN["message"]),
])
def test_refused_eviction(result, pod, retry, reason):
    refusal = drain_refusal(result)
    assert (refusal["pod"], refusal["retry"], refusal["reason"]) == (pod, retry, reason)
    assert refusal["pod"] == "%s/%s" % (refusal["namespace"], refusal["name"])


@pytest.mark.parametrize("status,retry,budgets", [
    (PDB_REFUSAL, True, ["The disruption budget web needs 2 healthy pods and has 2 currently"]),
    (PDB_STALE, True, ["The disruption budget web is still being processed by the server."]),
    (APF_SHED, True, []),
    (TWO_BUDGETS, False, []),
    (FORBIDDEN, False, []),
])
def test_raw_status_body_gives_the_code_and_the_budget(status, retry, budgets):
    # Without Content-Type application/json the module passes the whole body on.
    refusal = drain_refusal(evict_failed("shop", "web-1", status, content_type="text/plain"))
    assert (refusal["retry"], refusal["budgets"], refusal["reason"]) == (retry, budgets, status["message"])


@pytest.mark.parametrize("msg", [
    "Node gpu-a not found.",
    "Failed to retrieve node 'gpu-a' due to: Unauthorized",
    "Pod deletion errors: cannot delete Pods not managed by ReplicationController, ReplicaSet, Job, DaemonSet or "
    "StatefulSet (use option force set to yes): shop/debug.",
    "Failed to list pod from node gpu-a due to: Forbidden",
    "Failed to patch node due to: (403)",
    "Could not create API client: Invalid kube-config file. No configuration found.",
])
def test_other_failures_are_final_and_keep_the_module_message(msg):
    refusal = drain_refusal({"failed": True, "msg": msg})
    assert refusal == {"pod": None, "namespace": None, "name": None, "reason": msg, "budgets": [], "retry": False}


@pytest.mark.parametrize("result", [
    {"changed": True, "result": "node gpu-a already marked unschedulable. 3 Pod(s) deleted from node."},
    {"changed": False, "skipped": True},
    {"failed": False, "msg": "Failed to delete pod shop/web-1 due to: Cannot evict pod"},
])
def test_success_is_no_refusal(result):
    assert drain_refusal(result) == {"pod": None, "namespace": None, "name": None, "reason": None, "budgets": [],
                                     "retry": False}


@pytest.mark.parametrize("value", [None, "failed", ["failed"]])
def test_refusal_of_wrong_input_names_what_it_got(value):
    with pytest.raises(AnsibleFilterError) as caught:
        drain_refusal(value)
    assert "expects the registered result of kubernetes.core.k8s_drain" in str(caught.value)


def pod(name, namespace="shop", labels=None, owner="ReplicaSet", phase="Running", **metadata):
    meta = dict({"name": name, "namespace": namespace, "labels": labels or {},
                 "ownerReferences": [{"kind": owner, "name": "owner"}] if owner else []}, **metadata)
    return {"metadata": meta, "spec": {"nodeName": "gpu-a"}, "status": {"phase": phase}}


def budget(name, selector, namespace="shop", allowed=0, healthy=2, desired=2):
    spec = {"minAvailable": desired}
    if selector is not None:
        spec["selector"] = selector
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec,
            "status": {"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": desired,
                       "expectedPods": healthy}}


@pytest.mark.parametrize("selector,labels,expected", [
    ({"matchLabels": {"app": "web"}}, {"app": "web", "tier": "front"}, True),
    ({"matchLabels": {"app": "web"}}, {"app": "api"}, False),
    ({}, {"app": "anything"}, True),
    (None, {"app": "web"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}, {"app": "api"}, True),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, {}, False),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, {"app": "web"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": ""}, True),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"app": "web"}, False),
    ({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]},
     {"app": "web", "canary": "yes"}, False),
])
def test_selector(selector, labels, expected):
    assert selects(budget("web", selector), pod("web-1", labels=labels)) is expected


def test_budget_of_another_namespace_does_not_cover_the_pod():
    assert not selects(budget("web", {}, namespace="other"), pod("web-1"))


def test_blockers_name_the_budget_the_terminating_and_the_untried():
    pods = [
        pod("web-1", labels={"app": "web"}),
        pod("nvidia-device-plugin-x", namespace="nvidia-device-plugin", owner="DaemonSet"),
        pod("job-1", owner="Job", phase="Succeeded"),
        pod("worker-2", labels={"app": "worker"}, deletionTimestamp="2026-03-02T10:04:05Z"),
        pod("kube-apiserver-gpu-a", namespace="kube-system", owner=None,
            annotations={"kubernetes.io/config.mirror": "abc"}),
        pod("api-3", labels={"app": "api"}),
    ]
    budgets = [budget("web", {"matchLabels": {"app": "web"}}), budget("all", {}, namespace="other"),
               budget("worker", {"matchLabels": {"app": "worker"}}, allowed=1, healthy=3, desired=2)]
    assert drain_blockers(pods, budgets) == [
        "shop/web-1 (PodDisruptionBudget shop/web: 0 disruptions allowed, 2 healthy of 2 needed)",
        "shop/worker-2 (terminating since 2026-03-02T10:04:05Z; "
        "PodDisruptionBudget shop/worker: 1 disruptions allowed, 3 healthy of 2 needed)",
        "shop/api-3 (not terminating; no PodDisruptionBudget selects it)",
    ]


def test_nothing_left_means_no_blockers():
    assert drain_blockers([pod("ds", owner="DaemonSet")], None) == []
    assert drain_blockers(None) == []


@pytest.mark.parametrize("pods,budgets,words", [
    ({"items": []}, [], "expects pods as a list"),
    ([], {"items": []}, "expects budgets as a list"),
])
def test_blockers_of_wrong_input_names_what_it_got(pods, budgets, words):
    with pytest.raises(AnsibleFilterError) as caught:
        drain_blockers(pods, budgets)
    assert words in str(caught.value)


def test_filters_are_registered():
    filters = FilterModule().filters()
    assert filters["drain_refusal"] is drain_refusal
    assert filters["drain_blockers"] is drain_blockers


# node_service_states: whether site.yml may move a GPU node's loaded driver, from its Node and pods.
def _node(name, unschedulable=None, annotations=None):
    node = {"metadata": {"name": name}}
    if annotations is not None:
        node["metadata"]["annotations"] = annotations
    if unschedulable is not None:
        node["spec"] = {"unschedulable": unschedulable}
    return node


def _pod(name, owner=None, phase="Running", annotations=None):
    metadata = {"name": name, "namespace": "team"}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "x"}]
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "status": {"phase": phase}}


MARKER = json.dumps({"playbook": "upgrade_driver", "reason": "The driver is changed", "time": "2026-12-07T18:00:00Z"})


@pytest.mark.parametrize("node, pods, state, words", [
    (None, None, "unknown", "the cluster has no Node named gpu-a (a new node, or gpufleet_node_name"),
    (_node("gpu-a"), None, "serving", "is schedulable"),
    (_node("gpu-a", unschedulable=False), None, "serving", "is schedulable"),
    # A marker on a schedulable node (uncordoned by hand): it serves.
    (_node("gpu-a", False, {"gpufleet.nvidia.com/cordoned-by": MARKER}), None, "serving", "is schedulable"),
    (_node("gpu-a", True), None, "serving", "its pods were not read"),
    (_node("gpu-a", True), [_pod("trainer", "Job")], "serving", "still runs 1 pod(s) a drain evicts: team/trainer"),
    (_node("gpu-a", True), [_pod("plugin", "DaemonSet"), _pod("done", "Job", "Succeeded"),
                            _pod("static", annotations={"kubernetes.io/config.mirror": "x"})],
     "drained", "cordoned and drained by its owner"),
    (_node("gpu-a", True, {"gpufleet.nvidia.com/cordoned-by": MARKER}), [], "serving",
     "cordoned by gpufleet.nvidia's upgrade_driver playbook (The driver is changed) at 2026-12-07T18:00:00Z, not by its owner"),
    # A marker that is not JSON still marks the cordon as the collection's.
    (_node("gpu-a", True, {"gpufleet.nvidia.com/cordoned-by": "mig"}), [], "serving", "gpufleet.nvidia's mig playbook"),
])
def test_node_service_states(node, pods, state, words):
    nodes = [_node("cpu-1")] + ([node] if node else [])
    states = FilterModule().filters()["node_service_states"](
        [{"host": "host-a", "node": "gpu-a"}], nodes, {"gpu-a": pods} if pods is not None else {})
    assert states["host-a"]["state"] == state
    assert words in states["host-a"]["reason"]


def test_node_service_states_many_pods_named_in_part():
    states = FilterModule().filters()["node_service_states"](
        [{"host": "h", "node": "n"}], [_node("n", True)], {"n": [_pod("p%d" % i, "ReplicaSet") for i in range(8)]})
    assert "still runs 8 pod(s)" in states["h"]["reason"]
    assert "team/p4, ..." in states["h"]["reason"] and "team/p5" not in states["h"]["reason"]


def test_node_service_states_refuses_what_is_not_a_node_list():
    with pytest.raises(AnsibleFilterError, match="expects the Nodes as a list"):
        FilterModule().filters()["node_service_states"]([], {"resources": []})


@pytest.mark.parametrize("annotations, marker", [
    (None, None),
    ({"other": "x"}, None),
    ({"gpufleet.nvidia.com/cordoned-by": MARKER}, json.loads(MARKER)),
    ({"gpufleet.nvidia.com/cordoned-by": json.loads(MARKER)}, json.loads(MARKER)),
    ({"gpufleet.nvidia.com/cordoned-by": "[1]"}, {"playbook": "[1]"}),
])
def test_cordon_marker(annotations, marker):
    assert FilterModule().filters()["cordon_marker"](_node("n", True, annotations)) == marker
