# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""pods_wait: when waiting stops. The Node and Pod shapes are those of the v1 API (conditions as the
node lifecycle controller sets them when a kubelet stops posting status); the module's loop runs
against the test cluster's real control plane in molecule gpu_cluster (faults.yml) and gpu_dra."""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.modules.internal import pods_wait as pw


def node(name, status="True", reason="KubeletReady", message="kubelet is posting ready status"):
    return {"metadata": {"name": name},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": status, "reason": reason, "message": message}]}}


GONE = node("gpu-b", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")


def pod(name, phase, node_name=None, meant_for=None, key="metadata.name"):
    spec = {"nodeName": node_name} if node_name else {}
    if meant_for:
        requirement = {"key": key, "operator": "In", "values": [meant_for]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [requirement]} if key == "metadata.name" else {"matchExpressions": [requirement]}]}}}
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


def test_all_finished_ends_the_wait_without_reading_nodes():
    pods = [pod("a", "Succeeded", "gpu-a"), pod("b", "Failed", "gpu-b")]
    assert pw.judge(pods, None, 2) == (True, True, {})


def test_fewer_pods_than_expected_keep_it_waiting():
    assert pw.judge([pod("a", "Succeeded", "gpu-a")], [node("gpu-a")], 2) == (False, False, {})


def test_a_pod_on_a_ready_node_keeps_it_waiting():
    pods = [pod("a", "Running", "gpu-a"), pod("b", "Pending", "gpu-b")]
    assert pw.judge(pods, [node("gpu-a"), GONE], 2) == (
        False, False, {"gpu-b": "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"})


def test_only_pods_on_nodes_that_are_not_ready_left_ends_the_wait():
    pods = [pod("a", "Succeeded", "gpu-a"), pod("b", "Pending", None, meant_for="gpu-b"),
            pod("c", "Pending", "gpu-c")]
    runtime_down = node("gpu-c", "False", "KubeletNotReady", "container runtime is down")
    done, finished, down = pw.judge(pods, [node("gpu-a"), GONE, runtime_down], 3)
    assert (done, finished) == (True, False)
    assert down == {"gpu-b": "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)",
                    "gpu-c": "Ready=False (KubeletNotReady: container runtime is down)"}


def test_a_node_that_is_gone_or_has_no_ready_condition_is_named():
    pods = [pod("b", "Pending", "gpu-b"), pod("x", "Pending", "gpu-x")]
    bare = {"metadata": {"name": "gpu-b"}, "status": {}}
    assert pw.judge(pods, [bare], 2) == (True, False, {"gpu-b": "no Ready condition", "gpu-x": "no Node named gpu-x"})


def test_an_unbound_pod_not_pinned_to_one_node_keeps_it_waiting():
    assert pw.judge([pod("b", "Pending")], [GONE], 1)[0] is False
    assert pw.node_of(pod("b", "Pending", None, meant_for="gpu-b")) == "gpu-b"
    assert pw.node_of(pod("b", "Pending", None, meant_for="gpu-b", key="kubernetes.io/hostname")) == "gpu-b"
    assert pw.node_of(pod("b", "Pending", "gpu-c", meant_for="gpu-b")) == "gpu-c"
    two = pod("b", "Pending", None, meant_for="gpu-b")
    two["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].append(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-c"]}]})
    assert pw.node_of(two) is None


def test_a_node_counts_as_not_ready_only_once_settled():
    pods = [pod("b", "Pending", "gpu-b")]
    seen = []
    assert pw.judge(pods, [GONE], 1, lambda name, why: seen.append((name, why)) or False) == (False, False, {})
    assert seen == [("gpu-b", "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)")]
    assert pw.judge(pods, [GONE], 1, lambda name, why: True)[0] is True


def unplaced(name, message, meant_for="gpu-a"):
    # The scheduler's condition on a pod it could not place (pkg/scheduler: PodScheduled False, Unschedulable),
    # here a DRA claim whose selector no device of the node matches.
    waiting = pod(name, "Pending", None, meant_for=meant_for)
    waiting["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": message}]
    return waiting


