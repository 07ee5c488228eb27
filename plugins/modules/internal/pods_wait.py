#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pods_wait
version_added: 0.1.0
short_description: "Internal: Wait for pods to finish, or for their nodes to stop being Ready"
description:
  - Reads the pods of a namespace that carry the given labels, again and again, until every one of them has
    finished (phase C(Succeeded) or C(Failed)), or until every one that has not runs on a node whose C(Ready)
    condition is not C(True), or until O(timeout) seconds have passed.
  - A node that stops being Ready (its kubelet stopped posting status, it lost its network, it rebooted) will not
    finish its pods within any wait; waiting stops for them at once and the node is named with its condition,
    instead of a whole timeout spent on a pod that stays C(Pending). A pod's node is C(spec.nodeName), or while the
    pod is not bound yet, the one node its required node affinity pins it to (C(metadata.name) or
    C(kubernetes.io/hostname) C(In) one value).
  - Each look is one list of the pods and, while some have not finished, one list of the Nodes, whatever the
    number of pods; a node counts as not Ready once it was seen so for O(grace) seconds. An answer the API gives
    under load (HTTP 429, 5xx) or no answer is met by looking again at the next turn.
  - With O(unschedulable_grace), a pod the scheduler cannot place (its C(PodScheduled) condition C(False) with
    reason C(Unschedulable) - no node fits, a claim no device matches, a node whose GPUs are all taken) that stays so
    for that many seconds ends the wait for it too, named in RV(unschedulable) with the scheduler's words, instead
    of a whole timeout spent on a pod that stays C(Pending).
  - With O(start_grace), a pod on its node that the kubelet's retries will not start, seen so for that many seconds,
    ends the wait for it, named in RV(not_started) with the kubelet's words, instead of a whole timeout. That is a
    container waiting on an image reference that does not parse (C(InvalidImageName)), an image absent under
    C(imagePullPolicy Never), or a pull the registry answered with no such image, tag or repository, refused
    credentials or a name that does not resolve (C(ErrImagePull), C(ImagePullBackOff)); or a sandbox the container
    runtime refuses for a RuntimeClass handler it does not have (a C(FailedCreatePodSandBox) event such as
    C(no runtime for "nvidia" is configured)). A pull that timed out or met HTTP 429 or 5xx, a network plugin still
    starting, are left to the kubelet's retries. The events are read (one list of the namespace's
    C(FailedCreatePodSandBox) events) only while some pod has a node but no sandbox yet; where the API refuses that
    list (no C(list) on C(events)), sandbox refusals are left to the timeout.
  - Changes nothing.
  - Internal to the role gpufleet.nvidia.gpu_smoke_test, not part of the collection's public interface; its options and
    results may change in any release.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  grace:
    description:
      - Seconds a node must be seen not Ready, look after look, before waiting stops for its pods. A kubelet
        reports C(Ready=False) for a moment when it or the container runtime restarts; C(Ready=Unknown) comes only
        after the node lifecycle controller's grace period (C(--node-monitor-grace-period)).
    type: int
    default: 20
  unschedulable_grace:
    description:
      - Seconds a pod must be seen unschedulable, look after look, before waiting stops for it; the scheduler tries
        again when the cluster changes, so a short spell is not final. Null (the default) waits for such a pod until
        O(timeout).
    type: int
  start_grace:
    description:
      - Seconds a pod must be seen not starting on its node (above), look after look, before waiting stops for it;
        the kubelet retries pulls and sandboxes, so a short spell (a registry's hiccup, a network plugin still
        starting) is not final. Null (the default) waits for such a pod until O(timeout).
    type: int
  namespace:
    description: Namespace of the pods.
    type: str
    required: true
  label_selectors:
    description: Label selectors the pods must all match (C(key=value), C(key!=value), C(key), C(!key)).
    type: list
    elements: str
    default: []
  count:
    description: How many pods are expected; waiting goes on while fewer are found.
    type: int
    default: 1
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 300
  sleep:
    description: Seconds between two looks.
    type: float
    default: 2.0
  keep:
    description:
      - Dotted paths of the only fields of each pod returned in RV(resources) (C(metadata.name), C(status)), with
        what leads to them; a list on the way keeps every entry, each cut the same way. Without it, the whole pods,
        less C(metadata.managedFields). The wait itself reads the whole pods.
    type: list
    elements: str
