#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pods_batch
version_added: 0.1.0
short_description: "Internal: Create or delete the pods of a namespace many at a time"
description:
  - Creates the pods of O(definitions), or deletes pods by name or by label, with at most O(parallel) requests in
    flight, each tried again when the API could not handle it. The requests a fleet's worth of pods costs stays one
    per pod to create, one per pod found to delete by name, and one in all to delete by label.
  - O(state=present) - one C(POST) per pod (a server-side dry run in check mode). A pod the API says exists already
    (HTTP 409) counts as made when it carries every label of its definition - an earlier try of this very request
    that the API carried out without its answer coming back - and is named as in the way otherwise, with its
    labels or since when it is being deleted. In check mode a 409 counts as a pod the run would make, after its
    delete step took the leftover away.
  - O(state=absent) with O(label_selectors) and no O(names) - one list and one C(deletecollection) request for the
    pods that match (a C(DELETE) for each where the API refuses C(deletecollection) with 403 or 405, as a Role
    granting only C(delete) does). With O(names) - one list of the namespace's pods (narrowed by
    O(label_selectors) when given), then a C(DELETE) for each named pod found. Pods already being deleted are not
    deleted again but waited for. In check mode the pods that would be deleted are listed and none is.
  - Once a request has failed for good, the requests not yet sent are not sent (RV(not_tried)), and the failures
    with the same answer are named together.
  - With O(wait), the pods are listed again after the deletion, every O(sleep) seconds, until none that was
    deleted is left or O(wait_timeout) seconds have passed.
  - A request answered with HTTP 429 (after its C(Retry-After), at most 30 s), 500, 502, 503 or 504, or not
    answered, is tried again O(retries) more times, O(delay) seconds apart.
  - Internal to the role gpufleet.nvidia.gpu_smoke_test, not part of the collection's public interface; its options and
    results may change in any release.
