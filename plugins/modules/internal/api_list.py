#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: api_list
version_added: 0.1.0
short_description: "Internal: List the objects of one Kubernetes resource, as the API wrote them, in one request"
description:
  - One C(GET) of a collection (C(/api/v1/nodes), C(/api/v1/namespaces/NS/pods), C(/apis/GROUP/VERSION/...)), with
    label and field selectors, and the objects as the API wrote them, in the shape of M(kubernetes.core.k8s_info)'s
    C(resources), less the fields O(drop) names (by default C(metadata.managedFields), which no role reads and
    which is a large part of every object).
  - For the lists that grow with the fleet (every Node, every pod bound to a node). The objects are not turned into
    the client's models and back, which at a thousand Nodes or pods costs more than the request itself.
  - A request answered with HTTP 429 (after its C(Retry-After), at most 30 s), 500, 502, 503 or 504, or not
    answered, is tried again O(retries) more times, O(delay) seconds apart.
  - Changes nothing.
  - Internal to the roles gpufleet.nvidia.gpu_device_plugin, gpufleet.nvidia.gpu_dra_driver and
    gpufleet.nvidia.gpu_smoke_test and the playbooks site.yml, health.yml, gpu_path.yml, mig.yml and upgrade_driver.yml,
    not part of the collection's public interface; its options and results may change in any release.
options:
  api_version:
    description: The resource's group and version (C(v1), C(apps/v1)).
    type: str
    default: v1
  resource:
    description: The resource's plural name (C(nodes), C(pods), C(daemonsets)).
    type: str
    required: true
  namespace:
    description: Namespace to list in; without it, every namespace (or the cluster-wide resource).
    type: str
  label_selectors:
    description: Label selectors the objects must all match (C(key=value), C(key!=value), C(key), C(!key)).
    type: list
    elements: str
    default: []
  field_selectors:
    description: Field selectors the objects must all match (C(spec.nodeName!=), C(status.phase!=Failed)).
    type: list
    elements: str
    default: []
  keep:
    description:
      - Dotted paths of the only fields kept of every object (C(metadata.name), C(status.allocatable)), with what
        leads to them; a list on the way keeps every entry, each cut the same way (C(spec.containers.resources)
        keeps each container's C(resources)). A path an object lacks is left out of it.
      - For lists that grow with the fleet, of which a role reads a few fields. Without it, every field is kept.
    type: list
    elements: str
  drop:
    description: Dotted paths of fields left out of every object (after O(keep)).
    type: list
    elements: str
    default: [metadata.managedFields]
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
"""

EXAMPLES = r"""
- name: Read every Node
  gpufleet.nvidia.internal.api_list:
    resource: nodes
  register: nodes

- name: Read each Node's name, allocatable resources and conditions only
  gpufleet.nvidia.internal.api_list:
    resource: nodes
    keep: [metadata.name, status.allocatable, status.conditions]
  register: nodes

- name: Read the pods bound to a node that have not finished, in every namespace
  gpufleet.nvidia.internal.api_list:
    resource: pods
    field_selectors:
      - spec.nodeName!=
      - status.phase!=Succeeded
      - status.phase!=Failed
  register: pods
"""

RETURN = r"""
resources:
  description: The objects, as the API wrote them, with only O(keep) when given, less O(drop).
  returned: success
  type: list
  elements: dict
api_version:
  description: The list's C(apiVersion).
  returned: success
  type: str
resource_version:
  description: The list's C(metadata.resourceVersion).
  returned: success
  type: str
requests:
  description: How many requests were made (more than one when some were tried again).
  returned: always
  type: int
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpufleet.nvidia.plugins.module_utils.k8s_client import (
    AUTH_ARGUMENT_SPEC, HAS_KUBERNETES, KUBERNETES_IMPORT_ERROR, Requests, api_client, auth_settings, path_of,
    request, unsupported_settings)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.dotted import drop_paths, keep_paths

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def collection_path(api_version, resource, namespace=None):
    """The collection's path, or None when a part is not a name the API could have."""
    parts = api_version.split("/")
    if len(parts) > 2 or not all(_NAME.match(part) for part in parts) or not _NAME.match(resource) \
            or (namespace is not None and not _NAME.match(namespace)):
        return None
    root = ["api"] if len(parts) == 1 else ["apis"]
    return path_of(*(root + parts + (["namespaces", namespace] if namespace else []) + [resource]))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            AUTH_ARGUMENT_SPEC,
            api_version=dict(type="str", default="v1"),
            resource=dict(type="str", required=True),
            namespace=dict(type="str"),
            label_selectors=dict(type="list", elements="str", default=[]),
            field_selectors=dict(type="list", elements="str", default=[]),
            keep=dict(type="list", elements="str"),
            drop=dict(type="list", elements="str", default=["metadata.managedFields"]),
            retries=dict(type="int", default=4),
            delay=dict(type="float", default=2.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = collection_path(params["api_version"], params["resource"], params["namespace"])
    if path is None:
        module.fail_json(msg="api_list: api_version %s, resource %s, namespace %s: give a group/version, a plural "
                             "resource name and a namespace as the API names them" % (
                                 params["api_version"], params["resource"], params["namespace"]), requests=0)
    if params["retries"] < 0 or params["delay"] < 0 or params["request_timeout"] < 1:
        module.fail_json(msg="api_list: retries is %s, delay %s, request_timeout %s; give 0 or more, 0 or more and 1 "
                             "or more" % (params["retries"], params["delay"], params["request_timeout"]), requests=0)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR, requests=0)
    if unsupported_settings(os.environ):
        module.fail_json(msg="api_list: %s set; this module does not take them (use a kubeconfig)" % ", ".join(
            unsupported_settings(os.environ)), requests=0)
    try:
        client = api_client(auth_settings(params, os.environ))
    except Exception as error:  # pylint: disable=broad-except
        module.fail_json(msg="api_list: could not configure the Kubernetes client: %s" % error, requests=0)
    query = dict((key, ",".join(params[option])) for key, option in (("labelSelector", "label_selectors"),
                                                                     ("fieldSelector", "field_selectors"))
                 if params[option])
    requests = Requests(lambda method, where, args, body, timeout: request(client, method, where, args, body, timeout),
                        params["retries"], params["delay"], params["request_timeout"])
    answer, failure, tries = requests.call("GET", path, query or None)
    if failure:
        module.fail_json(msg="api_list: GET %s%s: %s (tried %d time%s)" % (
            path, ("?" + "&".join("%s=%s" % item for item in sorted(query.items()))) if query else "",
            ("HTTP %s %s: %s" % failure) if failure[0] else failure[2], tries, "" if tries == 1 else "s"),
            status=failure[0], reason=failure[1], requests=requests.requests)
    items = [drop_paths(keep_paths(item, params["keep"]), params["drop"]) for item in answer.get("items") or []]
    module.exit_json(changed=False, resources=items, api_version=answer.get("apiVersion"),
                     resource_version=(answer.get("metadata") or {}).get("resourceVersion"),
                     requests=requests.requests)


if __name__ == "__main__":
    main()
