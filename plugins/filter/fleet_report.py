# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the NVIDIA facts of many hosts to the data of one fleet report.

Pure data handling over ``ansible_facts['nvidia']`` (gpufleet.nvidia.nvml_facts),
so every row and every summary figure the report shows is unit-tested on data
alone; the templates only lay it out.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.node_labels import LABEL_PREFIX, node_labels
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_inventory import STATES

# Report order of the states: nvml_facts' own (working nodes first), then hosts it could not reach.
STATE_ORDER = STATES + ("unreachable",)
# How bad a state is, for the colour of its badge.
SEVERITY = {
    "ok": "ok",
    "no_gpu": "info",
    "driver_not_installed": "warn",
    "driver_not_loaded": "warn",
    "driver_mismatch": "bad",
    "error": "bad",
    "unreachable": "bad",
}
# Labels that only split a value another label carries whole; the brief list leaves them out.
_SPLIT_LABELS = frozenset(
    LABEL_PREFIX + name for name in (
        "cuda.driver-version.major",
        "cuda.driver-version.minor",
        "cuda.driver-version.revision",
        "cuda.runtime-version.major",
        "cuda.runtime-version.minor",
    )
)
# Brief list order: what the node is first, then the versions.
_LABEL_ORDER = ("gpu.product", "gpu.count", "gpu.memory", "gpu.family", "gpu.compute.major", "gpu.compute.minor",
                "mig.capable", "gpu.present", "cuda.driver-version.full", "cuda.runtime-version.full")
_DIGITS_RE = re.compile(r"(\d+)")


def natural_key(text):
    """Sort key that orders embedded numbers by value: node2 before node10."""
    parts = _DIGITS_RE.split(str(text).lower())
    return [int(part) if index % 2 else part for index, part in enumerate(parts)], str(text)


def gib(mib):
    """MiB -> GiB with one decimal (81920 -> 80.0, 81559 -> 79.6); None stays None."""
    if mib is None:
        return None
    return round(float(mib) / 1024.0, 1)


def gib_text(value):
    """80.0 -> '80 GiB', 79.6 -> '79.6 GiB'."""
    if value is None:
        return "unknown memory"
    return "%s GiB" % (("%.1f" % value).rstrip("0").rstrip("."))


def _plural(count, noun):
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


def _facts_of(node, value):
    """(facts, state, message) for one input value; facts is None for a host without facts."""
    if value is None:
        return None, "unreachable", "no NVIDIA facts were gathered from this host"
    if not isinstance(value, dict):
        raise AnsibleFilterError(
            "fleet_report: the value for %s must be ansible_facts['nvidia'], the registered result of "
            "gpufleet.nvidia.nvml_facts, or null; got %s: %r" % (node, type(value).__name__, value))
    if value.get("unreachable"):
        reason = value["unreachable"] if isinstance(value["unreachable"], str) else value.get("msg")
        return None, "unreachable", str(reason or "the host could not be reached")
    if value.get("failed"):
        return None, "error", "gpufleet.nvidia.nvml_facts failed: %s" % (value.get("msg") or "no message")
    if value.get("skipped"):
        return None, "unreachable", "the NVIDIA facts task was skipped on this host"
    if "ansible_facts" in value:
        facts = (value.get("ansible_facts") or {}).get("nvidia")
        if facts is None:
            return None, "error", "gpufleet.nvidia.nvml_facts returned no ansible_facts['nvidia']"
        value = facts
    if not isinstance(value, dict) or "state" not in value:
        raise AnsibleFilterError(
            "fleet_report: the value for %s has no 'state'; expected ansible_facts['nvidia'] from "
            "gpufleet.nvidia.nvml_facts (keys: %s)" % (node, ", ".join(sorted(str(k) for k in value))))
    return value, value.get("state") or "error", value.get("message")


