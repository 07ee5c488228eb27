# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which NVIDIA facts a run may trust, and their digest for the converged record.

An ``nvidia`` fact may be an earlier run's: a fact cache keeps it, and the play loads it before
any task. A host's facts are this run's when a task of this run read them and registered the
result: site.yml's first play (``__gpufleet_nvml_run``), a role's own read (``__gpu_<role>_nvml_run``)
or the converged action that read them before comparing (``__gpu_<role>_converged``). Only a
registered result that holds the facts counts: one registered for an unreachable host, a failed
read or a comparison that did not read them holds none.
"""

from __future__ import annotations

import hashlib
import json
import re

RUN_MARKER_RE = re.compile(r"^__gpu(fleet|_[a-z_]+)_(nvml_run|converged)$")

# Readings that change from one run to the next on a healthy node, which no role's outcome depends on.
NVIDIA_VOLATILE = ("health", "kernel_log", "xid_events", "lost_gpus", "message")
GPU_VOLATILE = ("ecc", "health", "xids", "power_limit_w")


def run_facts(result):
    """The NVIDIA facts a registered result holds, else None."""
    if not isinstance(result, dict):
        return None
    facts = (result.get("ansible_facts") or {}).get("nvidia")
    return facts if isinstance(facts, dict) else None


def has_run_marker(variables):
    """Whether a read of this run gave the host (whose variables these are) its NVIDIA facts."""
    try:
        names = [name for name in variables.keys() if RUN_MARKER_RE.match(str(name))]
    except (AttributeError, TypeError):
        return False
    return any(run_facts(variables.get(name)) is not None for name in names)


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


def digest_of(value):
    """A short digest of one input's value (16 hex digits: the record names, it does not prove).
    Raises TypeError or ValueError for a value JSON cannot hold."""
    text = json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
