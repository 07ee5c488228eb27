#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_results_store
version_added: 0.3.0
short_description: "Internal: Keep the cluster part's results for the fleet report in a ConfigMap"
description:
  - Merges this run's device plugin check, DRA check and smoke verdicts (the rows of C(gpu_device_plugin_report),
    C(gpu_dra_driver_report) and C(gpu_smoke_test_report)) into the results the ConfigMap O(namespace)/O(name)
    holds, host by host, as the P(gpufleet.nvidia.internal.cluster_results#filter) filter merges them into a file; the fleet
    report (C(gpufleet.nvidia.report)) reads them back from there, from any folder, controller or AWX job.
  - Read, merge and write are one step against concurrent writers (two runs, job slices) - the write is a JSON merge
    patch of the results' keys alone that names the C(resourceVersion) it read, and when another writer came first
    (HTTP 409), or deleted the ConfigMap, it is read and merged again, at most O(conflict_retries) more times. A
    ConfigMap that does not exist yet is created. Its other keys, labels, annotations and owners are left as they are.
  - Results it cannot read (another format, as a newer collection would write, or not JSON) are never replaced -
    the module fails, naming the ConfigMap to delete.
  - The results are JSON text under the data key C(results.json); past 768 KiB (a large fleet) they are kept
    gzip-compressed under the binaryData key C(results.json.gz) instead, as a ConfigMap holds at most 1 MiB.
  - A request answered with HTTP 429 (after its C(Retry-After), at most 30 s), 500, 502, 503 or 504, or not
    answered, is tried again O(retries) more times, O(delay) seconds apart.
  - Internal to playbooks/site.yml, not part of the collection's public interface; its options and results may
    change in any release.
options:
  namespace:
    description: The ConfigMap's namespace; it must exist (the module creates no namespace).
    type: str
    required: true
  name:
    description: The ConfigMap's name.
    type: str
    required: true
  device_plugin:
    description: This run's C(gpu_device_plugin_report) rows (each with C(host)); null when the part did not run.
    type: list
    elements: dict
  smoke_test:
    description: This run's C(gpu_smoke_test_report) rows (each with C(host)); null when the part did not run.
    type: list
    elements: dict
  dra:
    description: This run's C(gpu_dra_driver_report) rows (each with C(host)); null when the part did not run.
    type: list
    elements: dict
  time:
    description: When the rows were taken, ISO 8601 in UTC; required when there are rows.
    type: str
  conflict_retries:
    description: How many more times the ConfigMap is read, merged and written when another writer changed it first.
    type: int
    default: 5
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
    details: The ConfigMap is read and merged, and the write (create or patch) sent as a server-side dry run (C(dryRun=All)).
  diff_mode:
    description: Shows a diff of what changed.
    support: full
    details: The entries of the hosts whose rows changed, before and after.
  idempotent:
    description: A second run with the same arguments reports no change.
    support: full
    details: Rows already kept, with the same time, change nothing and are not written.
  platform:
    description: Targets the module runs on.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Keep each GPU host's device plugin check and smoke verdict for the fleet report
  gpufleet.nvidia.internal.cluster_results_store:
    namespace: kube-system
    name: gpufleet-cluster-results
    device_plugin: "{{ gpu_device_plugin_report | default(omit) }}"
    smoke_test: "{{ gpu_smoke_test_report | default(omit) }}"
    dra: "{{ gpu_dra_driver_report | default(omit) }}"
    time: "{{ now(utc=true, fmt='%Y-%m-%dT%H:%M:%SZ') }}"
"""

RETURN = r"""
results:
  description: The results the ConfigMap holds now (in check mode, would hold), C(format), C(written_by) and C(hosts).
  returned: success
  type: dict
created:
  description: Whether the ConfigMap was created (in check mode, would be).
  returned: success
  type: bool
compressed:
  description: Whether the results are kept gzip-compressed (binaryData C(results.json.gz)).
  returned: success
  type: bool
size:
  description: Bytes of the kept results, as text or compressed and base64-encoded.
  returned: success
  type: int
conflicts:
  description: How many times another writer changed the ConfigMap between its read and this write.
  returned: always
  type: int
requests:
  description: How many requests were sent, retries included.
  returned: always
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cluster_results import (
    CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY, configmap_content, configmap_text, configmap_where, merged_results,
    results_hosts)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARGUMENT_SPEC, HAS_KUBERNETES, KUBERNETES_IMPORT_ERROR, Requests, api_client, auth_settings, path_of,
    request, unsupported_settings)

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet.nvidia"}
KEYS = (CONFIGMAP_KEY, CONFIGMAP_GZIP_KEY)
MERGE_PATCH = "application/merge-patch+json"