def test_a_pod_the_scheduler_cannot_place_ends_the_wait_once_settled():
    words = "0/3 nodes are available: 1 cannot allocate all claims. preemption: 0/3 nodes are available."
    pods = [pod("a", "Succeeded", "gpu-b"), unplaced("b", words)]
    assert pw.unschedulable(pods[1]) == words
    assert pw.unschedulable(pods[0]) is None
    # without the option (the module's default) it keeps the wait, as before
    assert pw.judge(pods, [node("gpu-a"), node("gpu-b")], 2) == (False, False, {})
    seen = []
    assert pw.judge(pods, [node("gpu-a"), node("gpu-b")], 2,
                    placed=lambda name, why: seen.append((name, why)) or False)[0] is False
    assert seen == [("b", words)]
    assert pw.judge(pods, [node("gpu-a"), node("gpu-b")], 2, placed=lambda name, why: True) == (True, False, {})
    # a pod that is merely not scheduled yet (no condition) is waited for
    fresh = pod("c", "Pending", None, meant_for="gpu-a")
    assert pw.judge([fresh], [node("gpu-a")], 1, placed=lambda name, why: True)[0] is False


def test_connection_settings_come_from_the_parameters_else_kubernetes_cores_variables():
    environ = {"K8S_AUTH_HOST": "https://10.0.0.1:6443/", "K8S_AUTH_API_KEY": "token", "K8S_AUTH_VERIFY_SSL": "no",
               "K8S_AUTH_KUBECONFIG": "/etc/kube.conf", "K8S_AUTH_CONTEXT": ""}
    params = {"kubeconfig": None, "context": "admin@prod", "host": None, "api_key": None, "validate_certs": None,
              "ca_cert": None}
    assert pw.auth_settings(params, environ) == {"kubeconfig": "/etc/kube.conf", "context": "admin@prod",
                                                 "host": "https://10.0.0.1:6443/", "api_key": "token",
                                                 "validate_certs": False}
    assert pw.auth_settings(dict(params, kubeconfig="/root/k", validate_certs=True), {}) == {
        "kubeconfig": "/root/k", "context": "admin@prod", "validate_certs": True}


# The kubelet's own shapes, as the real nodes of tests/realnode show them: a container waiting on an
# image it cannot pull, and a pod whose sandbox containerd refuses (no container status, the
# PodReadyToStartContainers condition False, the refusal only in a FailedCreatePodSandBox event).
def waiting_pod(name, reason, message):
    item = pod(name, "Pending", "gpu-a")
    item["status"]["containerStatuses"] = [{"name": "smoke", "state": {"waiting": {"reason": reason, "message": message}}}]
    return item


