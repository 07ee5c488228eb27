# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What kubernetes.core.k8s answered: retried or not, named. The failure results are as
kubernetes.core 6.x writes them for an apiserver's Status (taken from runs against the simulated
cluster, whose Status bodies follow the apiserver's)."""

from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import k8s_writes as kw

DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet",
             "metadata": {"name": "nvidia-device-plugin", "namespace": "nvidia-device-plugin"}}
CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "nvidia-device-plugin-configs", "namespace": "nvidia-device-plugin"}}
RUNTIMECLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}}


def failed(item, status, http_reason, as_bytes=False, attempts=None):
    body = json.dumps(status)
    text = "b'%s'" % body if as_bytes else body
    result = {"item": item, "changed": False, "failed": False, "msg": "Failed to apply object: " + text,
              "reason": http_reason}
    if attempts:
        result["attempts"] = attempts
    return result


def status(code, reason, message, causes=None):
    answer = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
              "reason": reason, "code": code}
    if causes:
        answer["details"] = {"causes": causes}
    return answer


ERROR_500 = status(500, "InternalError", "etcdserver: request timed out")
ERROR_429 = status(429, "TooManyRequests", "the server has received too many requests and has asked us to try again later")
ERROR_403 = status(403, "Forbidden", 'daemonsets.apps "nvidia-device-plugin" is forbidden: unable to create new content in '
                   "namespace nvidia-device-plugin because it is being terminated")
CONFLICT = status(409, "Conflict",
                  'Apply failed with 1 conflict: conflict with "helm": .spec.template.spec.containers[name="nvidia-device-plugin"].image',
                  [{"reason": "FieldManagerConflict", "message": 'conflict with "helm"',
                    "field": '.spec.template.spec.containers[name="nvidia-device-plugin"].image'}])


@pytest.mark.parametrize("result, retry", [
    (failed(DAEMONSET, ERROR_500, "Internal Server Error"), True),
    (failed(DAEMONSET, ERROR_500, "Internal Server Error", as_bytes=True), True),
    (failed(DAEMONSET, ERROR_429, "Too Many Requests"), True),
    (failed(DAEMONSET, status(503, "ServiceUnavailable", "unavailable"), "Service Unavailable"), True),
    (failed(DAEMONSET, ERROR_403, "Forbidden"), False),
    (failed(DAEMONSET, CONFLICT, "Conflict"), False),
    (failed(DAEMONSET, status(422, "Invalid", "spec.template: Invalid value"), "Unprocessable Entity"), False),
    ({"item": DAEMONSET, "failed": True, "msg": "Failed to get client due to HTTPSConnectionPool(host='10.0.0.1', "
      "port=6443): Max retries exceeded with url: /version (Caused by NewConnectionError('Connection refused'))"}, True),
    ({"item": DAEMONSET, "changed": True, "result": DAEMONSET, "method": "apply"}, False),
    ({"item": DAEMONSET, "skipped": True}, False),
    # kubernetes.core's lazy discovery failing: the text of a DynamicApiError, headers (a dict) first.
    ({"item": DAEMONSET, "failed": False, "msg": "500\nReason: Internal Server Error\nHTTP response headers: "
      "HTTPHeaderDict({'Content-Type': 'application/json'})\nHTTP response body: " + json.dumps(ERROR_500)
      + "\nOriginal traceback: ..."}, True),
    # A proxy in front of the apiserver: no Status, the reason phrase says it.
    ({"item": DAEMONSET, "failed": True, "reason": "Service Unavailable",
      "msg": "Failed to apply object: <html><body><h1>503 Service Unavailable</h1></body></html>"}, True),
    # ansible-core 2.19+ with failed_when false: a module exception, no msg.
    ({"item": DAEMONSET, "failed": False, "changed": False,
      "failed_when_suppressed_exception": "MaxRetryError: Max retries exceeded with url: /apis (Connection refused)"}, True),
    ({"item": DAEMONSET, "failed": False, "changed": False,
      "failed_when_suppressed_exception": "KeyError: 'kind'"}, False),
])
def test_what_is_tried_again(result, retry):
    assert kw.k8s_retryable(result) is retry


def test_an_error_names_its_code_reason_and_message():
    error = kw.k8s_error(failed(DAEMONSET, ERROR_500, "Internal Server Error", as_bytes=True))
    assert error == {"code": 500, "reason": "InternalError", "message": "etcdserver: request timed out",
                     "managers": [], "fields": [], "retryable": True}
    conflict = kw.k8s_error(failed(DAEMONSET, CONFLICT, "Conflict"))
    assert (conflict["code"], conflict["managers"], conflict["fields"]) == (
        409, ["helm"], ['.spec.template.spec.containers[name="nvidia-device-plugin"].image'])
    # A module that died is no success, retried or not.
    died = kw.k8s_error({"item": DAEMONSET, "failed": False, "failed_when_suppressed_exception": "KeyError: 'kind'"})
    assert died["code"] is None and "KeyError" in died["message"] and died["retryable"] is False
    with pytest.raises(AnsibleFilterError, match="expected a task result"):
        kw.k8s_error("Failed")


