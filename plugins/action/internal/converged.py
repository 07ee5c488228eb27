# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action behind gpufleet.nvidia.internal.converged: this run's NVIDIA facts first, then the comparison.

With ``read_nvidia_facts``, a comparison is made with this run's NVIDIA facts. When no task of
this run has read them (plugin_utils/facts_of_run.py says which results count), the action runs
gpufleet.nvidia.nvml_facts on the node first, returns what it read as the ``nvidia`` fact and puts
the digest of those facts in the inputs (``facts.nvidia``, where the inputs carry it) in place of
the one the controller made from the facts the play started with, which a fact cache may have kept
from an earlier run. The
read and the comparison are one task: a role's fast path costs one task per host on a re-run.

``compare: false`` makes no comparison (the role runs in full) and only reads the facts, where
they are needed.
"""

from __future__ import annotations

import json

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.facts_of_run import (
    digest_of, has_run_marker, run_facts, stable_nvidia)

NVML_MODULE = "gpufleet.nvidia.nvml_facts"
MODULE = "gpufleet.nvidia.internal.converged"


def inputs_with_facts(inputs, facts):
    """The inputs' digests with ``facts.nvidia`` the digest of these facts, where the inputs (a
    converged_digest object) carry one; other inputs as they are (the record, written with the
    same inputs, would otherwise never match them)."""
    parsed = inputs
    if isinstance(inputs, str):
        try:
            parsed = json.loads(inputs)
        except ValueError:
            return inputs
    if not isinstance(parsed, dict) or "facts.nvidia" not in parsed:
        return inputs
    digests = dict((str(key), str(value)) for key, value in parsed.items())
    digests["facts.nvidia"] = digest_of(stable_nvidia(facts))
    return json.dumps(digests, sort_keys=True, separators=(",", ":"))


class ActionModule(ActionBase):
    """Reads this run's NVIDIA facts where the comparison needs them, then runs the converged module."""

    TRANSFERS_FILES = False

    def _option(self, args, name, default):
        value = args.pop(name, default)
        try:
            return boolean(value, strict=True)
        except TypeError:
            raise AnsibleActionFail("%s must be a boolean, got %s" % (name, json.dumps(value, default=repr)))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        compare = self._option(args, "compare", True)
        read = self._option(args, "read_nvidia_facts", False)
        record = self._option(args, "record", False)
        args["record"] = record
        warnings = list(result.get("warnings") or [])
        facts = None
        if read and not record and not has_run_marker(task_vars):
            read_result = self._execute_module(module_name=NVML_MODULE, module_args={}, task_vars=task_vars)
            warnings.extend(read_result.get("warnings") or [])
            facts = run_facts(read_result)
            if read_result.get("failed") or facts is None:
                result.update(failed=True, changed=False, nvml_facts=read_result,
                              msg="Cannot read the node's NVIDIA facts for this run (gpufleet.nvidia.nvml_facts): %s"
                                  % (read_result.get("msg") or "it returned no facts"))
                if warnings:
                    result["warnings"] = warnings
                return result
            # All the read returned as facts: the interpreter it discovered, where it did, too.
            result["ansible_facts"] = dict(read_result.get("ansible_facts") or {})
            if compare:
                args["inputs"] = inputs_with_facts(args.get("inputs"), facts)
        if compare or record:
            module_result = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
            warnings.extend(module_result.pop("warnings", None) or [])
            # The comparison's own facts (an interpreter it discovered) beside those read.
            module_facts = module_result.pop("ansible_facts", None) or {}
            if module_facts or "ansible_facts" in result:
                result["ansible_facts"] = dict(module_facts, **(result.get("ansible_facts") or {}))
            result.update(module_result)
        else:
            result.update(changed=False, current=False, recorded=False, notices=[],
                          differs=[])
        if warnings:
            result["warnings"] = warnings
        return result