attributes:
  check_mode:
    description: Can run in check mode.
    support: full
    details: The module only reads.
  diff_mode:
    description: Would show a diff of what changed.
    support: none
    details: The module never changes anything.
  idempotent:
    description: A second run with the same arguments reports no change.
    support: full
    details: The module never reports a change.
  platform:
    description: Targets the module runs on.
    support: full
    platforms: posix
extends_documentation_fragment:
  - gpufleet.nvidia.k8s_auth
"""

EXAMPLES = r"""
- name: Wait for the smoke-test pods
  gpufleet.nvidia.internal.pods_wait:
    namespace: gpufleet-smoke-test
    label_selectors:
      - gpufleet.nvidia/run=20261127-1
    count: 3
    timeout: 300
  register: waited
"""

RETURN = r"""
resources:
  description: The pods as last read (the same shape as kubernetes.core.k8s_info's C(resources)), with only O(keep)
    when given, less C(metadata.managedFields).
  returned: always
  type: list
  elements: dict
nodes_not_ready:
  description:
    - Each node of a pod that has not finished whose C(Ready) condition is not C(True), with that condition
      (status, reason and message), or C(no Node named ...) when the node does not exist.
  returned: always
  type: dict
  sample: {gpu-b: "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"}
unschedulable:
  description:
    - Each pod not waited for any more because the scheduler could not place it for O(unschedulable_grace) seconds,
      with the condition's message.
  returned: always
  type: dict
  sample: {gpufleet-smoke-nvidia-smi-gpu-b: "0/3 nodes are available: 1 cannot allocate all claims."}
not_started:
  description:
    - Each pod not waited for any more because its kubelet could not start it for O(start_grace) seconds, with the
      reason and the kubelet's or the runtime's words.
  returned: always
  type: dict
  sample: {gpufleet-smoke-nvidia-smi-gpu-b: 'FailedCreatePodSandBox: ... no runtime for "nvidia" is configured'}
finished:
  description: Whether every expected pod has finished.
  returned: always
  type: bool
timed_out:
  description: Whether O(timeout) passed while a pod on a Ready node had not finished.
  returned: always
  type: bool
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
looks:
  description: How many times the pods were read.
  returned: always
  type: int
api_errors:
  description: The last answers of the API that made a look fail (HTTP code and reason), when there were some.
  returned: always
  type: list
  elements: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpufleet.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARGUMENT_SPEC, HAS_KUBERNETES, KUBERNETES_IMPORT_ERROR, NO_ANSWER, RETRYABLE, ApiAnswer, api_client,
    auth_settings, path_of, request, unsupported_settings)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.dotted import drop_paths, keep_paths
from ansible_collections.gpufleet.nvidia.plugins.module_utils.pod_start import final_waiting, missing_handler

FINISHED = ("Succeeded", "Failed")


def node_of(pod):
    """The node a pod runs on or, while it is not bound, the one node its required node affinity pins it to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    pinned = set()
    for term in required.get("nodeSelectorTerms") or []:
        for requirement in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            if requirement.get("key") in ("metadata.name", "kubernetes.io/hostname") \
                    and requirement.get("operator") == "In" and len(requirement.get("values") or []) == 1:
                pinned.add(requirement["values"][0])
    return pinned.pop() if len(pinned) == 1 else None


def not_ready(node):
    """None for a Ready node, else its Ready condition in words."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return None
            return "Ready=%s (%s%s)" % (condition.get("status"), condition.get("reason") or "no reason",
                                        (": " + condition["message"]) if condition.get("message") else "")
    return "no Ready condition"


def unschedulable(pod):
    """The scheduler's words for a pod it could not place (PodScheduled False, reason Unschedulable), else None."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            return condition.get("message") or condition["reason"]
    return None


def waiting_failure(pod):
    """The kubelet's words for a container of a bound pod that its retries will not start (module_utils
    pod_start: an image reference that does not parse, an image the registry does not have or refuses),
    else None."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    status = pod.get("status") or {}
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if final_waiting(waiting.get("reason"), waiting.get("message")):
            return "%s: %s" % (waiting["reason"], waiting.get("message") or "no message")
    return None


