#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pod_logs
version_added: 0.1.0
short_description: "Internal: Read the last lines of the logs of many pods, many at a time"
description:
  - Reads the log of each pod of O(names) in O(namespace) (C(GET .../pods/NAME/log)), at most O(parallel) requests
    in flight - one request per pod, the fewest the Kubernetes API allows, in one module run whatever the number of
    pods, where M(kubernetes.core.k8s_log) takes a module run per pod.
  - A request answered with HTTP 429 (after its C(Retry-After), at most 30 s), 500, 502, 503 or 504, or not
    answered, is tried again O(retries) more times, O(delay) seconds apart.
  - A log that cannot be read (the pod is gone, its container never started, the API refuses it) is not a failure
    of the module; it is named in RV(failures) with the API's answer, so that the caller judges the pods without
    it. Only bad settings, or a client that cannot be configured, fail the module.
  - Reads only; in check mode it reads as well.
  - Internal to the role gpufleet.nvidia.gpu_smoke_test, not part of the collection's public interface; its options and
    results may change in any release.
options:
  namespace:
    description: The pods' namespace.
    type: str
    required: true
  names:
    description: The pods whose logs are read. An empty list reads nothing.
    type: list
    elements: str
    required: true
  container:
    description: The container whose log is read; without it, the pod's only container (the API refuses a pod of
      several containers without one).
    type: str
  tail_lines:
    description: How many lines from the end of each log are read; 0 or none reads the whole log.
    type: int
    default: 50
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
    details: It only reads.
  diff_mode:
    description: Shows a diff of what changed.
    support: none
  idempotent:
    description: A second run with the same arguments reports no change.
    support: full
  platform:
    description: Targets the module runs on.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Read the logs of the smoke pods that failed
  gpufleet.nvidia.internal.pod_logs:
    namespace: gpufleet-smoke
    names: [gpufleet-smoke-nvidia-smi-gpu-a, gpufleet-smoke-nvidia-smi-gpu-b]
    tail_lines: 50
  register: smoke_logs
# smoke_logs.logs: {gpufleet-smoke-nvidia-smi-gpu-a: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)\n"}
# smoke_logs.failures: [{name: gpufleet-smoke-nvidia-smi-gpu-b, status: 400, reason: BadRequest,
#                        message: 'container "nvidia-smi" in pod ... is waiting to start: ContainerCreating', tries: 1}]
"""

RETURN = r"""
logs:
  description: Pod name to the text of its log (its last O(tail_lines) lines), for each log that was read.
  returned: always
  type: dict
failures:
  description: The pods whose log could not be read - C(name), C(status) (HTTP code, null without an answer),
    C(reason), C(message) and C(tries).
  returned: always
  type: list
  elements: dict
requests:
  description: How many requests were sent, retries included.
  returned: always
  type: int
"""

import os
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpufleet.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARGUMENT_SPEC, HAS_KUBERNETES, KUBERNETES_IMPORT_ERROR, Requests, api_client, auth_settings, path_of,
    request, unsupported_settings)


def log_path(namespace, name):
    return path_of("api", "v1", "namespaces", namespace, "pods", name, "log")


def log_query(params):
    query = {}
    if params.get("container"):
        query["container"] = params["container"]
    if params.get("tail_lines"):
        query["tailLines"] = str(params["tail_lines"])
    return query or None


def read_all(calls, params, names):
    """Each pod's log once, at most ``parallel`` requests at a time: {logs, failures}."""
    query = log_query(params)
    unique = list(dict.fromkeys(names))

    def one(name):
        answer, failure, tries = calls.call("GET", log_path(params["namespace"], name), query)
        if failure is None:
            return name, answer, None
        return name, None, dict(name=name, status=failure[0], reason=failure[1], message=failure[2], tries=tries)

    if len(unique) <= 1:
        rows = [one(name) for name in unique]
    else:
        with ThreadPoolExecutor(max_workers=min(params["parallel"], len(unique))) as pool:
            rows = list(pool.map(one, unique))
    result = dict(logs={}, failures=[])
    for name, text, failure in rows:
        if failure is None:
            result["logs"][name] = text
        else:
            result["failures"].append(failure)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            AUTH_ARGUMENT_SPEC,
            namespace=dict(type="str", required=True),
            names=dict(type="list", elements="str", required=True),
            container=dict(type="str"),
            tail_lines=dict(type="int", default=50),
            parallel=dict(type="int", default=16),
            retries=dict(type="int", default=4),
            delay=dict(type="float", default=2.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, logs={}, failures=[], requests=0)
    wrong = [name for name in ("parallel", "request_timeout") if params[name] < 1] \
        + [name for name in ("retries", "delay") if params[name] < 0] \
        + (["tail_lines"] if (params["tail_lines"] or 0) < 0 else [])
    if wrong:
        module.fail_json(msg="pod_logs: %s (parallel and request_timeout must be 1 or more, retries, delay and "
                             "tail_lines 0 or more)" % "; ".join("%s is %s" % (name, params[name]) for name in wrong),
                         **result)
    if not params["names"]:
        module.exit_json(**result)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR, **result)
    if unsupported_settings(os.environ):
        module.fail_json(msg="pod_logs: %s set; this module does not take them (use a kubeconfig)" % ", ".join(
            unsupported_settings(os.environ)), **result)
    try:
        client = api_client(auth_settings(params, os.environ), pool=params["parallel"])
    except Exception as error:  # pylint: disable=broad-except
        module.fail_json(msg="pod_logs: could not configure the Kubernetes client: %s" % error, **result)

    def send(method, path, query, body, timeout):
        return request(client, method, path, query, body, timeout, text=True)

    calls = Requests(send, params["retries"], params["delay"], params["request_timeout"])
    result.update(read_all(calls, params, params["names"]))
    result["requests"] = calls.requests
    module.exit_json(**result)


if __name__ == "__main__":
    main()