def test_the_writes_are_sorted_into_done_conflicts_and_failed():
    results = [{"item": RUNTIMECLASS, "changed": True, "result": RUNTIMECLASS},
               {"item": CONFIGMAP, "changed": False, "result": CONFIGMAP},
               failed(DAEMONSET, ERROR_500, "Internal Server Error", attempts=5),
               {"item": DAEMONSET, "skipped": True}]
    writes = kw.k8s_writes(results)
    assert writes["done"] == [{"object": "RuntimeClass nvidia", "changed": True, "attempts": 1},
                              {"object": "ConfigMap nvidia-device-plugin/nvidia-device-plugin-configs", "changed": False,
                               "attempts": 1}]
    assert writes["failed"] == [{"object": "DaemonSet nvidia-device-plugin/nvidia-device-plugin", "code": 500,
                                 "reason": "InternalError", "message": "etcdserver: request timed out", "attempts": 5}]
    assert writes["conflicts"] == []
    conflict = kw.k8s_writes([failed(DAEMONSET, CONFLICT, "Conflict")])["conflicts"][0]
    assert conflict["item"] == DAEMONSET and conflict["managers"] == ["helm"]
    assert conflict["message"].startswith('Apply failed with 1 conflict: conflict with "helm"')
    assert conflict["advice"].startswith("helm is a Helm release: uninstall the release")


# The managers kube-apiserver 1.37 names in a server-side apply conflict after each way of changing a
# field (checked against tests/controlplane: kubectl set image, kubectl patch, kubectl apply both ways).
@pytest.mark.parametrize("manager, words", [
    ("kubectl-set", "a change made by hand with `kubectl set`: taking the field over puts the role's value back"),
    ("kubectl-patch", "a change made by hand with `kubectl patch`"),
    ("kubectl-edit", "a change made by hand with `kubectl edit`"),
    ("kubectl-client-side-apply", "`kubectl apply` of a manifest of its own (client-side)"),
    ("kubectl", "`kubectl apply --server-side` of a manifest of its own"),
    ("helm", "a Helm release"),
    ("gpu-operator", "another manager (an operator or a controller): stop it managing this object"),
])
def test_a_conflict_is_advised_by_the_manager_that_holds_the_field(manager, words):
    field = '.spec.template.spec.containers[name="nvidia-device-plugin"].image'
    status_of_conflict = status(409, "Conflict", 'Apply failed with 1 conflict: conflict with "%s": %s' % (manager, field),
                                [{"reason": "FieldManagerConflict", "message": 'conflict with "%s"' % manager, "field": field}])
    conflict = kw.k8s_writes([failed(DAEMONSET, status_of_conflict, "Conflict")])["conflicts"][0]
    assert conflict["managers"] == [manager]
    assert conflict["advice"].startswith(manager + " is ")
    assert words in conflict["advice"]
    # only a Helm release is told about Helm
    assert ("Helm" in conflict["advice"]) == (manager == "helm")


def namespace(deleted=None, conditions=(), finalizers=("kubernetes",)):
    ns = {"metadata": {"name": "nvidia-device-plugin"}, "spec": {"finalizers": list(finalizers)},
          "status": {"phase": "Terminating" if deleted else "Active", "conditions": list(conditions)}}
    if deleted:
        ns["metadata"]["deletionTimestamp"] = deleted
    return ns


def test_a_namespace_being_deleted_is_named_with_what_holds_it():
    assert kw.namespace_terminating([]) == ""
    assert kw.namespace_terminating([namespace()]) == ""
    held = namespace("2026-11-27T10:00:00Z", [
        {"type": "NamespaceDeletionDiscoveryFailure", "status": "False", "reason": "ResourcesDiscovered"},
        {"type": "NamespaceContentRemaining", "status": "True", "reason": "SomeResourcesRemain",
         "message": "Some resources are remaining: configmaps. has 1 resource instances"},
        {"type": "NamespaceFinalizersRemaining", "status": "True", "reason": "SomeFinalizersRemain",
         "message": "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"}])
    assert kw.namespace_terminating([held]) == (
        "namespace nvidia-device-plugin is being deleted (Terminating since 2026-11-27T10:00:00Z; "
        "NamespaceContentRemaining: Some resources are remaining: configmaps. has 1 resource instances; "
        "NamespaceFinalizersRemaining: Some content in the namespace has finalizers remaining: example.com/hold in 1 "
        "resource instances; finalizers: kubernetes). Kubernetes refuses new objects in it until it is gone; wait "
        "for its deletion to finish or remove what holds it, then run again.")


def test_objects_are_named_kind_namespace_name():
    assert kw.k8s_object_name(DAEMONSET) == "DaemonSet nvidia-device-plugin/nvidia-device-plugin"
    assert kw.k8s_object_name(RUNTIMECLASS) == "RuntimeClass nvidia"


def labelled(name, labels):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize("labels, level", [
    ({"pod-security.kubernetes.io/enforce": "restricted"}, "restricted"),
    ({"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/warn": "privileged"}, "baseline"),
    ({"pod-security.kubernetes.io/enforce": "privileged"}, None),
    # warn and audit only report; without the enforce label the cluster's default applies, which no label shows
    ({"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/audit": "restricted"}, None),
    ({}, None),
])
def test_a_namespace_whose_pod_security_refuses_the_plugin_is_named_with_the_fix(labels, level):
    words = kw.namespace_pod_security([labelled("nvidia-device-plugin", labels)], "gpu_device_plugin_namespace")
    if level is None:
        assert words == ""
        return
    assert words.startswith('namespace nvidia-device-plugin enforces Pod Security level "%s" '
                            "(label pod-security.kubernetes.io/enforce=%s): Kubernetes refuses the pods" % (level, level))
    assert ("kubectl label --overwrite namespace nvidia-device-plugin pod-security.kubernetes.io/enforce=privileged"
            in words)
    assert "(gpu_device_plugin_namespace)" in words
    assert kw.namespace_pod_security([]) == "" and kw.namespace_pod_security(None) == ""
