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

from ansible.errors import AnsibleFilterError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NVIDIA_VOLATILE = ("health", "kernel_log", "xid_events", "lost_gpus", "message")
GPU_VOLATILE = ("ecc", "health", "xids", "power_limit_w")


def stable_nvidia(facts):
    """The NVIDIA facts without the readings that change between runs."""
    if not isinstance(facts, dict):
        return facts
    stable = dict((key, value) for key, value in facts.items() if key not in NVIDIA_VOLATILE)
    stable["gpus"] = [dict((key, value) for key, value in gpu.items() if key not in GPU_VOLATILE)
                      if isinstance(gpu, dict) else gpu for gpu in facts.get("gpus") or []]
    for gpu in stable["gpus"]:
        if isinstance(gpu, dict) and isinstance(gpu.get("fabric"), dict):
            gpu["fabric"] = dict((key, value) for key, value in gpu["fabric"].items() if key != "health")
    return stable


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


def converged_digest(data, role):
    """Digest of a role's inputs: ``data`` (its variables and facts) and the role's code."""
    if not isinstance(data, dict):
        raise AnsibleFilterError("converged_digest expects a dict of the role's inputs, got %s" % type(data).__name__)
    if not isinstance(role, str) or not re.match(r"^[a-z][a-z0-9_]*$", role) \
            or not os.path.isdir(os.path.join(ROOT, "roles", role)):
        raise AnsibleFilterError("converged_digest: %r is not a role of this collection" % (role,))
    inputs = dict(data)
    facts = inputs.get("facts")
    if isinstance(facts, dict) and "nvidia" in facts:
        inputs["facts"] = dict(facts, nvidia=stable_nvidia(facts["nvidia"]))
    try:
        text = json.dumps(inputs, sort_keys=True, default=repr)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError("converged_digest cannot serialise the inputs of %s: %s" % (role, err))
    return hashlib.sha256((text + "\0" + code_digest(role)).encode()).hexdigest()


class FilterModule(object):
    def filters(self):
        return {"converged_digest": converged_digest}
