# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: GPU health gating. The health in the NVIDIA facts to the labels and taint of each Node.

Pure functions over ``ansible_facts['nvidia']`` (gpufleet.nvidia.nvml_facts) and Node objects as the
API returns them, so that every decision of site.yml's and health.yml's gating is unit-tested on data.

What the gating owns, and the rule for removing it
--------------------------------------------------
It sets at most three things on a Node: the label ``gpufleet.nvidia.com/gpu-health`` (healthy or
unhealthy), the label ``gpufleet.nvidia.com/gpu-health-reason`` (the problem codes of an unhealthy
node) and, when asked, the taint ``gpufleet.nvidia.com/gpu-unhealthy=<first problem code>:NoSchedule``.
What it set is recorded on the Node itself, in the annotation ``gpufleet.nvidia.com/gpu-health-set``
(JSON: the labels with their values, the taints with value and effect), so that the record travels
with the Node and any controller that runs the gating sees the same one.

A label or taint counts as the gating's own only while the Node carries exactly what the record
says: the same key and value (for a taint, the same key, value and effect). Only those are ever
changed or removed. Anything else with one of these keys, put there before the gating ran or
changed by someone since, belongs to whoever put it there: it is never changed or removed, it is
named in the plan, and it drops out of the record. Taints are unique by key and effect
(Kubernetes' validation of NodeSpec), so while someone else's NoSchedule taint has the gating's
key, the gating adds none of its own.

A Node's ``spec.taints`` is one list that a merge patch replaces whole. The patch carries the whole
list, built from the Node as it was read, and the Node's ``metadata.resourceVersion``: the API
server refuses it with 409 Conflict when the Node changed since it was read (API conventions,
"Concurrency Control and Consistency"), so a taint another controller added in between is never
lost; the caller reads the Node again and plans again.
"""

from __future__ import annotations

import json
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

DOMAIN = "gpufleet.nvidia.com/"
HEALTH_LABEL = DOMAIN + "gpu-health"
REASON_LABEL = DOMAIN + "gpu-health-reason"
TAINT_KEY = DOMAIN + "gpu-unhealthy"
TAINT_EFFECT = "NoSchedule"
RECORD_ANNOTATION = DOMAIN + "gpu-health-set"
LABELS = (HEALTH_LABEL, REASON_LABEL)
STATUSES = ("healthy", "unhealthy", "unknown")
# The settings the gating reads, with their defaults.
SETTINGS = (("gpufleet_health_labels", True), ("gpufleet_health_taint", False))
# The apiserver's rule for a label value, and for a taint's value (IsValidLabelValue).
LABEL_VALUE_MAX = 63
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CODE_DROPPED_RE = re.compile(r"[^A-Za-z0-9_-]+")
REASON_SEPARATOR = "."

NOT_GATHERED = ("health unknown: no NVIDIA facts from this run (outside --limit, unreachable, or "
                "gpufleet.nvidia.nvml_facts failed or did not run on it)")


def valid_label_value(value):
    """Whether ``value`` is a valid Kubernetes label value (also the rule for a taint's value)."""
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE_RE.match(value))


def _code(problem):
    code = _CODE_DROPPED_RE.sub("", str(problem.get("code") or "")).strip("-_")
    return code or "unknown"


def problem_text(problem):
    """One problem as 'code where': 'gpu_lost 0000:3b:00.0', 'xid GPU 1', or the code alone."""
    where = problem.get("pci_address")
    if not where and isinstance(problem.get("gpu_index"), int) and not isinstance(problem.get("gpu_index"), bool):
        where = "GPU %d" % problem["gpu_index"]
    return "%s %s" % (problem.get("code") or "unknown", where) if where else str(problem.get("code") or "unknown")


def problems_text(problems):
    """Problems as 'gpu_lost 0000:3b:00.0, xid 0000:3b:00.0'; the same words repeated are counted: '3 x gpu_lost'."""
    texts, counts = [], {}
    for item in problems or []:
        text = problem_text(item)
        if text not in counts:
            texts.append(text)
            counts[text] = 0
        counts[text] += 1
    return ", ".join(("%d x %s" % (counts[text], text)) if counts[text] > 1 else text for text in texts)


def _shape_problem(facts):
    """None when ``facts['health']`` has the shape nvml_facts gives it, else why not."""
    health = facts.get("health")
    if not isinstance(health, dict):
        return "ansible_facts['nvidia']['health'] is a %s, not a mapping" % type(health).__name__
    if health.get("status") not in STATUSES:
        return "ansible_facts['nvidia']['health']['status'] is %r, not one of %s" % (
            health.get("status"), ", ".join(STATUSES))
    problems = health.get("problems", [])
    if not isinstance(problems, list) or not all(isinstance(p, dict) and p.get("code") for p in problems):
        return "ansible_facts['nvidia']['health']['problems'] is not a list of problems with a code: %r" % (
            problems,)
    return None


def node_health(facts):
    """A host's health from its ``ansible_facts['nvidia']``.

    Returns {status, problems, codes, text, reason}: ``status`` healthy, unhealthy or unknown (no
    facts, facts without ``health``, or a ``health`` nvml_facts would not give); ``problems`` as the
    facts list them; ``codes`` the distinct problem codes in order; ``text`` the problems as
    'gpu_lost 0000:3b:00.0, xid GPU 1'; ``reason`` why the health is unknown.
    """
    answer = {"status": "unknown", "problems": [], "codes": [], "text": "", "reason": None}
    if facts is None:
        answer["reason"] = NOT_GATHERED
        return answer
    if not isinstance(facts, dict):
        answer["reason"] = "health unknown: ansible_facts['nvidia'] is a %s, not a mapping" % type(facts).__name__
        return answer
    if "health" not in facts:
        answer["reason"] = ("health unknown: the NVIDIA facts have no health (NVIDIA state %s; gpufleet.nvidia."
                            "nvml_facts of this collection reports it)" % (facts.get("state") or "not reported"))
        return answer
    problem = _shape_problem(facts)
    if problem:
        answer["reason"] = "health unknown: " + problem
        return answer
    health = facts["health"]
    answer["status"] = health["status"]
    answer["problems"] = list(health.get("problems") or [])
    codes = []
    for item in answer["problems"]:
        if _code(item) not in codes:
            codes.append(_code(item))
    answer["codes"] = codes
    answer["text"] = problems_text(answer["problems"])
    if answer["status"] == "unknown":
        answer["reason"] = "health unknown: nvml_facts could not tell (NVIDIA state %s%s)" % (
            facts.get("state") or "not reported", ": %s" % facts["message"] if facts.get("message") else "")
    return answer


def reason_value(codes):
    """The problem codes as one valid label value: 'gpu_lost.xid', cut at a code to fit 63 characters."""
    value = ""
    for code in codes:
        candidate = code if not value else value + REASON_SEPARATOR + code
        if len(candidate) > LABEL_VALUE_MAX:
            break
        value = candidate
    if not value and codes:
        value = codes[0][:LABEL_VALUE_MAX].rstrip("-_.")
    if not valid_label_value(value):
        raise AnsibleFilterError("node_health_plan built an invalid label value %r from the codes %r" % (value, codes))
    return value or "unknown"


def node_health_settings(values):
    """Check the gating's settings: {name: value} -> {"errors": [sentences], "labels": bool, "taint": bool}.

    A setting that is missing or null takes its default; any other value must be a boolean (or
    what Ansible reads as one strictly, such as 'true' from ``-e``).
    """
    values = values if isinstance(values, dict) else {}
    answer = {"errors": []}
    for name, default in SETTINGS:
        value = values.get(name)
        short = name[len("gpufleet_health_"):]
        if value is None:
            answer[short] = default
            continue
        try:
            if isinstance(value, (list, dict)):
                raise TypeError(value)
            answer[short] = boolean(value, strict=True)
        except TypeError:
            answer[short] = default
            answer["errors"].append("%s is %s, not a boolean; give true or false" % (name, json.dumps(value)))
    return answer


def _taint_of(taint):
    return {"key": taint.get("key"), "value": taint.get("value") or "", "effect": taint.get("effect")}


def _same_taint(one, other):
    return _taint_of(one) == _taint_of(other)


def _taint_text(taint):
    value = taint.get("value") or ""
    return "%s%s:%s" % (taint.get("key"), "=" + value if value else "", taint.get("effect"))


def read_record(text):
    """The record annotation's value -> ({labels: {key: value}, taints: [...]}, problem or None)."""
    empty = {"labels": {}, "taints": []}
    if text in (None, ""):
        return empty, None
    try:
        record = json.loads(text)
    except (TypeError, ValueError):
        record = None
    labels = record.get("labels") if isinstance(record, dict) else None
    taints = record.get("taints") if isinstance(record, dict) else None
    if (not isinstance(labels, dict) or not isinstance(taints, list)
            or not all(key in LABELS and isinstance(value, str) for key, value in labels.items())
            or not all(isinstance(t, dict) and t.get("key") == TAINT_KEY and t.get("effect") for t in taints)):
        return empty, ("the annotation %s is not what the gating writes (%r): nothing on the Node is taken "
                       "for the gating's own, and the annotation is rewritten" % (RECORD_ANNOTATION, text[:200]))
    return {"labels": dict(labels), "taints": [_taint_of(t) for t in taints]}, None


def record_text(record):
    """The record annotation's value: compact JSON in a fixed order, None when nothing is recorded."""
    if not record["labels"] and not record["taints"]:
        return None
    return json.dumps({"labels": dict(sorted(record["labels"].items())),
                       "taints": sorted((_taint_of(t) for t in record["taints"]),
                                        key=lambda t: (t["key"], t["effect"]))},
                      sort_keys=True, separators=(",", ":"))


def _wanted(health, settings):
    labels = {}
    if settings["labels"]:
        labels[HEALTH_LABEL] = health["status"]
        if health["status"] == "unhealthy":
            labels[REASON_LABEL] = reason_value(health["codes"])
    taint = None
    if settings["taint"] and health["status"] == "unhealthy":
        taint = {"key": TAINT_KEY, "value": health["codes"][0] if health["codes"] else "unhealthy",
                 "effect": TAINT_EFFECT}
        if not valid_label_value(taint["value"]):
            raise AnsibleFilterError("node_health_plan built an invalid taint value %r" % taint["value"])
    return labels, taint


def plan_node(node, health, settings):
    """The changes to one Node: {changes, kept, notes, patch}; ``patch`` is None when nothing changes.

    ``node`` is the Node as read, ``health`` node_health's answer (healthy or unhealthy) and
    ``settings`` {labels, taint}. See the module's docstring for what is the gating's own.
    """
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    record, problem = read_record(annotations.get(RECORD_ANNOTATION))
    notes = [problem] if problem else []
    want_labels, want_taint = _wanted(health, settings)

    changes, kept = [], []
    label_patch = {}
    new_record = {"labels": {}, "taints": []}
    for key in LABELS:
        current = labels.get(key)
        ours = key in record["labels"] and record["labels"][key] == current
        want = want_labels.get(key)
        if current is not None and not ours:
            kept.append("label %s=%s (not set by the gating: left as it is)" % (key, current))
            if key in record["labels"]:
                notes.append("label %s was changed by someone else since the gating set it to %s: it is theirs now"
                             % (key, record["labels"][key]))
            continue
        if want is None:
            if current is not None:
                label_patch[key] = None
                changes.append("removed label %s=%s" % (key, current))
            continue
        if current != want:
            label_patch[key] = want
            changes.append("label %s=%s%s" % (key, want, " (was %s)" % current if current is not None else ""))
        new_record["labels"][key] = want

    new_taints = []
    placed = False
    for taint in taints:
        if taint.get("key") != TAINT_KEY or taint.get("effect") != TAINT_EFFECT:
            new_taints.append(taint)
            continue
        ours = any(_same_taint(taint, entry) for entry in record["taints"])
        if not ours:
            new_taints.append(taint)
            kept.append("taint %s (not set by the gating: left as it is)" % _taint_text(taint))
            placed = True
            continue
        if want_taint is None:
            changes.append("removed taint %s" % _taint_text(taint))
            continue
        if _same_taint(taint, want_taint):
            new_taints.append(taint)
        else:
            new_taints.append(dict(want_taint))
            changes.append("taint %s (was %s)" % (_taint_text(want_taint), _taint_text(taint)))
        new_record["taints"].append(_taint_of(want_taint))
        placed = True
    if want_taint is not None and not placed:
        new_taints.append(dict(want_taint))
        changes.append("taint %s" % _taint_text(want_taint))
        new_record["taints"].append(_taint_of(want_taint))
    for entry in record["taints"]:
        # Recorded, but the Node now carries another value under the same key and effect: someone changed it.
        if not any(_same_taint(entry, t) for t in taints) and any(
                t.get("key") == entry["key"] and t.get("effect") == entry["effect"] for t in taints):
            notes.append("taint %s was changed by someone else since the gating set it: it is theirs now"
                         % _taint_text(entry))
    if want_taint is not None and not any(_same_taint(t, want_taint) for t in new_taints):
        notes.append("not tainted: %s is there already, set by someone else" % ", ".join(
            _taint_text(t) for t in taints if t.get("key") == TAINT_KEY and t.get("effect") == TAINT_EFFECT))

    annotation = record_text(new_record)
    patch_metadata = {}
    if label_patch:
        patch_metadata["labels"] = label_patch
    if annotation != annotations.get(RECORD_ANNOTATION):
        patch_metadata["annotations"] = {RECORD_ANNOTATION: annotation}
    taints_changed = [_plain_taint(t) for t in new_taints] != [_plain_taint(t) for t in taints]
    if not patch_metadata and not taints_changed:
        return {"changes": changes, "kept": kept, "notes": notes, "patch": None}
    if not changes:
        changes.append("updated the record %s" % RECORD_ANNOTATION)
    # The precondition: the API server refuses the patch with 409 Conflict if the Node changed since it was read.
    patch_metadata["resourceVersion"] = metadata.get("resourceVersion")
    patch = {"metadata": patch_metadata}
    # What the Node has now of the fields the patch sets, for the diff (--diff).
    before = {"metadata": {"resourceVersion": metadata.get("resourceVersion")}}
    if "labels" in patch_metadata:
        before["metadata"]["labels"] = dict((key, labels.get(key)) for key in patch_metadata["labels"])
    if "annotations" in patch_metadata:
        before["metadata"]["annotations"] = {RECORD_ANNOTATION: annotations.get(RECORD_ANNOTATION)}
    if taints_changed:
        # The whole list, as read, with only the gating's own taint added, changed or taken out;
        # null rather than an empty list, as the API leaves an empty list out.
        patch["spec"] = {"taints": new_taints or None}
        before["spec"] = {"taints": taints or None}
    return {"changes": changes, "kept": kept, "notes": notes, "patch": patch, "before": before,
            "name": metadata.get("name")}


def _plain_taint(taint):
    return sorted((key, str(value)) for key, value in (taint or {}).items())


def node_health_plan(hosts, nodes, settings=None, only=None, earlier=None):
    """Per GPU host: its health and the changes to its Node's gating labels and taint.

    ``hosts``: [{host, node, facts}], ``facts`` being ``ansible_facts['nvidia']`` from this run or
    None; ``nodes``: the Node objects read from the API just before; ``settings``: the values of
    gpufleet_health_labels and gpufleet_health_taint ({name: value}, see node_health_settings);
    ``only``: node names to plan (the Nodes a conflict made read again), None for all; ``earlier``:
    the plan of the attempt before, whose entries for the other nodes are kept.
    Returns {"nodes": [{host, node, status, problems, codes, text, changes, kept, notes, patch,
    reason}], "patch": the entries with a patch}. A host of unknown health, without a Node or whose
    node another host already names gets no patch, with the reason.
    """
    if not isinstance(hosts, list) or not all(isinstance(row, dict) and row.get("host") for row in hosts):
        raise AnsibleFilterError("node_health_plan expects a list of hosts (dicts with host, node, facts), got %r"
                                 % (hosts,))
    if not isinstance(nodes, list):
        raise AnsibleFilterError("node_health_plan expects the Node objects as a list (gpufleet.nvidia.internal.api_list's "
                                 "resources), got %s" % type(nodes).__name__)
    checked = node_health_settings(settings or {})
    if checked["errors"]:
        raise AnsibleFilterError("; ".join(checked["errors"]))
    by_name = dict((((node or {}).get("metadata") or {}).get("name"), node) for node in nodes)
    entries, seen = [], {}
    for row in hosts:
        name = str(row.get("node") or row["host"])
        if only is not None and name not in only:
            continue
        health = node_health(row.get("facts"))
        entry = {"host": row["host"], "node": name, "status": health["status"], "problems": health["problems"],
                 "codes": health["codes"], "text": health["text"], "changes": [], "kept": [], "notes": [],
                 "patch": None, "reason": health["reason"]}
        entries.append(entry)
        if name in seen:
            entry["reason"] = "left alone: host %s names the same node" % seen[name]
            continue
        seen[name] = row["host"]
        if health["status"] == "unknown":
            continue
        node = by_name.get(name)
        if node is None:
            entry["reason"] = "left alone: no Node named %s in the cluster (set gpufleet_node_name)" % name
            continue
        entry.update(plan_node(node, health, checked))
    patch = [entry for entry in entries if entry["patch"]]
    if earlier:
        planned = dict((entry["node"], entry) for entry in entries)
        entries = [planned.pop(entry["node"], entry) for entry in earlier.get("nodes") or []] + list(planned.values())
    return {"nodes": entries, "patch": patch}


def node_health_conflicts(result, plan=None):
    """The node names whose patch the API refused with 409 Conflict (the Node changed since it was read), from
    gpufleet.nvidia.internal.api_patch's result; with ``plan``, only the nodes it planned a patch for."""
    conflicts = list((result or {}).get("conflicts") or []) if isinstance(result, dict) else []
    if plan is not None:
        planned = set(entry.get("name") for entry in (plan or {}).get("patch") or [])
        conflicts = [name for name in conflicts if name in planned]
    return conflicts


def node_health_applied(result, plan, done=None):
    """Node name -> the changes made (or, in check mode, that would be made), over every attempt so far.

    ``result``: gpufleet.nvidia.internal.api_patch's result for the patches of ``plan`` (node_health_plan's answer): a
    node counts when api_patch names it among the objects it patched (dry-run in check mode). ``done``: what
    earlier attempts made.
    """
    done = dict(done or {})
    patched = set((result or {}).get("patched") or []) if isinstance(result, dict) else set()
    for entry in (plan or {}).get("patch") or []:
        if entry.get("name") in patched:
            done[entry["node"]] = list(entry.get("changes") or [])
    return done


def node_health_table(plan, applied=None, check_mode=False):
    """Text lines: NODE, HOST, HEALTH, PROBLEMS, CHANGES, and a line per note or label/taint left alone."""
    applied = applied or {}
    table = [("NODE", "HOST", "HEALTH", "PROBLEMS", "CHANGED" if not check_mode else "WOULD CHANGE")]
    notes = []
    for entry in (plan or {}).get("nodes") or []:
        if entry["node"] in applied:
            changed = "; ".join(applied[entry["node"]]) or "nothing"
        elif entry.get("patch"):
            changed = "not patched"
        elif entry.get("reason"):
            changed = "nothing: " + entry["reason"]
        else:
            changed = "nothing"
        table.append((entry["node"], entry["host"], entry["status"], entry["text"] or "-", changed))
        notes.extend("%s: kept %s" % (entry["node"], text) for text in entry.get("kept") or [])
        notes.extend("%s: %s" % (entry["node"], text) for text in entry.get("notes") or [])
    widths = [max(len(str(line[column])) for line in table) for column in range(len(table[0]) - 1)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(line[:-1], widths)) + "  " + str(line[-1])
             for line in table]
    return lines + notes


class FilterModule(object):
    def filters(self):
        return {
            "node_health_settings": node_health_settings,
            "node_health_plan": node_health_plan,
            "node_health_conflicts": node_health_conflicts,
            "node_health_applied": node_health_applied,
            "node_health_table": node_health_table,
        }
