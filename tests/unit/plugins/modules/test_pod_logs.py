# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pod_logs: the paths and query it reads, what it refuses before any request, and how the answers are sorted (a
log read, a log the API refuses, kept apart and never a failure of the module, an answer tried again). The requests
go to plain functions standing in for k8s_client.request; the module reads the real API server in molecule
gpu_cluster (the smoke test's failed pods)."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.nvidia.plugins.module_utils import k8s_client
from ansible_collections.gpufleet.nvidia.plugins.modules.internal import pod_logs as pl
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module

PARAMS = {"namespace": "gpufleet-smoke", "container": None, "tail_lines": 50, "parallel": 4}


def api_error(status, reason, message=""):
    return k8s_client.ApiAnswer(status, reason, json.dumps({"kind": "Status", "status": "Failure", "reason": reason,
                                                            "message": message, "code": status}), {})


def by_pod(answers):
    """A send that answers by the pod's name (the path's part before /log), each answer in turn, and records them."""
    sent = []

    def send(method, path, query, body, _timeout):
        name = path.rsplit("/", 2)[-2]
        sent.append((method, path, query, body))
        queue = answers[name]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    send.sent = sent
    return send


def test_the_path_and_query_of_a_log():
    assert pl.log_path("gpufleet-smoke", "pod-a") == "/api/v1/namespaces/gpufleet-smoke/pods/pod-a/log"
    assert pl.log_query(PARAMS) == {"tailLines": "50"}
    assert pl.log_query(dict(PARAMS, container="nvidia-smi", tail_lines=0)) == {"container": "nvidia-smi"}
    assert pl.log_query(dict(PARAMS, tail_lines=None)) is None


def test_logs_read_refused_and_retried(monkeypatch):
    monkeypatch.setattr(k8s_client.time, "sleep", lambda _s: None)
    waiting = 'container "nvidia-smi" in pod "pod-b" is waiting to start: ContainerCreating'
    send = by_pod({"pod-a": ["GPU 0: NVIDIA H100 80GB HBM3\n"],
                   "pod-b": [api_error(400, "BadRequest", waiting)],
                   "pod-c": [api_error(503, "ServiceUnavailable", "etcd"), "Test PASSED\n"],
                   "pod-d": [api_error(404, "NotFound", 'pods "pod-d" not found')]})
    calls = k8s_client.Requests(send, retries=2, delay=0)
    result = pl.read_all(calls, PARAMS, ["pod-a", "pod-b", "pod-c", "pod-d", "pod-a"])
    assert result["logs"] == {"pod-a": "GPU 0: NVIDIA H100 80GB HBM3\n", "pod-c": "Test PASSED\n"}
    assert result["failures"] == [
        {"name": "pod-b", "status": 400, "reason": "BadRequest", "message": waiting, "tries": 1},
        {"name": "pod-d", "status": 404, "reason": "NotFound", "message": 'pods "pod-d" not found', "tries": 1}]
    # each pod once (pod-a named twice), pod-c's 503 tried again once
    assert calls.requests == 5
    assert all(method == "GET" and query == {"tailLines": "50"} and body is None
               for method, _path, query, body in send.sent)


def test_the_module_refuses_bad_settings_and_reads_nothing_for_no_pod(capsys):
    result = run_module(pl, {"namespace": "x", "names": ["a"], "parallel": 0, "tail_lines": -1}, capsys)
    assert result["failed"] and "parallel is 0" in result["msg"] and "tail_lines is -1" in result["msg"]
    result = run_module(pl, {"namespace": "x", "names": []}, capsys)
    assert result["changed"] is False and result["requests"] == 0 and result["logs"] == {} and not result.get("failed")
