# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pods_batch: what it refuses before any request, which answers it tries again and how often, and how
a create that meets a pod already there is judged. The requests go to plain functions standing in for
k8s_client.request (they take a method, a path, a query and a body, and return the JSON answer or raise
what it raises); the module's requests against an API run in molecule gpu_cluster (the smoke test, faults.yml's 500s)
and in benchmarks/cluster_scale.py."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.nvidia.plugins.module_utils import k8s_client
from ansible_collections.gpufleet.nvidia.plugins.modules.internal import pods_batch as pb
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module

PARAMS = {"namespace": "smoke", "kind": "Pod", "request_timeout": 30, "retries": 4, "delay": 2.0, "parallel": 4}


def api_error(status, reason, message="", retry_after=None):
    return k8s_client.ApiAnswer(status, reason, json.dumps({"kind": "Status", "status": "Failure", "reason": reason,
                                                            "message": message, "code": status}),
                                {"Retry-After": str(retry_after)} if retry_after is not None else {})


def scripted(*answers):
    """A call that gives each answer in turn (an exception is raised), and records its arguments."""
    calls = []

    def call(*args, **kwargs):
        calls.append((args, kwargs))
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    call.calls = calls
    return call


def pod(name, labels=None, namespace=None):
    metadata = {"name": name, "labels": labels or {"run": "1"}}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": []}}


def test_definitions_are_checked_before_any_request():
    assert pb.definition_errors([pod("a"), pod("a"), {"kind": "Pod"}, pod("b", namespace="other"),
                                 {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}], "smoke") == [
        "definitions[1] names Pod a a second time",
        "definitions[2] has no metadata.name",
        "definitions[3] (b) is for namespace other, not smoke",
        "definitions[4] is apps/v1 Deployment, not a v1 Pod",
    ]
    assert pb.definition_errors([pod("a", namespace="smoke"), pod("b")], "smoke") == []
    # The claim templates of the nodes on the DRA path: resource.k8s.io/v1, and only those.
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t"}}
    assert pb.definition_errors([template], "smoke", "ResourceClaimTemplate") == []
    assert pb.definition_errors([pod("a")], "smoke", "ResourceClaimTemplate") == [
        "definitions[0] is v1 Pod, not a resource.k8s.io/v1 ResourceClaimTemplate"]


def test_server_errors_and_no_answer_are_tried_again_until_one_passes(monkeypatch):
    slept = []
    monkeypatch.setattr(pb.time, "sleep", slept.append)
    send = scripted(api_error(500, "InternalError"), OSError("connection reset"), api_error(503, "ServiceUnavailable"),
                    {"kind": "Pod"})
    batch = pb.Batch(PARAMS, send)
    answer, failure, tries = batch.call("POST", "/api/v1/namespaces/smoke/pods", None, {"kind": "Pod"})
    assert (answer, failure, tries, batch.requests) == ({"kind": "Pod"}, None, 4, 4)
    assert slept == [2.0, 2.0, 2.0]
    assert send.calls[0][0] == ("POST", "/api/v1/namespaces/smoke/pods", None, {"kind": "Pod"}, 30)


def test_a_refusal_is_not_tried_again(monkeypatch):
    monkeypatch.setattr(pb.time, "sleep", lambda _s: None)
    send = scripted(api_error(422, "Invalid", 'Pod "a" is invalid: spec.containers: Required value'), {})
    answer, failure, tries = pb.Batch(PARAMS, send).call("POST", "/api/v1/namespaces/smoke/pods")
    assert answer is None and tries == 1
    assert failure == (422, "Invalid", 'Pod "a" is invalid: spec.containers: Required value')


def test_retries_run_out_and_429_waits_its_retry_after(monkeypatch):
    slept = []
    monkeypatch.setattr(pb.time, "sleep", slept.append)
    send = scripted(api_error(429, "TooManyRequests", "slow down", retry_after=7), api_error(500, "InternalError", "etcd"))
    answer, failure, tries = pb.Batch(dict(PARAMS, retries=2), send).call("GET", "/api/v1/namespaces/smoke/pods")
    assert (answer, failure, tries) == (None, (500, "InternalError", "etcd"), 3)
    assert slept == [7.0, 2.0]
    # A Retry-After past 30 s is not believed.
    assert k8s_client.retry_after(api_error(429, "TooManyRequests", retry_after=600), 2.0) == 30.0
    assert k8s_client.retry_after(api_error(500, "InternalError"), 2.0) == 2.0


class Api:
    """Stands in for the API: creates answer in turn, reads find the pods given, each request is kept."""

    def __init__(self, create_answers, existing=None):
        self.create = scripted(*create_answers)
        self.existing = existing or {}
        self.requests = []

    def __call__(self, method, path, query, body, timeout):
        self.requests.append((method, path, query))
        if method == "POST":
            return self.create(method, path, query, body, timeout)
        name = path.rsplit("/", 1)[-1]
        if name not in self.existing:
            raise api_error(404, "NotFound", 'pods "%s" not found' % name)
        return self.existing[name]


