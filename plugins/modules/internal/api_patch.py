#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: api_patch
version_added: 0.1.0
short_description: "Internal: Patch many objects of one resource, many at a time"
description:
  - Sends one JSON merge patch (RFC 7386, C(application/merge-patch+json)) to each named object of O(resource), with
    at most O(parallel) requests in flight, each tried again when the API could not handle it - one request per
    object, the fewest the Kubernetes API allows, whatever the number of objects.
  - The caller sends only the patches that change something (the roles plan them from one list of the objects), so
    a patch sent counts as a change. In check mode each patch is sent with C(dryRun=All), so the API server
    validates and admits it and changes nothing.
  - A patch answered with HTTP 409 Conflict (its C(metadata.resourceVersion) is not the object's any more) is
    returned in RV(conflicts) for the caller to read the object again, and is not a failure. Any other refusal, or
    an API that does not answer after the retries, fails the module, naming each object with its answer; the patches
    not yet sent then are not sent (RV(not_tried)).
  - A request answered with HTTP 429 (after its C(Retry-After), at most 30 s), 500, 502, 503 or 504, or not
    answered, is tried again O(retries) more times, O(delay) seconds apart.
  - Internal to the playbooks site.yml and health.yml (their health gating and node labels), not part of the
    collection's public interface; its options and results may change in any release.
options:
  api_version:
    description: The resource's group and version (C(v1), C(apps/v1)).
    type: str
    default: v1
  resource:
    description: The resource's plural name (C(nodes)).
    type: str
    required: true
  namespace:
    description: Namespace of the objects; none for a cluster-scoped resource.
    type: str
  patches:
    description:
      - One entry per object - C(name) and C(patch), the merge patch as a dict, such as a C(metadata) with the
        C(labels) to set; optionally C(before), the same fields as the object has them now, for the diff
        (C(--diff)). Other keys of an entry are left alone.
      - An empty list sends nothing and changes nothing.
    type: list
    elements: dict
    required: true
  parallel:
    description: How many requests may be in flight at once.
    type: int
    default: 16
  retries:
    description: How many more times a request the API could not handle is tried.
    type: int
    default: 4
  delay:
    description: Seconds between two tries.
    type: float
    default: 2.0
author:
  - gpufleet.nvidia contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.nvidia.k8s_auth
attributes:
  check_mode:
    description: Can run in check mode.
    support: full
    details: Each patch is sent as a server-side dry run (C(dryRun=All)).
  diff_mode:
    description: Shows a diff of what changed.
    support: partial
    details: For each patch that carries C(before), the diff of C(before) and the patch merged onto it.
  idempotent:
    description: A second run with the same arguments reports no change.
    support: none
    details: A patch sent counts as a change; the caller sends only what differs.
  platform:
    description: Targets the module runs on.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Label two GPU Nodes
  gpufleet.nvidia.internal.api_patch:
    resource: nodes
    patches:
      - name: gpu-a
        patch: {metadata: {labels: {nvidia.com/gpu.present: "true"}}}
      - name: gpu-b
        patch: {metadata: {labels: {nvidia.com/gpu.present: "true", nvidia.com/gpu.count: "8"}}}
"""

RETURN = r"""
patched:
  description: The names of the objects patched (dry-run in check mode), in the order given.
  returned: always
  type: list
  elements: str
conflicts:
  description: The names of the objects whose patch met HTTP 409 Conflict (their resourceVersion changed).
  returned: always
  type: list
  elements: str
failures:
  description: The objects whose patch failed for good - C(name), C(status) (HTTP code, null without an answer),
    C(reason), C(message) and C(tries).
  returned: always
  type: list
  elements: dict
not_tried:
  description: The names of the objects not patched because an earlier patch failed for good.
  returned: always
  type: list
  elements: str
requests:
  description: How many requests were sent, retries included.
  returned: always
  type: int
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpufleet.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARGUMENT_SPEC, HAS_KUBERNETES, KUBERNETES_IMPORT_ERROR, Requests, api_client, auth_settings, path_of,
    request, unsupported_settings)

MERGE_PATCH = "application/merge-patch+json"


def object_path(params, name):
    group_version = params["api_version"].strip("/").split("/")
    prefix = ("api",) if len(group_version) == 1 else ("apis",)
    where = ("namespaces", params["namespace"]) if params["namespace"] else ()
    return path_of(*(prefix + tuple(group_version) + where + (params["resource"], name)))