options:
  namespace:
    description: Namespace of the pods.
    type: str
    required: true
  kind:
    description:
      - What the batch makes or deletes - C(v1) Pods, or the C(resource.k8s.io/v1) ResourceClaimTemplates that pods
        on the DRA path ask for their devices through. Everything said of pods here holds for them.
    type: str
    choices: [Pod, ResourceClaimTemplate]
    default: Pod
  state:
    description: Whether the pods should be made (V(present)) or gone (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  definitions:
    description:
      - The pods to create (v1 Pod objects), with O(state=present), as a list or as the JSON text of one (which
        costs Ansible nothing to pass on, where a list of a thousand pods costs seconds). Each must name itself in
        C(metadata.name); its C(metadata.namespace), when given, must be O(namespace).
    type: raw
    default: []
  names:
    description: Names of the pods to delete, with O(state=absent). Those not found are already gone.
    type: list
    elements: str
  label_selectors:
    description:
      - Label selectors (C(key=value), C(key!=value), C(key), C(!key)), with O(state=absent). Without O(names),
        every pod that matches them all is deleted; with O(names), they narrow the list the named pods are looked
        for in.
    type: list
    elements: str
    default: []
  parallel:
    description: Requests in flight at once.
    type: int
    default: 16
  retries:
    description: How many more times a request the API could not handle is tried.
    type: int
    default: 4
  delay:
    description: Seconds between two tries of a request.
    type: float
    default: 2.0
  wait:
    description: With O(state=absent), whether to wait until the deleted pods are gone.
    type: bool
    default: false
  wait_timeout:
    description: Seconds O(wait) waits at most.
    type: int
    default: 120
  sleep:
    description: Seconds between two lists while O(wait) waits.
    type: float
    default: 1.0
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.k8s_auth
attributes:
  check_mode:
    description: Can run in check mode.
    support: full
    details: Pods are created with the API's server-side dry run; the pods a deletion would take are listed.
  diff_mode:
    description: Would show a diff of what changed.
    support: none
    details: The result names the pods created and deleted.
  idempotent:
    description: A second run with the same arguments reports no change.
    support: partial
    details: >-
      A deletion finds nothing the second time. A creation finds its pods made and reports no change; creating
      pods again under names that another set of labels holds fails.
  platform:
    description: Targets the module runs on.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Create the smoke-test pods, sixteen requests at a time
  gpufleet.nvidia.internal.pods_batch:
    namespace: gpufleet-smoke-test
    definitions: "{{ pods }}"

- name: Delete every pod of a run, in one request
  gpufleet.nvidia.internal.pods_batch:
    namespace: gpufleet-smoke-test
    state: absent
    label_selectors:
      - gpufleet.nvidia/run=20261127-1

- name: Delete pods left under these names, and wait until they are gone
  gpufleet.nvidia.internal.pods_batch:
    namespace: gpufleet-smoke-test
    state: absent
    names: [gpufleet-smoke-gpu-a-nvidia-smi, gpufleet-smoke-gpu-b-nvidia-smi]
    wait: true
"""

RETURN = r"""
created:
  description: Names of the pods created (in check mode, that the dry run accepted).
  returned: always
  type: list
  elements: str
found:
  description: Names of the pods found made already by an earlier try of the same request (HTTP 409, same labels).
  returned: always
  type: list
  elements: str
deleted:
  description: Names of the pods deleted (in check mode, that would be).
  returned: always
  type: list
  elements: str
failures:
  description: Each request that failed for good - the pod's name, the HTTP code, reason and message, and tries.
  returned: always
  type: list
  elements: dict
  sample: [{name: gpufleet-smoke-gpu-b, status: 500, reason: InternalError, message: "etcdserver: timeout", tries: 5}]
going:
  description: Names of the pods found already being deleted (not deleted again; waited for with O(wait)).
  returned: always
  type: list
  elements: str
not_tried:
  description: Names of the pods no request was sent for, because one had failed for good before.
  returned: always
  type: list
  elements: str
left:
  description: With O(wait), the names of the deleted pods still there when the wait ended.
  returned: always
  type: list
  elements: str
requests:
  description: How many requests were made.
  returned: always
  type: int
"""

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpufleet.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARGUMENT_SPEC, HAS_KUBERNETES, KUBERNETES_IMPORT_ERROR, Requests, api_client, auth_settings, path_of,
    request, unsupported_settings)


def read_definitions(definitions):
    """(the pods as a list, None) or (None, what is wrong) from the definitions option."""
    if isinstance(definitions, str):
        try:
            definitions = json.loads(definitions) if definitions.strip() else []
        except ValueError as error:
            return None, "definitions is text that is not JSON: %s" % error
    if not isinstance(definitions, list) or not all(isinstance(pod, dict) for pod in definitions):
        return None, "definitions is %s; give a list of Pod objects or the JSON text of one" % (
            type(definitions).__name__ if not isinstance(definitions, list) else "a list holding other things than objects")
    return definitions, None


# Each kind the batch handles: its apiVersion and its path under the API.
KINDS = {"Pod": ("v1", ("api", "v1"), "pods"),
         "ResourceClaimTemplate": ("resource.k8s.io/v1", ("apis", "resource.k8s.io", "v1"), "resourceclaimtemplates")}


def definition_errors(definitions, namespace, kind="Pod"):
    """What is wrong with the objects to create, in words (empty when nothing)."""
    api_version = KINDS[kind][0]
    errors = []
    seen = set()
    for index, pod in enumerate(definitions):
        metadata = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        name = metadata.get("name")
        if pod.get("kind", kind) != kind or pod.get("apiVersion", api_version) != api_version:
            errors.append("definitions[%d] is %s %s, not a %s %s" % (
                index, pod.get("apiVersion"), pod.get("kind"), api_version, kind))
        if not isinstance(name, str) or not name:
            errors.append("definitions[%d] has no metadata.name" % index)
        elif name in seen:
            errors.append("definitions[%d] names %s %s a second time" % (index, kind, name))
        seen.add(name)
        if metadata.get("namespace") not in (None, namespace):
            errors.append("definitions[%d] (%s) is for namespace %s, not %s" % (
                index, name, metadata.get("namespace"), namespace))
    return errors


def same_labels(wanted, found):
    """Whether a pod found under a definition's name carries every label of the definition."""
    labels = (found.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in (wanted.get("labels") or {}).items())


def failure_words(failed, verb, shown=5):
    """The requests that failed for good, those with the same answer together (a 403 or a lost API fails every
    pod alike), at most ``shown`` names each."""
    groups = []
    for item in failed:
        answer = ("HTTP %s %s: %s" % (item["status"], item["reason"], item["message"])) if item.get("status") \
            else item["message"]
        tries = (" (tried %d times)" % item["tries"]) if item["tries"] > 1 else ""
        why = (" - %s" % item["why"]) if item.get("why") else ""
        key = answer + tries + why
        for group in groups:
            if group[0] == key:
                group[1].append(item["name"])
                break
        else:
            groups.append((key, [item["name"]]))
    lines = []
    for key, names in groups:
        more = (" and %d more" % (len(names) - shown)) if len(names) > shown else ""
        lines.append("%s%s: %s" % (", ".join(names[:shown]), more, key))
    return "; ".join(lines) or "nothing failed to %s" % verb


class Batch(Requests):
    """The module's requests (k8s_client.Requests with its retries, delay and request_timeout), many at once.
    Once one request has failed for good, the ones not yet sent are not sent (``stopped``): an API that
    refuses one pod (RBAC, Pod Security, a missing namespace) or cannot be reached refuses them all, and a
    thousand of them would take hours of retries to say so."""

    def __init__(self, params, send):
        super().__init__(send, params["retries"], params["delay"], params["request_timeout"])
        self.params = params
        self.stop = threading.Event()

    def each(self, work, items):
        """work(item) for every item, at most ``parallel`` at once, in the items' order; None for an item
        not tried because the batch stopped."""
        def guarded(item):
            return None if self.stop.is_set() else work(item)

        if len(items) <= 1:
            return [guarded(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.params["parallel"], len(items))) as pool:
            return list(pool.map(guarded, items))

    def pods(self, name=None):
        dummy, prefix, plural = KINDS[self.params["kind"]]
        return path_of(*(prefix + ("namespaces", self.params["namespace"], plural) + ((name,) if name else ())))

    def list_pods(self, selector):
        answer, failure, tries = self.call("GET", self.pods(), {"labelSelector": selector} if selector else None)
        if failure:
            return None, dict(name="(list of the pods)", status=failure[0], reason=failure[1], message=failure[2],
                              tries=tries)
        return answer.get("items") or [], None


def failed(name, failure, tries, why=None):
    entry = dict(name=name, status=failure[0], reason=failure[1], message=failure[2], tries=tries)
    if why:
        entry["why"] = why
    return entry


def create(batch, definitions, check_mode):
    namespace = batch.params["namespace"]

    def one(pod):
        name = pod["metadata"]["name"]
        body = dict(pod, apiVersion=KINDS[batch.params["kind"]][0], kind=batch.params["kind"],
                    metadata=dict(pod["metadata"], namespace=namespace))
        for _attempt in range(2):
            answer, failure, tries = batch.call("POST", batch.pods(), {"dryRun": "All"} if check_mode else None, body)
            if answer is not None:
                return "created", name, None
            if failure[0] != 409:
                break
            if check_mode:
                # The dry run meets a leftover the real run's delete step would have taken away first.
                return "created", name, None
            found, gone, _tries = batch.call("GET", batch.pods(name))
            if found is None and gone[0] == 404:
                continue  # deleted between the two requests: create it again
            if found is None:
                failure = gone
                break
            if same_labels(pod["metadata"], found):
                return "found", name, None
            metadata = found.get("metadata") or {}
            held = "deleted since %s, not gone yet" % metadata["deletionTimestamp"] if metadata.get("deletionTimestamp") \
                else "with the labels %s" % ", ".join("%s=%s" % item for item in sorted((metadata.get("labels") or {}).items()))
            return "failed", name, failed(name, failure, tries, why="a %s of that name is there, %s: delete it, or wait "
                                                                    "until it is gone" % (batch.params["kind"], held))
        batch.stop.set()
        return "failed", name, failed(name, failure, tries)

    outcome = batch.each(one, definitions)
    return dict(created=[row[1] for row in outcome if row and row[0] == "created"],
                found=[row[1] for row in outcome if row and row[0] == "found"],
                failures=[row[2] for row in outcome if row and row[0] == "failed"],
                not_tried=[pod["metadata"]["name"] for pod, row in zip(definitions, outcome) if row is None])


def delete(batch, names, selector, check_mode):
    """Delete the pods named (or, with no names, every pod the selector matches). Pods already being
    deleted are not deleted again but are waited for with the others (``going``)."""
    result = dict(deleted=[], going=[], failures=[], not_tried=[])
    pods, failure = batch.list_pods(selector)
    if failure:
        result["failures"].append(failure)
        return result
    wanted = [pod.get("metadata") or {} for pod in pods if names is None or (pod.get("metadata") or {}).get("name") in names]
    doomed = [metadata.get("name") for metadata in wanted if not metadata.get("deletionTimestamp")]
    result["going"] = [metadata.get("name") for metadata in wanted if metadata.get("deletionTimestamp")]
    if check_mode or not doomed:
        result["deleted"] = doomed
        return result
    if names is None:
        # One request for them all where the caller may deletecollection; kubectl (and kubernetes.core) delete
        # one pod after another, which a Role granting only delete allows: done so when the API refuses.
        answer, failure, tries = batch.call("DELETE", batch.pods(), {"labelSelector": selector})
        if answer is not None:
            gone = answer.get("items") or []
            result["deleted"] = [(pod.get("metadata") or {}).get("name") for pod in gone] or doomed
            return result
        if failure[0] not in (403, 405):
            result["failures"].append(failed("(the pods matching %s)" % selector, failure, tries))
            return result

    def one(name):
        answer, failure, tries = batch.call("DELETE", batch.pods(name))
        if answer is not None:
            return name, None
        if failure[0] == 404:
            return None, None
        batch.stop.set()
        return None, failed(name, failure, tries)

    for name, row in zip(doomed, batch.each(one, doomed)):
        if row is None:
            result["not_tried"].append(name)
            continue
        if row[0]:
            result["deleted"].append(row[0])
        if row[1]:
            result["failures"].append(row[1])
    return result


def wait_gone(batch, names, selector):
    """The names still there once none is, or once wait_timeout has passed."""
    deadline = time.monotonic() + batch.params["wait_timeout"]
    left = set(names)
    while left:
        pods, failure = batch.list_pods(selector)
        if not failure:
            left = set((pod.get("metadata") or {}).get("name") for pod in pods) & set(names)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(min(batch.params["sleep"], max(deadline - time.monotonic(), 0)))
    return sorted(left)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            AUTH_ARGUMENT_SPEC,
            namespace=dict(type="str", required=True),
            kind=dict(type="str", choices=sorted(KINDS), default="Pod"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            definitions=dict(type="raw", default=[]),
            names=dict(type="list", elements="str"),
            label_selectors=dict(type="list", elements="str", default=[]),
            parallel=dict(type="int", default=16),
            retries=dict(type="int", default=4),
            delay=dict(type="float", default=2.0),
            wait=dict(type="bool", default=False),
            wait_timeout=dict(type="int", default=120),
            sleep=dict(type="float", default=1.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, created=[], found=[], deleted=[], going=[], failures=[], not_tried=[], left=[],
                  requests=0)
    wrong = [name for name in ("parallel", "request_timeout") if params[name] < 1] \
        + [name for name in ("retries", "wait_timeout") if params[name] < 0] \
        + [name for name in ("delay", "sleep") if params[name] < 0]
    if wrong:
        module.fail_json(msg="pods_batch: %s" % ", ".join("%s is %s" % (name, params[name]) for name in wrong)
                         + " (parallel and request_timeout must be 1 or more, the others 0 or more)", **result)
    definitions, wrong = read_definitions(params["definitions"])
    if wrong:
        module.fail_json(msg="pods_batch: %s" % wrong, **result)
    if params["state"] == "present":
        errors = definition_errors(definitions, params["namespace"], params["kind"])
        if params["names"] is not None or params["label_selectors"] or params["wait"]:
            errors.append("names, label_selectors and wait go with state=absent")
    else:
        errors = ["definitions go with state=present"] if definitions else []
        if params["names"] is None and not params["label_selectors"]:
            errors.append("state=absent needs names or label_selectors (deleting every pod is not offered)")
    if errors:
        module.fail_json(msg="pods_batch: %s" % "; ".join(errors), **result)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR, **result)
    if unsupported_settings(os.environ):
        module.fail_json(msg="pods_batch: %s set; this module does not take them (use a kubeconfig)" % ", ".join(
            unsupported_settings(os.environ)), **result)
    try:
        client = api_client(auth_settings(params, os.environ), pool=params["parallel"])
    except Exception as error:  # pylint: disable=broad-except
        module.fail_json(msg="pods_batch: could not configure the Kubernetes client: %s" % error, **result)
    batch = Batch(params, lambda method, path, query, body, timeout: request(client, method, path, query, body,
                                                                             timeout))
    selector = ",".join(params["label_selectors"])
    if params["state"] == "present":
        result.update(create(batch, definitions, module.check_mode))
        result["changed"] = bool(result["created"])
        verb = "create"
    else:
        result.update(delete(batch, None if params["names"] is None else set(params["names"]), selector,
                             module.check_mode))
        result["changed"] = bool(result["deleted"])
        if params["wait"] and (result["deleted"] or result["going"]) and not module.check_mode:
            result["left"] = wait_gone(batch, result["deleted"] + result["going"], selector)
        verb = "delete"
    result["requests"] = batch.requests
    if result["failures"]:
        done = result["created"] + result["found"] + result["deleted"]
        module.fail_json(msg="pods_batch: %d request(s) to %s %ss in %s failed: %s. %s%s" % (
            len(result["failures"]), verb, params["kind"], params["namespace"], failure_words(result["failures"], verb),
            ("Done before and kept: %s." % ", ".join(done)) if done else "Nothing was done.",
            (" Not tried after that: %d %s(s)." % (len(result["not_tried"]), params["kind"])) if result["not_tried"] else ""),
            **result)
    if result["left"]:
        module.fail_json(msg="pods_batch: %d deleted %s(s) still in %s after %s s: %s" % (
            len(result["left"]), params["kind"], params["namespace"], params["wait_timeout"], ", ".join(result["left"])),
            **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
