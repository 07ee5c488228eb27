# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the digest of a role's inputs, for the converged module's record.

A role may skip its work on a node only when its outcome could not differ
from the last complete run's. The outcome is a function of the node's state
(read on the node by the converged module), of the role's variables and the
facts it reads, and of the role's own code; this digest covers the last three.
The NVIDIA facts enter without the readings that change from one run to the
next on a healthy node (ECC counters, XIDs, remapped rows, the health verdict,
the kernel log), which no role's outcome depends on.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.internal.booleans import as_boolean, role_booleans
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils import facts_of_run
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.facts_of_run import stable_nvidia

# libyaml's loader where PyYAML was built with it: the argument specs are read on every run, once per role and host.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def code_digest(role):
    """SHA-256 over the role's files and the collection's plugins, names and contents."""
    digest = hashlib.sha256()
    for top in (os.path.join(ROOT, "roles", role), os.path.join(ROOT, "plugins")):
        for folder, folders, files in os.walk(top):
            folders[:] = sorted(name for name in folders if name != "__pycache__")
            for name in sorted(files):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, ROOT).encode() + b"\0")
                with open(path, "rb") as handle:
                    digest.update(handle.read())
                digest.update(b"\0")
    return digest.hexdigest()


def digest_of(value):
    """A short digest of one input's value (16 hex digits: the record names, it does not prove)."""
    try:
        return facts_of_run.digest_of(value)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError("converged_digest cannot serialise %r: %s" % (value, err))


def converged_digest(data, role):
    """Digests of a role's inputs, a JSON object: one per variable and fact (``vars.NAME``, ``facts.NAME``, any
    other key of ``data`` whole) and ``code``, the role's code, so that the converged module names what changed."""
    if not isinstance(data, dict):
        raise AnsibleFilterError("converged_digest expects a dict of the role's inputs, got %s" % type(data).__name__)
    if not isinstance(role, str) or not re.match(r"^[a-z][a-z0-9_]*$", role) \
            or not os.path.isdir(os.path.join(ROOT, "roles", role)):
        raise AnsibleFilterError("converged_digest: %r is not a role of this collection" % (role,))
    inputs = dict(data)
    # A boolean setting is the same input however it was given: true in YAML, "true" from -e name=true.
    if isinstance(inputs.get("vars"), dict):
        flags = set(role_booleans(role))
        inputs["vars"] = dict((name, as_boolean(value) if name in flags and as_boolean(value) is not None else value)
                              for name, value in inputs["vars"].items())
    facts = inputs.get("facts")
    if isinstance(facts, dict) and "nvidia" in facts:
        inputs["facts"] = dict(facts, nvidia=stable_nvidia(facts["nvidia"]))
    digests = {"code": code_digest(role)}
    for key, value in inputs.items():
        if isinstance(value, dict) and key in ("vars", "facts"):
            digests.update(("%s.%s" % (key, name), digest_of(item)) for name, item in value.items())
        else:
            digests[str(key)] = digest_of(value)
    return json.dumps(digests, sort_keys=True, separators=(",", ":"))


def role_variables(role):
    """The variables a role of this collection declares (its argument spec's options for the main entry point)."""
    if not isinstance(role, str) or not re.match(r"^[a-z][a-z0-9_]*$", role):
        raise AnsibleFilterError("role_variables: %r is not a role of this collection" % (role,))
    path = os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")
    try:
        with open(path) as handle:
            spec = yaml.load(handle, Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as err:
        raise AnsibleFilterError("role_variables: cannot read the argument spec of %s: %s" % (role, err))
    return sorted(spec["argument_specs"]["main"].get("options") or {})


class FilterModule(object):
    def filters(self):
        return {"converged_digest": converged_digest, "role_variables": role_variables}