def _gpu_models(gpus):
    """GPUs grouped by (model, memory), in the order they first appear."""
    groups = []
    index = {}
    for gpu in gpus:
        model = gpu.get("name") or "unknown GPU"
        memory = gib(gpu.get("memory_total_mib"))
        key = (model, memory)
        if key not in index:
            index[key] = len(groups)
            groups.append({"model": model, "count": 0, "memory_gib": memory})
        groups[index[key]]["count"] += 1
    for group in groups:
        group["text"] = "%d \u00d7 %s" % (group["count"], group["model"])
        group["memory_text"] = gib_text(group["memory_gib"])
    return groups


def _mig(gpus):
    """MIG of a node: mode over its GPUs and its MIG devices counted by profile."""
    capable = [gpu for gpu in gpus if (gpu.get("mig") or {}).get("capable")]
    enabled = [gpu for gpu in capable if gpu["mig"].get("current_mode") == "enabled"]
    if not capable:
        mode = "not capable"
    elif not enabled:
        mode = "disabled"
    elif len(enabled) == len(capable):
        mode = "enabled"
    else:
        mode = "mixed"
    profiles = []
    counts = {}
    for gpu in enabled:
        for device in gpu["mig"].get("devices") or []:
            if device.get("profile"):
                name = device["profile"]
            else:
                name = "%s (profile not reported)" % gib_text(gib(device.get("memory_total_mib")))
            if name not in counts:
                counts[name] = 0
                profiles.append(name)
            counts[name] += 1
    devices = [{"profile": name, "count": counts[name]} for name in profiles]
    pending = [
        "GPU %s: MIG %s after reset" % (gpu.get("index"), gpu["mig"]["pending_mode"])
        for gpu in capable
        if gpu["mig"].get("pending_mode") and gpu["mig"].get("pending_mode") != gpu["mig"].get("current_mode")
    ]
    if mode == "enabled" or mode == "mixed":
        text = mode if mode == "enabled" else "enabled on %d of %d GPUs" % (len(enabled), len(capable))
        if devices:
            text += ": " + ", ".join("%d \u00d7 %s" % (d["count"], d["profile"]) for d in devices)
        else:
            text += ", no MIG devices"
    else:
        text = mode
    return {
        "mode": mode,
        "capable_gpus": len(capable),
        "enabled_gpus": len(enabled),
        "devices": devices,
        "device_count": sum(counts.values()),
        "pending": pending,
        "text": text,
    }


def health_flags(gpus):
    """What an operator must look at on a node's GPUs, one line per finding."""
    flags = []
    for gpu in gpus:
        name = "GPU %s" % gpu.get("index")
        ecc = gpu.get("ecc") or {}
        health = gpu.get("health") or {}
        if gpu.get("error"):
            flags.append("%s: %s" % (name, gpu["error"]))
        for scope in ("volatile", "aggregate"):
            count = ecc.get("%s_uncorrectable" % scope)
            if count:
                flags.append("%s: %d uncorrectable ECC error%s (%s)" % (name, count, "" if count == 1 else "s", scope))
        if health.get("retired_pages_pending"):
            flags.append("%s: retired pages pending" % name)
        if health.get("remapped_rows_pending"):
            flags.append("%s: remapped rows pending" % name)
        if health.get("remapped_rows_failure"):
            flags.append("%s: row remapping failed" % name)
    return flags


def _labels(facts):
    if not facts.get("gpus"):
        return {}
    return node_labels(facts)


def _labels_brief(labels):
    """'name=value' without the nvidia.com/ prefix and without the split version labels."""
    def order(key):
        short = key[len(LABEL_PREFIX):] if key.startswith(LABEL_PREFIX) else key
        return (_LABEL_ORDER.index(short) if short in _LABEL_ORDER else len(_LABEL_ORDER), short)

    brief = []
    for key in sorted(labels, key=order):
        if key in _SPLIT_LABELS:
            continue
        short = key[len(LABEL_PREFIX):] if key.startswith(LABEL_PREFIX) else key
        brief.append("%s=%s" % (short, labels[key]))
    return brief