def test_a_pod_made_by_an_earlier_try_is_kept_and_another_owners_pod_is_named(monkeypatch):
    monkeypatch.setattr(pb.time, "sleep", lambda _s: None)
    conflict = api_error(409, "AlreadyExists", 'pods "a" already exists')
    api = Api([conflict], existing={"a": pod("a", labels={"run": "1", "extra": "x"})})
    expected = {"created": [], "found": ["a"], "failures": [], "not_tried": []}
    assert pb.create(pb.Batch(PARAMS, api), [pod("a")], False) == expected
    assert api.requests == [("POST", "/api/v1/namespaces/smoke/pods", None), ("GET", "/api/v1/namespaces/smoke/pods/a", None)]

    api = Api([conflict], existing={"a": pod("a", labels={"run": "0"})})
    outcome = pb.create(pb.Batch(PARAMS, api), [pod("a")], False)
    assert outcome["created"] == [] and outcome["found"] == []
    assert outcome["failures"][0]["name"] == "a" and outcome["failures"][0]["status"] == 409
    assert "a Pod of that name is there, with the labels run=0" in pb.failure_words(outcome["failures"], "create")

    # Deleted between the 409 and the read: created again. Being deleted: named with since when.
    api = Api([conflict, {}])
    assert pb.create(pb.Batch(PARAMS, api), [pod("a")], False)["created"] == ["a"]
    going = pod("a", labels={"run": "0"})
    going["metadata"]["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    outcome = pb.create(pb.Batch(PARAMS, Api([conflict], existing={"a": going})), [pod("a")], False)
    assert "deleted since 2026-11-27T10:00:00Z, not gone yet" in pb.failure_words(outcome["failures"], "create")
    # In check mode a 409 is a leftover the real run's delete step takes away first.
    assert pb.create(pb.Batch(PARAMS, Api([conflict])), [pod("a")], True)["created"] == ["a"]


def test_the_first_failure_for_good_stops_the_batch_and_alike_failures_are_named_together(monkeypatch):
    monkeypatch.setattr(pb.time, "sleep", lambda _s: None)
    forbidden = api_error(403, "Forbidden", 'pods is forbidden: User "ci" cannot create resource "pods"')
    api = Api([forbidden])
    outcome = pb.create(pb.Batch(dict(PARAMS, parallel=1), api), [pod(name) for name in "abcdefgh"], False)
    assert [failure["name"] for failure in outcome["failures"]] == ["a"]
    assert outcome["not_tried"] == list("bcdefgh") and len(api.requests) == 1
    words = pb.failure_words([dict(name=name, status=403, reason="Forbidden", message="no", tries=1)
                              for name in "abcdefg"] + [dict(name="z", status=500, reason="InternalError",
                                                             message="etcd", tries=5)], "create")
    assert words == "a, b, c, d, e and 2 more: HTTP 403 Forbidden: no; z: HTTP 500 InternalError: etcd (tried 5 times)"


def test_creates_are_dry_runs_in_check_mode_and_go_to_the_module_namespace():
    api = Api([{}])
    assert pb.create(pb.Batch(PARAMS, api), [pod("a"), pod("b")], True)["created"] == ["a", "b"]
    for args, _kwargs in api.create.calls:
        assert args[:3] == ("POST", "/api/v1/namespaces/smoke/pods", {"dryRun": "All"})
        assert args[3]["metadata"]["namespace"] == "smoke"


def test_claim_templates_go_to_their_own_api_group_and_are_deleted_by_label_in_one_request():
    params = dict(PARAMS, kind="ResourceClaimTemplate")
    api = Api([{}])
    template = {"metadata": {"name": "gpufleet-smoke-dra-a", "labels": {"run": "1"}}, "spec": {"spec": {}}}
    assert pb.create(pb.Batch(params, api), [template], False)["created"] == ["gpufleet-smoke-dra-a"]
    (args, _kwargs), = api.create.calls
    assert args[:3] == ("POST", "/apis/resource.k8s.io/v1/namespaces/smoke/resourceclaimtemplates", None)
    assert (args[3]["apiVersion"], args[3]["kind"]) == ("resource.k8s.io/v1", "ResourceClaimTemplate")

    requests = []

    def lister(method, path, query, body, timeout):
        requests.append((method, path, query))
        return {"items": [template]}

    assert pb.delete(pb.Batch(params, lister), None, "run=1", False)["deleted"] == ["gpufleet-smoke-dra-a"]
    assert requests == [("GET", "/apis/resource.k8s.io/v1/namespaces/smoke/resourceclaimtemplates", {"labelSelector": "run=1"}),
                        ("DELETE", "/apis/resource.k8s.io/v1/namespaces/smoke/resourceclaimtemplates", {"labelSelector": "run=1"})]


def test_deleting_by_label_is_one_list_and_one_deletecollection_and_by_name_one_delete_a_pod_found():
    class Lister(Api):
        def __call__(self, method, path, query, body, timeout):
            self.requests.append((method, path, query))
            if method == "GET":
                return {"items": [pod(name) for name in self.existing] + [
                    {"metadata": {"name": "going", "deletionTimestamp": "2026-11-27T10:00:00Z"}}]}
            if path.endswith("/pods"):
                return {"kind": "PodList", "items": [pod(name) for name in self.existing]}
            return {}

    api = Lister([], existing={"a": {}, "b": {}})
    assert pb.delete(pb.Batch(PARAMS, api), None, "run=1", False) == {
        "deleted": ["a", "b"], "going": ["going"], "failures": [], "not_tried": []}
    assert api.requests == [("GET", "/api/v1/namespaces/smoke/pods", {"labelSelector": "run=1"}),
                            ("DELETE", "/api/v1/namespaces/smoke/pods", {"labelSelector": "run=1"})]
    api = Lister([], existing={"a": {}, "b": {}})
    assert pb.delete(pb.Batch(PARAMS, api), {"b", "c", "going"}, "", False) == {
        "deleted": ["b"], "going": ["going"], "failures": [], "not_tried": []}
    assert api.requests == [("GET", "/api/v1/namespaces/smoke/pods", None),
                            ("DELETE", "/api/v1/namespaces/smoke/pods/b", None)]
    api = Lister([], existing={"a": {}})
    assert pb.delete(pb.Batch(PARAMS, api), None, "run=1", True)["deleted"] == ["a"]
    assert [method for method, _path, _query in api.requests] == ["GET"]


def test_deleting_by_label_where_deletecollection_is_forbidden_deletes_each_pod():
    class OnlyDelete(Api):
        def __call__(self, method, path, query, body, timeout):
            self.requests.append((method, path, query))
            if method == "GET":
                return {"items": [pod(name) for name in self.existing]}
            if path.endswith("/pods"):
                raise api_error(403, "Forbidden", 'pods is forbidden: cannot deletecollection resource "pods"')
            return {}

    api = OnlyDelete([], existing={"a": {}, "b": {}})
    assert pb.delete(pb.Batch(PARAMS, api), None, "run=1", False)["deleted"] == ["a", "b"]
    assert sorted(api.requests[2:]) == [("DELETE", "/api/v1/namespaces/smoke/pods/a", None),
                                        ("DELETE", "/api/v1/namespaces/smoke/pods/b", None)]


def test_connection_settings_take_both_of_kubernetes_cores_names_and_refuse_what_they_cannot_do():
    assert k8s_client.auth_settings({}, {"K8S_AUTH_VALIDATE_CERTS": "no", "K8S_AUTH_CA_CERT": "/ca.pem"}) == {
        "validate_certs": False, "ca_cert": "/ca.pem"}
    assert k8s_client.unsupported_settings({"K8S_AUTH_PROXY": "http://proxy:3128", "K8S_AUTH_HOST": "h",
                                            "K8S_AUTH_IMPERSONATE_USER": ""}) == ["K8S_AUTH_PROXY"]
    # Retry-After read whatever the case of the header's name.
    assert k8s_client.retry_after(k8s_client.ApiAnswer(429, "TooManyRequests", "", {"retry-after": "3"}), 2.0) == 3.0


def test_failures_are_named_with_the_answer_and_the_tries():
    assert pb.failure_words([{"name": "p", "status": 500, "reason": "InternalError", "message": "etcd", "tries": 5},
                             {"name": "q", "status": None, "reason": None, "message": "no answer: timed out",
                              "tries": 1}], "create") == (
        "p: HTTP 500 InternalError: etcd (tried 5 times); q: no answer: timed out")


def test_bad_arguments_are_named_before_any_request(capsys):
    result = run_module(pb, {"namespace": "smoke", "state": "absent"}, capsys)
    assert result["failed"] and "state=absent needs names or label_selectors" in result["msg"]
    result = run_module(pb, {"namespace": "smoke", "parallel": 0, "delay": -1, "definitions": [pod("a")]}, capsys)
    assert result["failed"] and "parallel is 0, delay is -1.0" in result["msg"]
    result = run_module(pb, {"namespace": "smoke", "definitions": [pod("a")], "wait": True}, capsys)
    assert result["failed"] and "names, label_selectors and wait go with state=absent" in result["msg"]
    assert result["requests"] == 0