class StoreFailed(Exception):
    """A request that failed for good: what it was and the API's answer."""


def configmap_path(namespace, name=None):
    return path_of(*(("api", "v1", "namespaces", namespace, "configmaps") + ((name,) if name else ())))


def changed_hosts(before, after):
    """The hosts whose entries differ, in the after's order (then those only before)."""
    hosts = [host for host in after if before.get(host) != after[host]]
    return hosts + [host for host in before if host not in after]


def store(calls, params, check_mode):
    """Read, merge and write until a write goes through (or nothing changes): the module's result less
    ``requests``. Raises StoreFailed."""
    where = configmap_where(params["namespace"], params["name"])
    dry = {"dryRun": "All"} if check_mode else None
    conflicts = 0
    while True:
        current, failure, tries = calls.call("GET", configmap_path(params["namespace"], params["name"]))
        if failure and failure[0] != 404:
            raise StoreFailed("reading %s: %s (tried %d time%s)" % (where, said(failure), tries, "" if tries == 1 else "s"))
        text, problem = configmap_text(current, where)
        before, problem = (results_hosts(text, where) if not problem else ({}, problem))
        if problem:
            # Shared by every run, controller and AWX job: results this collection cannot read (a newer format, not
            # JSON) are never replaced by an older writer's.
            raise StoreFailed("%s holds what this collection cannot read: %s. Delete it (kubectl -n %s delete configmap "
                              "%s) to start anew, or keep the results elsewhere (gpufleet_results_configmap, "
                              "gpufleet_cluster_results)" % (where, problem, params["namespace"], params["name"]))
        results = merged_results(text, params["device_plugin"], params["smoke_test"], params["time"], params["dra"])
        data, binary, size = configmap_content(results)
        hosts = changed_hosts(before, results["hosts"])
        result = dict(results=results, created=current is None, compressed=binary is not None, size=size,
                      conflicts=conflicts, changed=bool(hosts) or current is None,
                      diff=dict(before={host: before[host] for host in hosts if host in before},
                                after={host: results["hosts"][host] for host in hosts if host in results["hosts"]},
                                before_header="%s (hosts whose rows changed)" % where,
                                after_header="%s (hosts whose rows changed)" % where))
        if current is not None and not result["changed"] \
                and {key: value for key, value in (current.get("data") or {}).items() if key in KEYS} == (data or {}) \
                and {key: value for key, value in (current.get("binaryData") or {}).items() if key in KEYS} == (binary or {}):
            return result
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": params["name"], "namespace": params["namespace"], "labels": dict(MANAGED_BY)}}
            if data is not None:
                body["data"] = data
            if binary is not None:
                body["binaryData"] = binary
            answer, failure, tries = calls.call("POST", configmap_path(params["namespace"]), dry, body)
            verb = "creating"
        else:
            # A JSON merge patch of the results' keys alone (the other keys, labels, annotations and owners stay as
            # they are), refused with 409 when the ConfigMap changed since it was read (its resourceVersion).
            patch = {"metadata": {"resourceVersion": (current.get("metadata") or {}).get("resourceVersion"),
                                  "labels": dict(MANAGED_BY)},
                     "data": {CONFIGMAP_KEY: (data or {}).get(CONFIGMAP_KEY)},
                     "binaryData": {CONFIGMAP_GZIP_KEY: (binary or {}).get(CONFIGMAP_GZIP_KEY)}}
            answer, failure, tries = calls.call("PATCH", configmap_path(params["namespace"], params["name"]), dry, patch)
            verb = "writing"
        if answer is not None:
            result["changed"] = True
            return result
        # 409: another writer came first (a newer resourceVersion, or it created the ConfigMap); 404 on the patch: the
        # ConfigMap was deleted since it was read. Read again.
        if (failure[0] == 409 or (failure[0] == 404 and current is not None)) and conflicts < params["conflict_retries"]:
            conflicts += 1
            continue
        if failure[0] == 404 and current is None:
            raise StoreFailed("%s %s: namespace %s does not exist (give one that does: gpufleet_results_namespace): %s" % (
                verb, where, params["namespace"], said(failure)))
        hint = (" (an immutable ConfigMap cannot be written: delete it, and the next run creates it)"
                if failure[0] == 422 else "")
        raise StoreFailed("%s %s: %s (tried %d time%s%s)%s" % (
            verb, where, said(failure), tries, "" if tries == 1 else "s",
            ", after %d conflicting writes" % conflicts if conflicts else "", hint))