def sandboxless_pod(name, uid):
    item = pod(name, "Pending", "gpu-a")
    item["metadata"]["uid"] = uid
    item["status"]["conditions"] = [{"type": "PodReadyToStartContainers", "status": "False"},
                                    {"type": "PodScheduled", "status": "True"}]
    item["status"]["containerStatuses"] = [{"name": "smoke", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    return item


HANDLER = ('Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: '
           'no runtime for "nvidia" is configured')


def sandbox_event(uid, message, when):
    return {"involvedObject": {"kind": "Pod", "uid": uid}, "reason": "FailedCreatePodSandBox", "message": message,
            "lastTimestamp": when}


NO_SUCH_HOST = ('Back-off pulling image "registry.invalid/cuda:1": ErrImagePull: failed to pull and unpack image '
                '"registry.invalid/cuda:1": failed to resolve reference "registry.invalid/cuda:1": failed to do request: '
                'Head "https://registry.invalid/v2/cuda/manifests/1": dial tcp: lookup registry.invalid: no such host')


def test_a_pull_the_registry_answered_for_good_is_not_starting():
    item = waiting_pod("a", "ImagePullBackOff", NO_SUCH_HOST)
    assert pw.not_starting(item, {}) == "ImagePullBackOff: " + NO_SUCH_HOST
    for message in ('rpc error: code = NotFound desc = failed to pull and unpack image "nvcr.io/nvidia/cuda:9.9": '
                    'failed to resolve reference: nvcr.io/nvidia/cuda:9.9: not found',
                    'failed to authorize: failed to fetch anonymous token: unexpected status: 401 Unauthorized'):
        assert pw.not_starting(waiting_pod("b", "ErrImagePull", message), {}) is not None
    assert pw.not_starting(waiting_pod("c", "InvalidImageName", 'couldn\'t parse image name "Bad:Name"'), {}) is not None


def test_a_pull_the_kubelet_will_try_again_keeps_the_wait():
    # the kubelet shows the last failure while it pulls again: a timeout, a 429, a 5xx may pass
    for message in ('Back-off pulling image "nvcr.io/nvidia/cuda:12.2.2": ErrImagePull: failed to copy: read tcp: i/o timeout',
                    'failed to pull: unexpected status from HEAD request: 429 Too Many Requests',
                    'failed to pull: unexpected status code: 503 Service Unavailable'):
        assert pw.not_starting(waiting_pod("a", "ImagePullBackOff", message), {}) is None
    # a container the kubelet may still make (a ConfigMap created late), a pull in progress
    assert pw.not_starting(waiting_pod("b", "CreateContainerConfigError", 'configmap "x" not found'), {}) is None
    assert pw.not_starting(waiting_pod("c", "ContainerCreating", ""), {}) is None


def test_a_sandbox_refusal_comes_from_the_newest_event_of_the_pods_uid():
    events = [sandbox_event("u1", "network plugin is not ready", "2026-12-08T01:00:00Z"),
              sandbox_event("u1", HANDLER, "2026-12-08T01:00:09Z"),
              sandbox_event("old-pod-of-the-same-name", HANDLER, "2026-12-08T01:00:10Z"),
              # containerd 2.x and CRI-O say it their way
              sandbox_event("u4", 'Failed to create pod sandbox: rpc error: code = Unknown desc = unable to get OCI runtime '
                                  'for sandbox "0f1e": no runtime for "nvidia" is configured', "2026-12-08T01:00:11Z"),
              sandbox_event("u5", "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to find runtime "
                                  "handler nvidia from runtime list map[crun:0xc000 runc:0xc001]", "2026-12-08T01:00:12Z"),
              # the kubelet retries a network plugin that is not ready yet: not final
              sandbox_event("u6", "Failed to create pod sandbox: plugin type=\"calico\" failed (add): connection refused",
                            "2026-12-08T01:00:13Z")]
    words = pw.sandbox_failures(events)
    assert words["u1"] == "FailedCreatePodSandBox: " + HANDLER
    assert set(words) == {"u1", "old-pod-of-the-same-name", "u4", "u5"}
    assert pw.not_starting(sandboxless_pod("a", "u1"), words) == "FailedCreatePodSandBox: " + HANDLER
    # another pod (another UID) is not judged by it, nor a pod whose containers have started
    assert pw.not_starting(sandboxless_pod("b", "u2"), words) is None
    started = sandboxless_pod("c", "u1")
    started["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-12-08T01:00:11Z"}}
    assert pw.not_starting(started, words) is None


def test_pods_that_cannot_start_end_the_wait_once_their_grace_is_over():
    pods = [pod("a", "Succeeded", "gpu-a"), waiting_pod("b", "ErrImagePull", "not found"), sandboxless_pod("c", "u3")]
    words = pw.sandbox_failures([sandbox_event("u3", HANDLER, "2026-12-08T01:00:00Z")])
    seen = []
    done, finished, down = pw.judge(pods, [node("gpu-a")], 3, started=lambda name, why: seen.append((name, why)) or True,
                                    sandbox_words=words)
    assert (done, finished, down) == (True, False, {})
    assert seen == [("b", "ErrImagePull: not found"), ("c", "FailedCreatePodSandBox: " + HANDLER)]
    # within the grace (started says not yet) the wait goes on
    assert pw.judge(pods, [node("gpu-a")], 3, started=lambda name, why: False, sandbox_words=words)[0] is False
    # without start_grace (started None) such pods keep the wait as before
    assert pw.judge(pods, [node("gpu-a")], 3, sandbox_words=words)[0] is False


def test_a_spell_is_given_up_after_its_grace_and_starts_again_once_broken(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(pw.time, "monotonic", lambda: now[0])
    spells = pw.Spells(20)
    spells.keep_only({"a"})
    assert spells.over("a", "ErrImagePull: x") is False
    now[0] = 119.0
    assert spells.over("a", "ErrImagePull: x") is False
    now[0] = 120.0
    assert spells.over("a", "ErrImagePull: y") is True and spells.given_up == {"a": "ErrImagePull: y"}
    # a look where the pod is out of the state (it started pulling again) forgets it and its verdict
    spells.keep_only(set())
    assert spells.given_up == {} and spells.since == {}
    assert spells.over("a", "ErrImagePull: z") is False


def test_events_the_api_does_not_give_turn_the_sandbox_check_off(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise pw.ApiAnswer(403, "Forbidden", "events is forbidden", {})

    monkeypatch.setattr(pw, "request", refuse)
    assert pw.read_sandbox_failures(None, {"namespace": "smoke", "request_timeout": 5}, {"u": "x"}) is None

    def busy(*_args, **_kwargs):
        raise pw.ApiAnswer(503, "Service Unavailable", "", {})

    monkeypatch.setattr(pw, "request", busy)
    assert pw.read_sandbox_failures(None, {"namespace": "smoke", "request_timeout": 5}, {"u": "x"}) == {"u": "x"}
