# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""api_patch: the paths it patches, what it refuses before any request, and how the answers are sorted
(patched, 409 for the caller to read again, failed for good, not tried after a failure). The requests
go to plain functions standing in for k8s_client.request; the module's requests against the real API
server run in molecule gpu_cluster (site.yml's Node labels under --limit, the health gating)."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.nvidia.plugins.module_utils import k8s_client
from ansible_collections.gpufleet.nvidia.plugins.modules.internal import api_patch as ap
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module

PARAMS = {"api_version": "v1", "resource": "nodes", "namespace": None, "parallel": 4}


def api_error(status, reason, message=""):
    return k8s_client.ApiAnswer(status, reason, json.dumps({"kind": "Status", "status": "Failure", "reason": reason,
                                                            "message": message, "code": status}), {})


def by_path(answers):
    """A send that answers by the object's name (the last part of the path), each in turn, and records them."""
    sent = []

    def send(method, path, query, body, _timeout):
        name = path.rsplit("/", 1)[-1]
        sent.append((method, path, query, body))
        queue = answers[name]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    send.sent = sent
    return send


def test_paths_of_core_group_and_namespaced_resources():
    assert ap.object_path(PARAMS, "gpu-a") == "/api/v1/nodes/gpu-a"
    assert ap.object_path(dict(PARAMS, api_version="apps/v1", resource="daemonsets", namespace="nv"),
                          "plugin") == "/apis/apps/v1/namespaces/nv/daemonsets/plugin"


def test_bad_patches_are_named_before_any_request():
    assert ap.patch_errors([{"name": "a", "patch": {}}, {"name": "a", "patch": {}}, {"patch": {}},
                            {"name": "b", "patch": "labels"}]) == [
        "patches[1]: a is patched twice", "patches[2] needs a name", "patches[3] (b): patch must be a dict, got str"]


def test_patched_conflict_and_retried(monkeypatch):
    monkeypatch.setattr(k8s_client.time, "sleep", lambda _s: None)
    send = by_path({"gpu-a": [{}], "gpu-b": [api_error(409, "Conflict", "the object has been modified")],
                    "gpu-c": [api_error(500, "InternalError", "etcd"), {}]})
    calls = k8s_client.Requests(send, retries=2, delay=0)
    patches = [{"name": name, "patch": {"metadata": {"labels": {"x": name}}}} for name in ("gpu-a", "gpu-b", "gpu-c")]
    result = ap.send_all(calls, PARAMS, patches, check_mode=False)
    assert result == {"patched": ["gpu-a", "gpu-c"], "conflicts": ["gpu-b"], "failures": [], "not_tried": []}
    assert calls.requests == 4  # gpu-c's 500 tried again once
    assert {(method, query) for method, _path, query, _body in send.sent} == {("PATCH", None)}
    # check mode: the API server dry-runs each patch
    dry = by_path({"gpu-a": [{}]})
    ap.send_all(k8s_client.Requests(dry), PARAMS, patches[:1], check_mode=True)
    assert dry.sent[0][2] == {"dryRun": "All"}


def test_a_refusal_stops_the_patches_not_yet_sent(monkeypatch):
    monkeypatch.setattr(k8s_client.time, "sleep", lambda _s: None)
    send = by_path({"gpu-a": [api_error(403, "Forbidden", 'nodes "gpu-a" is forbidden')], "gpu-b": [{}]})
    result = ap.send_all(k8s_client.Requests(send), dict(PARAMS, parallel=1), [
        {"name": "gpu-a", "patch": {}}, {"name": "gpu-b", "patch": {}}], check_mode=False)
    assert result["failures"] == [{"name": "gpu-a", "status": 403, "reason": "Forbidden",
                                   "message": 'nodes "gpu-a" is forbidden', "tries": 1}]
    assert result["not_tried"] == ["gpu-b"] and result["patched"] == []


def test_the_module_refuses_bad_settings_and_sends_nothing_for_no_patch(capsys):
    result = run_module(ap, {"resource": "nodes", "patches": [{"name": "a", "patch": []}], "parallel": 0}, capsys)
    assert result["failed"] and "parallel is 0" in result["msg"] and "patch must be a dict" in result["msg"]
    result = run_module(ap, {"resource": "nodes", "patches": []}, capsys)
    assert result["changed"] is False and result["requests"] == 0 and not result.get("failed")


def test_the_diff_merges_the_patch_onto_what_the_object_has_now():
    assert ap.merged({"metadata": {"labels": {"a": "1", "b": "2"}}},
                     {"metadata": {"labels": {"b": "3", "a": None, "c": "4"}}}) == {
        "metadata": {"labels": {"b": "3", "c": "4"}}}
    patches = [{"name": "gpu-a", "before": {"metadata": {"labels": {"n": "7"}}}, "patch": {"metadata": {"labels": {"n": "8"}}}},
               {"name": "gpu-b", "patch": {"metadata": {"labels": {"n": "8"}}}},
               {"name": "gpu-c", "before": {}, "patch": {"metadata": {"labels": {"n": "8"}}}}]
    assert ap.diffs(patches, {"gpu-a", "gpu-b"}) == [
        {"before": {"metadata": {"labels": {"n": "7"}}}, "after": {"metadata": {"labels": {"n": "8"}}},
         "before_header": "gpu-a (before)", "after_header": "gpu-a (after)"}]