def patch_errors(patches):
    """What is wrong with the patches, as sentences."""
    errors, seen = [], set()
    for index, entry in enumerate(patches or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry.get("name"):
            errors.append("patches[%d] needs a name" % index)
            continue
        if not isinstance(entry.get("patch"), dict):
            errors.append("patches[%d] (%s): patch must be a dict, got %s" % (
                index, entry["name"], type(entry.get("patch")).__name__))
        if entry["name"] in seen:
            errors.append("patches[%d]: %s is patched twice" % (index, entry["name"]))
        seen.add(entry["name"])
    return errors


def merged(before, patch):
    """A JSON merge patch (RFC 7386) applied to a copy of ``before``."""
    if not isinstance(patch, dict):
        return patch
    result = dict(before) if isinstance(before, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result


def diffs(patches, names):
    """The diff of each patch of ``names`` that carries ``before``."""
    return [dict(before=entry["before"], after=merged(entry["before"], entry["patch"]),
                 before_header="%s (before)" % entry["name"], after_header="%s (after)" % entry["name"])
            for entry in patches if entry["name"] in names and isinstance(entry.get("before"), dict)]


def send_all(calls, params, patches, check_mode):
    """Each patch once, at most ``parallel`` at a time; after a failure for good the rest is not sent."""
    stop = threading.Event()
    query = {"dryRun": "All"} if check_mode else None

    def one(entry):
        if stop.is_set():
            return "not_tried", entry["name"], None
        answer, failure, tries = calls.call("PATCH", object_path(params, entry["name"]), query, entry["patch"])
        if answer is not None:
            return "patched", entry["name"], None
        if failure[0] == 409:
            return "conflict", entry["name"], None
        stop.set()
        return "failed", entry["name"], dict(name=entry["name"], status=failure[0], reason=failure[1],
                                             message=failure[2], tries=tries)

    if len(patches) <= 1:
        rows = [one(entry) for entry in patches]
    else:
        with ThreadPoolExecutor(max_workers=min(params["parallel"], len(patches))) as pool:
            rows = list(pool.map(one, patches))
    result = dict(patched=[], conflicts=[], failures=[], not_tried=[])
    for kind, name, failure in rows:
        if kind == "patched":
            result["patched"].append(name)
        elif kind == "conflict":
            result["conflicts"].append(name)
        elif kind == "not_tried":
            result["not_tried"].append(name)
        else:
            result["failures"].append(failure)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            AUTH_ARGUMENT_SPEC,
            api_version=dict(type="str", default="v1"),
            resource=dict(type="str", required=True),
            namespace=dict(type="str"),
            patches=dict(type="list", elements="dict", required=True),
            parallel=dict(type="int", default=16),
            retries=dict(type="int", default=4),
            delay=dict(type="float", default=2.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, patched=[], conflicts=[], failures=[], not_tried=[], requests=0)
    wrong = [name for name in ("parallel", "request_timeout") if params[name] < 1] \
        + [name for name in ("retries", "delay") if params[name] < 0]
    errors = ["%s is %s (parallel and request_timeout must be 1 or more, retries and delay 0 or more)" % (
        name, params[name]) for name in wrong] + patch_errors(params["patches"])
    if errors:
        module.fail_json(msg="api_patch: %s" % "; ".join(errors), **result)
    if not params["patches"]:
        module.exit_json(**result)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR, **result)
    if unsupported_settings(os.environ):
        module.fail_json(msg="api_patch: %s set; this module does not take them (use a kubeconfig)" % ", ".join(
            unsupported_settings(os.environ)), **result)
    try:
        client = api_client(auth_settings(params, os.environ), pool=params["parallel"])
    except Exception as error:  # pylint: disable=broad-except
        module.fail_json(msg="api_patch: could not configure the Kubernetes client: %s" % error, **result)

    def send(method, path, query, body, timeout):
        return request(client, method, path, query, body, timeout, content_type=MERGE_PATCH)

    calls = Requests(send, params["retries"], params["delay"], params["request_timeout"])
    result.update(send_all(calls, params, params["patches"], module.check_mode))
    result["requests"] = calls.requests
    result["changed"] = bool(result["patched"])
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = diffs(params["patches"], set(result["patched"]))
    if result["failures"]:
        words = "; ".join("%s: HTTP %s %s: %s (tried %d times)" % (
            failure["name"], failure["status"] or "no answer", failure["reason"] or "", failure["message"],
            failure["tries"]) for failure in result["failures"])
        module.fail_json(msg="api_patch: %d of %d %s patch(es) failed: %s%s" % (
            len(result["failures"]), len(params["patches"]), params["resource"], words,
            ("; not tried: %s" % ", ".join(result["not_tried"])) if result["not_tried"] else ""), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