def without_sandbox(pod):
    """True for a bound, unfinished pod none of whose containers has started, whose sandbox is not ready."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in FINISHED:
        return False
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = container.get("state") or {}
        if state.get("running") or state.get("terminated"):
            return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodReadyToStartContainers":
            return condition.get("status") != "True"
    return True


def sandbox_failures(events):
    """Pod UID -> the newest FailedCreatePodSandBox event's message, from a list of Event objects, for
    the refusals no retry mends (a RuntimeClass handler the runtime lacks); a network plugin still
    starting, a slow pause image are the kubelet's to retry."""
    newest = {}
    for event in events or []:
        uid = (event.get("involvedObject") or {}).get("uid")
        when = event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get(
            "creationTimestamp") or ""
        if uid and (uid not in newest or when >= newest[uid][0]):
            newest[uid] = (when, event.get("message") or "")
    return dict((uid, "FailedCreatePodSandBox: %s" % message) for uid, (_when, message) in newest.items()
                if missing_handler(message))


def not_starting(pod, sandbox_words):
    """The words for a bound pod its kubelet cannot start (a container's waiting reason, else its sandbox's
    failure event, ``sandbox_words``: pod UID -> words), else None."""
    words = waiting_failure(pod)
    if words is None and without_sandbox(pod):
        words = sandbox_words.get((pod.get("metadata") or {}).get("uid"))
    return words


class Spells:
    """Pods seen in a state (unschedulable, not starting) look after look: one that stays so for ``grace``
    seconds is given up, with its words; one seen out of it starts again from nothing."""

    def __init__(self, grace):
        self.grace = grace
        self.since = {}
        self.given_up = {}

    def keep_only(self, names):
        """Forget the pods no longer in the state, and this look's verdicts (judge gives them again)."""
        for name in list(self.since):
            if name not in names:
                del self.since[name]
        self.given_up.clear()

    def over(self, name, words):
        first = self.since.setdefault(name, time.monotonic())
        if time.monotonic() - first >= self.grace:
            self.given_up[name] = words
            return True
        return False


def judge(pods, nodes, count, settled=None, placed=None, started=None, sandbox_words=None):
    """One look: (done, finished, nodes_not_ready). ``nodes``: Node objects, None when not read.
    ``settled``: a test of a node name and its condition in words, true once it has been seen not
    Ready long enough (default: at once). ``placed``: a test of a pod name and the scheduler's words,
    true once it has been seen unschedulable long enough; without it such a pod keeps the wait.
    ``started``: the same for a pod its kubelet cannot start (not_starting, with ``sandbox_words``)."""
    unfinished = [pod for pod in pods if (pod.get("status") or {}).get("phase") not in FINISHED]
    finished = len(pods) >= count and not unfinished
    if finished or nodes is None:
        return finished, finished, {}
    by_name = dict(((node.get("metadata") or {}).get("name"), node) for node in nodes)
    down = {}
    stuck = 0
    for pod in unfinished:
        name = node_of(pod)
        why = None
        if name is not None:
            why = not_ready(by_name[name]) if name in by_name else "no Node named %s" % name
        if why and (settled is None or settled(name, why)):
            down[name] = why
            stuck += 1
            continue
        words = unschedulable(pod) if placed is not None else None
        if words and placed((pod.get("metadata") or {}).get("name"), words):
            stuck += 1
            continue
        words = not_starting(pod, sandbox_words or {}) if started is not None else None
        if words and started((pod.get("metadata") or {}).get("name"), words):
            stuck += 1
    return len(pods) >= count and stuck == len(unfinished), False, down


def read_sandbox_failures(client, params, known):
    """The namespace's sandbox refusals (sandbox_failures); None when the API refuses the list (403: the
    caller may not list events, 404); ``known`` when it gives no answer this time."""
    try:
        return sandbox_failures(request(
            client, "GET", path_of("api", "v1", "namespaces", params["namespace"], "events"),
            {"fieldSelector": "reason=FailedCreatePodSandBox,involvedObject.kind=Pod"},
            timeout=params["request_timeout"]).get("items") or [])
    except ApiAnswer as error:
        if error.status in (403, 404):
            return None
        if error.status in RETRYABLE:
            return known
        raise
    except NO_ANSWER:
        return known