def _row(node, value):
    facts, state, message = _facts_of(node, value)
    gpus = (facts or {}).get("gpus") or []
    labels = _labels(facts) if facts is not None else {}
    row = {
        "node": node,
        "state": state,
        "severity": SEVERITY.get(state, "bad"),
        "message": message,
        "reached": facts is not None,
        "gpu_count": len(gpus),
        "gpus": _gpu_models(gpus),
        "driver_version": (facts or {}).get("driver_version"),
        "cuda_version": (facts or {}).get("cuda_driver_version"),
        "kernel_module_version": (facts or {}).get("kernel_module_version"),
        "mig": _mig(gpus),
        "health": health_flags(gpus),
        "labels": labels,
        "labels_brief": _labels_brief(labels),
        "driver_drift": False,
    }
    return row


def _counted(counts, order, key):
    return [{key: name, "count": counts[name]} for name in order]


def fleet_report(nodes):
    """Rows per node and the fleet summary, from ``{node: facts}``.

    Each value is ``ansible_facts['nvidia']``, the registered result of
    gpufleet.nvidia.nvml_facts (unreachable and failed results included), a
    dict ``{"unreachable": "reason"}``, or null for a host without facts.
    """
    if not isinstance(nodes, dict):
        raise AnsibleFilterError(
            "fleet_report expects a dict of node name -> ansible_facts['nvidia'], got %s" % type(nodes).__name__)
    rows = [_row(str(node), nodes[node]) for node in sorted(nodes, key=natural_key)]

    states = {}
    for row in rows:
        states[row["state"]] = states.get(row["state"], 0) + 1
    state_order = [s for s in STATE_ORDER if s in states] + sorted(s for s in states if s not in STATE_ORDER)
    nodes_by_state = [
        {"state": state, "count": states[state], "severity": SEVERITY.get(state, "bad")} for state in state_order
    ]

    models = {}
    for row in rows:
        for group in row["gpus"]:
            models[group["model"]] = models.get(group["model"], 0) + group["count"]
    gpus_by_model = _counted(models, sorted(models, key=lambda m: (-models[m], natural_key(m))), "model")

    drivers = {}
    for row in rows:
        if row["driver_version"]:
            drivers.setdefault(row["driver_version"], []).append(row["node"])
    # Newest version first; the baseline is the version most nodes run (the newest on a tie).
    versions = sorted(drivers, key=natural_key, reverse=True)
    baseline = max(versions, key=lambda v: len(drivers[v])) if versions else None
    drift = len(versions) > 1
    # "most nodes" when one version leads, "newest" when the leaders tie.
    leaders = [v for v in versions if len(drivers[v]) == len(drivers[baseline])] if versions else []
    baseline_reason = "most nodes" if len(leaders) == 1 else "newest"
    driver_versions = [
        {"version": v, "count": len(drivers[v]), "nodes": drivers[v], "baseline": v == baseline} for v in versions
    ]
    for row in rows:
        row["driver_drift"] = bool(drift and row["driver_version"] and row["driver_version"] != baseline)

    cudas = {}
    for row in rows:
        if row["cuda_version"]:
            cudas[row["cuda_version"]] = cudas.get(row["cuda_version"], 0) + 1
    cuda_versions = _counted(cudas, sorted(cudas, key=natural_key, reverse=True), "version")

    flagged = [row["node"] for row in rows if row["health"]]
    summary = {
        "nodes": len(rows),
        "gpus": sum(row["gpu_count"] for row in rows),
        "mig_devices": sum(row["mig"]["device_count"] for row in rows),
        "nodes_ok": states.get("ok", 0),
        "nodes_by_state": nodes_by_state,
        "gpus_by_model": gpus_by_model,
        "driver_versions": driver_versions,
        "driver_baseline": baseline,
        "driver_baseline_reason": baseline_reason if versions else None,
        "driver_drift": drift,
        "cuda_versions": cuda_versions,
        "nodes_with_health_flags": flagged,
        "health_flags": sum(len(row["health"]) for row in rows),
    }
    return {"summary": summary, "rows": rows}


class FilterModule(object):
    def filters(self):
        return {
            "fleet_report": fleet_report,
        }