def said(failure):
    status, reason, message = failure
    return ("HTTP %s %s: %s" % (status, reason, message)) if status else message


def main():
    module = AnsibleModule(
        argument_spec=dict(
            AUTH_ARGUMENT_SPEC,
            namespace=dict(type="str", required=True),
            name=dict(type="str", required=True),
            device_plugin=dict(type="list", elements="dict"),
            smoke_test=dict(type="list", elements="dict"),
            dra=dict(type="list", elements="dict"),
            time=dict(type="str"),
            conflict_retries=dict(type="int", default=5),
            retries=dict(type="int", default=4),
            delay=dict(type="float", default=2.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    wrong = [name for name in ("conflict_retries", "retries", "delay") if params[name] < 0] \
        + [name for name in ("request_timeout",) if params[name] < 1] \
        + [name for name in ("namespace", "name") if not params[name]]
    if wrong:
        module.fail_json(msg="cluster_results_store: %s (namespace and name must be given, request_timeout 1 or more, "
                             "the others 0 or more)" % ", ".join("%s is %r" % (name, params[name]) for name in wrong),
                         conflicts=0, requests=0)
    try:
        # The rows are checked before any request.
        merged_results(None, params["device_plugin"], params["smoke_test"], params["time"], params["dra"])
    except ValueError as error:
        module.fail_json(msg="cluster_results_store: %s" % error, conflicts=0, requests=0)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR, requests=0)
    if unsupported_settings(os.environ):
        module.fail_json(msg="cluster_results_store: %s set; this module does not take them (use a kubeconfig)" % (
            ", ".join(unsupported_settings(os.environ))), conflicts=0, requests=0)
    try:
        client = api_client(auth_settings(params, os.environ))
    except Exception as error:  # pylint: disable=broad-except
        module.fail_json(msg="cluster_results_store: could not configure the Kubernetes client: %s" % error,
                         conflicts=0, requests=0)

    def send(method, where, query, body, timeout):
        return request(client, method, where, query, body, timeout,
                       content_type=MERGE_PATCH if method == "PATCH" else "application/json")

    calls = Requests(send, params["retries"], params["delay"], params["request_timeout"])
    try:
        result = store(calls, params, module.check_mode)
    except (StoreFailed, ValueError) as error:
        module.fail_json(msg="cluster_results_store: %s" % error, requests=calls.requests)
    diff = result.pop("diff")
    if module._diff and result["changed"]:  # pylint: disable=protected-access
        result["diff"] = diff
    module.exit_json(requests=calls.requests, **result)


if __name__ == "__main__":
    main()