def main():
    module = AnsibleModule(
        argument_spec=dict(
            AUTH_ARGUMENT_SPEC,
            grace=dict(type="int", default=20),
            unschedulable_grace=dict(type="int"),
            start_grace=dict(type="int"),
            namespace=dict(type="str", required=True),
            label_selectors=dict(type="list", elements="str", default=[]),
            count=dict(type="int", default=1),
            timeout=dict(type="int", default=300),
            sleep=dict(type="float", default=2.0),
            keep=dict(type="list", elements="str"),
        ),
        supports_check_mode=True,
    )
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    params = module.params
    if params["timeout"] < 0 or params["sleep"] <= 0 or params["count"] < 0 or params["grace"] < 0 \
            or params["request_timeout"] <= 0 or (params["unschedulable_grace"] or 0) < 0 or (params["start_grace"] or 0) < 0:
        module.fail_json(msg="pods_wait: timeout, count, grace, unschedulable_grace and start_grace must be 0 or more, "
                             "sleep and request_timeout above 0; got timeout=%s sleep=%s count=%s grace=%s "
                             "unschedulable_grace=%s start_grace=%s request_timeout=%s" % (
                                 params["timeout"], params["sleep"], params["count"], params["grace"],
                                 params["unschedulable_grace"], params["start_grace"], params["request_timeout"]))
    if unsupported_settings(os.environ):
        module.fail_json(msg="pods_wait: %s set; this module does not take them (use a kubeconfig)" % ", ".join(
            unsupported_settings(os.environ)))
    try:
        client = api_client(auth_settings(params, os.environ))
    except Exception as error:  # pylint: disable=broad-except
        module.fail_json(msg="pods_wait: could not configure the Kubernetes client: %s" % error)
    selector = ",".join(params["label_selectors"])
    start = time.monotonic()
    deadline = start + params["timeout"]
    pods, down, looks, errors = [], {}, 0, []
    finished = done = False
    first_seen = {}

    def settled(name, _why):
        """Seen not Ready for the grace period, with no Ready look between."""
        first = first_seen.setdefault(name, time.monotonic())
        return time.monotonic() - first >= params["grace"]

    unplaced = Spells(params["unschedulable_grace"])
    unstarted = Spells(params["start_grace"])
    sandbox_words = {}
    # the runtime's refusal of a sandbox is only in the kubelet's events
    read_events = params["start_grace"] is not None
    while True:
        looks += 1
        try:
            pods = request(client, "GET", path_of("api", "v1", "namespaces", params["namespace"], "pods"),
                           {"labelSelector": selector} if selector else None,
                           timeout=params["request_timeout"]).get("items") or []
            nodes = None
            if any((pod.get("status") or {}).get("phase") not in FINISHED for pod in pods):
                nodes = request(client, "GET", "/api/v1/nodes", timeout=params["request_timeout"]).get("items") or []
                ready = set(((node.get("metadata") or {}).get("name") for node in nodes if not not_ready(node)))
                for name in list(first_seen):
                    if name in ready:
                        del first_seen[name]
            if read_events and any(without_sandbox(pod) for pod in pods):
                sandbox_words = read_sandbox_failures(client, params, sandbox_words)
                if sandbox_words is None:  # the API does not give the events: leave refusals to the timeout
                    read_events, sandbox_words = False, {}
            unplaced.keep_only(set((pod.get("metadata") or {}).get("name") for pod in pods if unschedulable(pod)))
            if params["start_grace"] is not None:
                unstarted.keep_only(set((pod.get("metadata") or {}).get("name") for pod in pods
                                        if not_starting(pod, sandbox_words)))
            done, finished, down = judge(pods, nodes, params["count"], settled,
                                         unplaced.over if params["unschedulable_grace"] is not None else None,
                                         unstarted.over if params["start_grace"] is not None else None, sandbox_words)
        except ApiAnswer as error:
            if error.status not in RETRYABLE:
                module.fail_json(msg="pods_wait: the API refused to list the pods or Nodes: HTTP %s %s: %s" % (
                    error.status, error.reason, (error.body or "").strip()[:500]), looks=looks)
            errors = (errors + ["HTTP %s %s" % (error.status, error.reason)])[-5:]
        except NO_ANSWER as error:
            errors = (errors + [str(error)[:200]])[-5:]
        if done or time.monotonic() >= deadline:
            break
        time.sleep(min(params["sleep"], max(deadline - time.monotonic(), 0)))
    pods = [drop_paths(keep_paths(pod, params["keep"]), ["metadata.managedFields"]) for pod in pods]
    module.exit_json(changed=False, resources=pods, nodes_not_ready=down, unschedulable=dict(unplaced.given_up),
                     not_started=dict(unstarted.given_up),
                     finished=finished,
                     timed_out=not done, waited=round(time.monotonic() - start, 1), looks=looks, api_errors=errors)


if __name__ == "__main__":
    main()
