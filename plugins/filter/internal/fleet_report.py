# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the NVIDIA facts of many hosts to the data of one fleet report.

Pure data handling over ``ansible_facts['nvidia']`` (gpufleet.nvidia.nvml_facts),
the cluster's Node objects and the results site.yml keeps of its cluster part,
so every row and every summary figure the report shows is unit-tested on data
alone; the templates only lay it out.
"""

from __future__ import annotations

import hashlib
import json
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import driver_plan as dp
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import node_health as nh
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import smoke_test as st
from ansible_collections.gpufleet.nvidia.plugins.filter.internal.node_labels import LABEL_PREFIX, node_labels
from ansible_collections.gpufleet.nvidia.plugins.module_utils import cluster_results as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_inventory import STATES

# Report order of the states: nvml_facts' own (working nodes first), then hosts it could not reach.
STATE_ORDER = STATES + tuple(state for state in ("gpu_lost",) if state not in STATES) + ("unreachable",)
# How bad a state is, for the colour of its badge.
SEVERITY = {
    "ok": "ok",
    "no_gpu": "info",
    "driver_not_installed": "warn",
    "driver_not_loaded": "warn",
    "driver_mismatch": "bad",
    "gpu_lost": "bad",
    "error": "bad",
    "unreachable": "bad",
}
# A node's health (ansible_facts['nvidia']['health']), in report order, with the colour of its badge.
HEALTH_ORDER = ("healthy", "unhealthy", "unknown")
HEALTH_SEVERITY = {"healthy": "ok", "unhealthy": "bad", "unknown": "info"}
# What each finding of health_flags is, as a problem code of the facts' health: a finding whose code
# the facts' health already reports is not said twice.
_FLAG_CODES = ("ecc_uncorrectable", "retired_pages_pending", "row_remap_pending", "row_remap_failed")
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
# The results site.yml keeps (cluster_results): their format number and writer.
RESULTS_FORMAT = cr.RESULTS_FORMAT
RESULTS_WRITER = cr.RESULTS_WRITER
# Where a host's resources come from: the Node's allocatable, as the API answers now.
RESOURCE_PREFIX = "nvidia.com/"
# The label that puts a Node on the DRA path (gpu_dra_driver_node_label, gpu_device_plugin_dra_node_label).
DRA_NODE_LABEL = "nvidia.com/dra-kubelet-plugin"
# A node's path to its GPUs, as the report words it.
PATH_TEXT = {"device_plugin": "device plugin", "dra": "DRA"}
# The resources through which the device plugin offers GPUs: whole GPUs (and their shared replicas) and MIG devices.
_GPU_RESOURCE_RE = re.compile(r"^nvidia\.com/(gpu($|\.)|mig-)")
# The troubleshooting guide (docs/docsite/rst/troubleshooting.rst) as the repository publishes it, and the
# anchors of its two sections: what a node's state means, and what the roles (and this report) flag.
TROUBLESHOOTING_URL = "https://github.com/gpufleet/nvidia/blob/main/docs/docsite/rst/troubleshooting.rst"
TROUBLESHOOTING_SECTIONS = {"states": "troubleshooting-the-states-nvml-facts-reports",
                            "roles": "troubleshooting-what-the-roles-say"}
# The line of the Markdown file that says when it was written and what it holds, so that a run that finds the
# same report keeps the file, and its time of writing, as they are.
_WRITTEN_RE = re.compile(r"<!-- gpufleet\.nvidia\.report written=(\S+) digest=([0-9a-f]{64}) -->")
_UTC_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_ISO_TIME_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(:\d{2}(\.\d+)?)?(Z|[+-]00:?00)$")


natural_key = cr.natural_key


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


def _coded_flags(gpus):
    """(problem code or None, the GPU, line) per finding on a node's GPUs."""
    flags = []
    for gpu in gpus:
        name = "GPU %s" % gpu.get("index")
        ecc = gpu.get("ecc") or {}
        health = gpu.get("health") or {}
        if gpu.get("error"):
            flags.append((None, gpu, "%s: %s" % (name, gpu["error"])))
        for scope in ("volatile", "aggregate"):
            count = ecc.get("%s_uncorrectable" % scope)
            if count:
                flags.append(("ecc_uncorrectable", gpu, "%s: %d uncorrectable ECC error%s (%s)" % (
                    name, count, "" if count == 1 else "s", scope)))
        if health.get("retired_pages_pending"):
            flags.append(("retired_pages_pending", gpu, "%s: retired pages pending" % name))
        if health.get("remapped_rows_pending"):
            flags.append(("row_remap_pending", gpu, "%s: remapped rows pending" % name))
        if health.get("remapped_rows_failure"):
            flags.append(("row_remap_failed", gpu, "%s: row remapping failed" % name))
    return flags


def health_flags(gpus):
    """What an operator must look at on a node's GPUs, one line per finding."""
    return [line for dummy, dummy_gpu, line in _coded_flags(gpus)]


def _counted_lines(lines):
    """Lines in order, the same line repeated said once as '3 x line'."""
    order, counts = [], {}
    for line in lines:
        if line not in counts:
            order.append(line)
            counts[line] = 0
        counts[line] += 1
    return [("%d x %s" % (counts[line], line)) if counts[line] > 1 else line for line in order]


def _problem_line(problem):
    return problem.get("message") or nh.problem_text(problem)


def _health_lines(health, gpus):
    """The node's health problems as the facts word them, then the findings they do not already say: a
    finding of a kind the problems name, or a GPU fault of a GPU a problem names, is not said twice."""
    lines = _counted_lines(_problem_line(problem) for problem in health["problems"])
    covered = set(health["codes"]) & set(_FLAG_CODES)
    for code, gpu, line in _coded_flags(gpus):
        if code is None and _problems_of(health["problems"], gpu.get("pci_address"), gpu.get("index")):
            continue
        if code is not None and code in covered:
            continue
        lines.append(line)
    return lines


def xid_text(event):
    """'Xid 79 (GPU has fallen off the bus) x2, fatal'."""
    count = event.get("count") or 0
    return "Xid %s (%s)%s%s" % (event.get("xid"), event.get("name") or "not in the catalog",
                                " x%d" % count if count > 1 else "", ", fatal" if event.get("fatal") else "")


def fabric_text(fabric):
    """'completed, success'; 'not supported'; None when the facts say nothing of a fabric."""
    fabric = fabric or {}
    state = fabric.get("state")
    if not state:
        return None
    words = [str(state).replace("_", " ")]
    if fabric.get("status"):
        words.append(str(fabric["status"]))
    if fabric.get("health"):
        words.append("health %s" % fabric["health"])
    return ", ".join(words)


def _problems_of(problems, address, index):
    return [problem for problem in problems
            if (address and problem.get("pci_address") == address)
            or (problem.get("pci_address") is None and index is not None and problem.get("gpu_index") == index)]


def gpu_health(facts):
    """Per GPU of a node, then per lost GPU the facts list apart: index, name, PCI address, health, problems,
    XIDs and fabric. A GPU the driver still lists but names as lost (NVML's GPU_IS_LOST) is said once, lost."""
    facts = facts or {}
    health = nh.node_health(facts)
    known = health["status"] != "unknown"
    lost = list(facts.get("lost_gpus") or [])
    rows = []
    for gpu in facts.get("gpus") or []:
        address, index = gpu.get("pci_address"), gpu.get("index")
        mine = [entry for entry in lost if (address and entry.get("pci_address") == address)
                or (entry.get("pci_address") is None and index is not None and entry.get("gpu_index") == index)]
        for entry in mine:
            lost.remove(entry)
        problems = _problems_of(health["problems"], address, index)
        status = "lost" if mine else (("unhealthy" if problems else "healthy") if known else "unknown")
        rows.append({
            "index": index, "name": gpu.get("name") or "unknown GPU", "pci_address": address,
            "status": status, "severity": "bad" if mine else HEALTH_SEVERITY[status],
            "problems": _counted_lines([_problem_line(problem) for problem in problems]
                                       or [entry.get("message") or "lost" for entry in mine]),
            "xids": [xid_text(event) for event in gpu.get("xids") or []], "fabric": fabric_text(gpu.get("fabric"))})
    for entry in lost:
        address = entry.get("pci_address")
        events = [event for event in facts.get("xid_events") or []
                  if address and event.get("pci_address") == address and event.get("gpu_index") is None]
        rows.append({
            "index": entry.get("gpu_index"), "name": "lost", "pci_address": address, "status": "lost",
            "severity": "bad", "problems": [entry.get("message") or "lost"], "xids": [xid_text(e) for e in events],
            "fabric": None})
    return rows


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


def _row(node, value, cluster=None):
    facts, state, message = _facts_of(node, value)
    gpus = (facts or {}).get("gpus") or []
    labels = _labels(facts) if facts is not None else {}
    health = nh.node_health(facts)
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
        "health": _health_lines(health, gpus),
        "health_status": health["status"],
        "health_severity": HEALTH_SEVERITY[health["status"]],
        "health_problems": health["text"],
        "gpu_health": gpu_health(facts) if facts is not None else [],
        "labels": labels,
        "labels_brief": _labels_brief(labels),
        "driver_drift": False,
        "driver_basis": None,
        "driver_expected": None,
        "driver_drift_text": None,
        "driver_branch": None,
        "driver_end_of_life": None,
        "cuda_shortfalls": [],
        "links": {},
    }
    row["cluster"] = _cluster_row(node, facts, cluster or _cluster_context(None))
    return row


# ---- the cluster: what each node advertises, its last smoke verdict ---------------------

def _plain(value):
    """A quantity as the API serialises it ("2") -> 2; other forms ("500m", "1k") stay text."""
    text = str(value)
    return int(text) if text.isdigit() else text


def when_text(stamp):
    """'2026-11-23T15:40:12Z' -> '2026-11-23 15:40 UTC'; other forms stay as they are; None stays None."""
    if not stamp:
        return None
    match = _ISO_TIME_RE.match(str(stamp))
    return "%s %s UTC" % (match.group(1), match.group(2)) if match else str(stamp)


def _results_hosts(value, name="the results file"):
    """(host -> entry, problem) from the results' text or data, or from the ConfigMap that holds them (the object,
    or kubernetes.core.k8s_info's answer for it: none found is no results yet); the problem is a sentence or None."""
    if isinstance(value, dict) and "hosts" not in value:
        if value.get("unreachable") or value.get("failed") or value.get("skipped"):
            return {}, "%s could not be read: %s" % (
                name, value.get("msg") or ("skipped" if value.get("skipped") else "no message"))
        if "resources" in value:
            found = value.get("resources") or []
            value = found[0] if found and isinstance(found, list) else None
        if isinstance(value, dict) and (value.get("kind") == "ConfigMap" or "metadata" in value):
            value, problem = cr.configmap_text(value, name)
            if problem:
                return {}, problem
    return cr.results_hosts(value, name)


def cluster_results(previous, device_plugin=None, smoke_test=None, time=None, dra=None):
    """The results file site.yml keeps for the fleet report, with this run's rows merged in.

    ``previous``: the file's text or data, or empty (a file that is not ours is
    replaced). ``device_plugin``: gpu_device_plugin_report rows; ``smoke_test``:
    gpu_smoke_test_report rows; ``dra``: gpu_dra_driver_report rows (what each
    DRA node publishes, kept as counts under ``publishes``); ``time``: when they
    were taken (ISO 8601, UTC).
    Per host, each part keeps its last row with its time; a smoke row without a
    verdict (``not run``: check mode, a stage that never ran) changes nothing, nor
    does a row of a host the run left out (``excluded``: outside --limit, unreachable).
    The ``dra`` part is optional in format 1: a file written before it has none, and
    a writer that does not know it keeps it as it is. The merge itself is
    module_utils/cluster_results.py's, which the ConfigMap store shares.
    """
    try:
        return cr.merged_results(previous, device_plugin, smoke_test, time, dra)
    except ValueError as error:
        raise AnsibleFilterError(str(error)) from None


def _cluster_context(cluster):
    """What report.yml gathered of the cluster, checked and indexed once for every row."""
    if cluster is None:
        cluster = {}
    if not isinstance(cluster, dict):
        raise AnsibleFilterError(
            "fleet_report: cluster must be a dict (api_host, nodes, node_names, results, results_file), got %s"
            % type(cluster).__name__)
    api_host = cluster.get("api_host")
    answer = cluster.get("nodes")
    by_name = {}
    if not api_host:
        state, message = "none", ("no Kubernetes API host in the inventory "
                                  "(kube_control_plane, or gpufleet_kube_api_host)")
    elif answer is None:
        state, message = "not_read", "the Nodes were not read through %s" % api_host
    elif isinstance(answer, dict) and answer.get("unreachable"):
        state, message = "not_read", "%s could not be reached: %s" % (
            api_host, answer.get("msg") or answer["unreachable"])
    elif isinstance(answer, dict) and (answer.get("failed") or answer.get("skipped")):
        state, message = "not_read", "reading the Nodes through %s failed: %s" % (
            api_host, answer.get("msg") or ("skipped" if answer.get("skipped") else "no message"))
    else:
        resources = answer.get("resources") if isinstance(answer, dict) else answer
        if not isinstance(resources, list):
            raise AnsibleFilterError(
                "fleet_report: cluster.nodes must be kubernetes.core.k8s_info's result for kind Node, or its "
                "resources; got %r" % (answer,))
        for node in resources:
            name = ((node or {}).get("metadata") or {}).get("name")
            if name:
                by_name[name] = node
        state, message = "read", "%d Nodes read through %s" % (len(by_name), api_host)
    results_file = cluster.get("results_file") or "the results file"
    results, problem = _results_hosts(cluster.get("results"), results_file)
    return {
        "state": state,
        "message": message,
        "api_host": api_host or None,
        "nodes": by_name,
        "node_names": cluster.get("node_names") or {},
        "dra_label": cluster.get("dra_label") or DRA_NODE_LABEL,
        "results": results,
        "results_file": cluster.get("results_file") or None,
        "results_problem": problem,
    }


def _node_status(node):
    """'Ready', 'NotReady (reason)', with ', cordoned' when unschedulable."""
    conditions = ((node.get("status") or {}).get("conditions")) or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        text = "no Ready condition"
    elif ready.get("status") == "True":
        text = "Ready"
    else:
        text = "NotReady (%s)" % (ready.get("reason") or ready.get("message") or ready.get("status"))
    if (node.get("spec") or {}).get("unschedulable"):
        text += ", cordoned"
    return text


def _gating(node):
    """What the health gating (filter node_health_plan) left on a Node: ('gpu-health=unhealthy (gpu_lost), tainted
    NoSchedule', severity), or (None, 'info') when it left nothing."""
    labels = ((node.get("metadata") or {}).get("labels")) or {}
    taints = [taint for taint in ((node.get("spec") or {}).get("taints")) or [] if taint.get("key") == nh.TAINT_KEY]
    words = []
    if nh.HEALTH_LABEL in labels:
        words.append("gpu-health=%s%s" % (labels[nh.HEALTH_LABEL], " (%s)" % labels[nh.REASON_LABEL]
                                          if labels.get(nh.REASON_LABEL) else ""))
    if taints:
        words.append("tainted %s" % ", ".join(
            "%s%s" % (taint.get("effect"), "=" + taint["value"] if taint.get("value") else "") for taint in taints))
    if not words:
        return None, "info"
    sick = taints or labels.get(nh.HEALTH_LABEL) == "unhealthy"
    return ", ".join(words), "bad" if sick else ("ok" if labels.get(nh.HEALTH_LABEL) == "healthy" else "info")


def _resources_text(resources):
    return ", ".join("%s: %s" % (name, resources[name]) for name in sorted(resources))


def _recorded_path(recorded):
    """The path site.yml last checked a host on: the newer of its device plugin and DRA rows (their
    times are ISO 8601 in UTC); None when it recorded neither."""
    plugin, dra = recorded.get("device_plugin"), recorded.get("dra")
    if dra and (not plugin or str(dra.get("time") or "") >= str(plugin.get("time") or "")):
        return "dra"
    return "device_plugin" if plugin else None


def _count_text(publishes):
    """[{type, count}, ...] -> '1 GPU, 7 MIG devices'; '' for nothing."""
    counts, order = {}, []
    for kind in publishes or []:
        name = {"gpu": "GPU", "mig": "MIG device"}.get(kind.get("type"), "%s device" % kind.get("type"))
        if name not in counts:
            counts[name] = 0
            order.append(name)
        counts[name] += int(kind.get("count") or 0)
    return ", ".join(_plural(counts[name], name) for name in order)


def _models_text(publishes):
    """'8 x NVIDIA H100 80GB HBM3'; 'NVIDIA A100-SXM4-80GB MIG: 7 x 1g.10gb' (x as the multiplication sign)."""
    parts = []
    for kind in publishes or []:
        product = kind.get("product") or "unknown model"
        if kind.get("type") == "mig":
            part = "%d \u00d7 %s" % (kind.get("count") or 0, kind.get("profile") or "unknown profile")
            if parts and parts[-1][0] == (product, "mig"):
                parts[-1][1].append(part)
            else:
                parts.append(((product, "mig"), [part]))
        else:
            parts.append(((product, kind.get("type")), ["%d \u00d7 %s%s" % (
                kind.get("count") or 0, product, "" if kind.get("type") == "gpu" else " (%s)" % kind.get("type"))]))
    return "; ".join("%s MIG: %s" % (key[0], ", ".join(words)) if key[1] == "mig" else words[0]
                     for key, words in parts)


def _dra_said(check):
    """(sentence, severity) for a DRA node's recorded row (gpu_dra_driver_report, as cluster_results keeps it)."""
    publishes = check.get("publishes") or []
    if check.get("ok"):
        counted = _count_text(publishes) or "no devices"
        return "publishes %s%s" % (counted, " (%s)" % _models_text(publishes) if publishes else ""), "ok"
    message = check.get("message") or "publishes less than its hardware has"
    published, expected = check.get("published") or 0, check.get("expected") or 0
    if published and expected:
        message = "publishes %d of %d devices: %s" % (published, expected, message)
    return message, "bad"


def _cluster_row(host, facts, context):
    node_name = str(context["node_names"].get(host) or host)
    recorded = context["results"].get(host) or {}
    out = {
        "node": node_name,
        "advertised": {},
        "advertised_source": None,
        "advertised_time": None,
        "advertises": None,
        "advertises_severity": "info",
        "node_status": None,
        "path": None,
        "path_source": None,
        "path_text": "unknown",
        "dra": None,
        "dra_ok": None,
        "dra_severity": "info",
        "dra_published": None,
        "dra_expected": None,
        "dra_publishes": [],
        "dra_time": None,
        "smoke_ok": None,
        "smoke_tested": None,
        "smoke": None,
        "smoke_detail": None,
        "smoke_time": None,
        "smoke_severity": "info",
        "gating": None,
        "gating_severity": "info",
    }
    label = context["dra_label"]
    node = context["nodes"].get(node_name) if context["state"] == "read" else None
    # The node's path to its GPUs: its Node's label now when the API was read, else what site.yml last checked.
    recorded_path = _recorded_path(recorded)
    if node is not None:
        labels = ((node.get("metadata") or {}).get("labels")) or {}
        out["path"] = "dra" if labels.get(label) == "true" else "device_plugin"
        out["path_source"] = "api"
    elif recorded_path:
        out["path"], out["path_source"] = recorded_path, "recorded"
    out["path_text"] = PATH_TEXT.get(out["path"], "unknown")
    # What the node advertises: its Node now when the API was read, else what site.yml saw.
    if context["state"] == "read":
        if node is None:
            out["advertises"] = "no Node named %s in the cluster" % node_name
            out["advertises_severity"] = "warn"
        else:
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            out["advertised"] = dict((key, _plain(value)) for key, value in allocatable.items()
                                     if key.startswith(RESOURCE_PREFIX))
            out["advertised_source"] = "api"
            out["node_status"] = _node_status(node)
            out["gating"], out["gating_severity"] = _gating(node)
            gpus = len((facts or {}).get("gpus") or [])
            # What the node should advertise, as site.yml's device plugin check worked it out from the
            # facts and the node's config; the report has neither config nor the role's rules.
            check = recorded.get("device_plugin") or {}
            short = ["%s=%s" % (name, count) for name, count in sorted((check.get("expected") or {}).items())
                     if isinstance(count, int) and isinstance(out["advertised"].get(name, 0), int)
                     and out["advertised"].get(name, 0) < count]
            advertising = any(value not in (0, "0") for value in out["advertised"].values())
            if out["path"] == "dra":
                # Its GPUs are the DRA driver's: GPUs or MIG devices the device plugin advertises there are a second
                # claim on them (other nvidia.com/ resources, a NIC's for one, are not).
                if any(value not in (0, "0") for name, value in out["advertised"].items() if _GPU_RESOURCE_RE.match(name)):
                    out["advertises"] = "%s, though the node is on the DRA path (%s=true)" % (
                        _resources_text(out["advertised"]), label)
                    out["advertises_severity"] = "bad"
                elif advertising:
                    out["advertises"] = "%s (no GPU resource: DRA path)" % _resources_text(out["advertised"])
                else:
                    out["advertises"] = "no %s resource (DRA path)" % RESOURCE_PREFIX
            elif short:
                out["advertises"] = "%s; its hardware gives %s (%s, site.yml's check)" % (
                    _resources_text(out["advertised"]) or "no %s resource" % RESOURCE_PREFIX, ", ".join(short),
                    check.get("basis") or "as expected")
                out["advertises_severity"] = "bad"
            elif advertising:
                out["advertises"] = _resources_text(out["advertised"])
                out["advertises_severity"] = "ok" if out["node_status"] == "Ready" else "warn"
            elif (facts or {}).get("state") == "ok" and gpus:
                out["advertises"] = "no %s resource, though nvml_facts sees %s" % (
                    RESOURCE_PREFIX, _plural(gpus, "GPU"))
                out["advertises_severity"] = "bad"
            else:
                out["advertises"] = "no %s resource" % RESOURCE_PREFIX
    elif out["path"] == "dra":
        out["advertises"] = "none expected (DRA path)"
    elif recorded.get("device_plugin"):
        check = recorded["device_plugin"]
        out["advertised"] = dict((key, _plain(value)) for key, value in (check.get("advertised") or {}).items())
        out["advertised_source"] = "recorded"
        out["advertised_time"] = when_text(check.get("time"))
        if check.get("ok") and out["advertised"]:
            out["advertises"] = _resources_text(out["advertised"])
            out["advertises_severity"] = "ok"
        else:
            out["advertises"] = check.get("message") or "no %s resource" % RESOURCE_PREFIX
            out["advertises_severity"] = "ok" if check.get("ok") else "bad"
    else:
        out["advertises"] = "no cluster in the inventory" if context["state"] == "none" else "cluster not read"

    # What a DRA node publishes, as site.yml's check over its ResourceSlices last saw it.
    check = recorded.get("dra")
    if out["path"] == "dra" and check:
        out["dra"], out["dra_severity"] = _dra_said(check)
        out["dra_ok"] = bool(check.get("ok"))
        out["dra_published"], out["dra_expected"] = check.get("published"), check.get("expected")
        out["dra_publishes"] = list(check.get("publishes") or [])
        out["dra_time"] = when_text(check.get("time"))
        if out["dra_ok"] and out["node_status"] not in (None, "Ready"):
            out["dra_severity"] = "warn"
    elif out["path"] == "dra":
        out["dra"] = "nothing recorded of what it publishes (site.yml's DRA check did not run%s)" % (
            " or failed" if context["results_problem"] is None else ": %s" % context["results_problem"])
        out["dra_severity"] = "warn"
    elif recorded_path == "dra":
        # Checked on the DRA path, its Node no longer labelled for the DRA driver's kubelet plugin.
        out["dra"] = "its Node has no %s=true, though site.yml's DRA check saw it on the DRA path" % label
        out["dra_severity"] = "warn"
        out["dra_time"] = when_text(check.get("time"))

    smoke = recorded.get("smoke_test")
    if smoke:
        detail = smoke.get("detail") or []
        out["smoke_ok"] = smoke.get("ok")
        out["smoke_tested"] = smoke.get("tested")
        out["smoke"] = smoke.get("verdict") or ("passed" if smoke.get("ok") else "not run")
        out["smoke_time"] = when_text(smoke.get("time"))
        if smoke.get("ok") is False:
            out["smoke_severity"] = "bad"
            out["smoke_detail"] = detail[-1] if detail else None
        elif smoke.get("tested") is False:
            out["smoke_severity"] = "warn"
        elif smoke.get("ok"):
            out["smoke_severity"] = "ok"
            out["smoke_detail"] = detail[0] if detail else None
    else:
        out["smoke"] = "no verdict recorded"
        out["smoke_detail"] = context["results_problem"]
    return out


def _paths_summary(rows):
    """Nodes by path: [{path, text, count}], device plugin first, then DRA, then the nodes of no known path."""
    counts = {}
    for row in rows:
        counts[row["cluster"]["path"]] = counts.get(row["cluster"]["path"], 0) + 1
    return [{"path": path, "text": PATH_TEXT.get(path, "unknown"), "count": counts[path]}
            for path in ("device_plugin", "dra", None) if counts.get(path)]


def _dra_summary(rows):
    """The nodes on the DRA path: how many, how many publish what their hardware has, what they publish
    together, the nodes with a problem, and all that as one sentence."""
    dra = [row["cluster"] for row in rows if row["cluster"]["path"] == "dra"]
    publishes = {}
    order = []
    for cluster in dra:
        for kind in cluster["dra_publishes"]:
            name = kind.get("type")
            if name not in publishes:
                publishes[name] = 0
                order.append(name)
            publishes[name] += int(kind.get("count") or 0)
    counted = [{"type": name, "count": publishes[name]} for name in sorted(
        order, key=lambda name: ({"gpu": 0, "mig": 1}.get(name, 2), str(name)))]
    ok = sum(1 for cluster in dra if cluster["dra_ok"])
    problems = [row["node"] for row in rows if row["cluster"]["dra_severity"] in ("bad", "warn")]
    if dra:
        text = "%s on the DRA path, %d publishing what %s hardware has; %s published" % (
            _plural(len(dra), "node"), ok, "its" if len(dra) == 1 else "their", _count_text(counted) or "nothing")
    else:
        text = "no node on the DRA path"
    if problems:
        text += "; to look at: %s" % ", ".join(problems)
    return {"nodes": len(dra), "ok": ok, "publishes": counted,
            "problems": problems, "failed": sum(1 for cluster in dra if cluster["dra_severity"] == "bad"),
            "text": text}


def _cluster_summary(rows, context):
    totals = {}
    counts = {}
    sources = set()
    for row in rows:
        cluster = row["cluster"]
        if cluster["advertised_source"]:
            sources.add(cluster["advertised_source"])
        for name, value in cluster["advertised"].items():
            if isinstance(value, int):
                totals[name] = totals.get(name, 0) + value
                counts[name] = counts.get(name, 0) + (1 if value else 0)
    smoke = {"passed": 0, "failed": 0, "not_tested": 0, "no_verdict": 0}
    for row in rows:
        cluster = row["cluster"]
        if cluster["smoke_ok"] is True:
            smoke["passed"] += 1
        elif cluster["smoke_ok"] is False:
            smoke["failed"] += 1
        elif cluster["smoke_tested"] is False:
            smoke["not_tested"] += 1
        else:
            smoke["no_verdict"] += 1
    return {
        "state": context["state"],
        "message": context["message"],
        "api_host": context["api_host"],
        "advertised": [{"resource": name, "count": totals[name], "nodes": counts[name]} for name in sorted(totals)],
        "advertised_source": "api" if "api" in sources else ("recorded" if sources else None),
        "paths": _paths_summary(rows),
        "dra": _dra_summary(rows),
        "smoke": smoke,
        "results_file": context["results_file"],
        "results_problem": context["results_problem"],
    }


def _counted(counts, order, key):
    return [{key: name, "count": counts[name]} for name in order]


def _pins(pins):
    """host -> (version, branch) the inventory pins (gpu_driver_version, gpu_driver_branch), '' for none."""
    if pins is None:
        return {}
    if isinstance(pins, list) and all(isinstance(item, (list, tuple)) and len(item) == 3 for item in pins):
        # [host, version, branch] triples, as zip gives them.
        pins = dict((item[0], {"version": item[1], "branch": item[2]}) for item in pins)
    if not isinstance(pins, dict):
        raise AnsibleFilterError(
            "fleet_report: pins must be a dict of host -> {version, branch} (gpu_driver_version, gpu_driver_branch), "
            "or a list of [host, version, branch]; got %r" % (pins,))
    out = {}
    for host, pin in pins.items():
        pin = pin or {}
        if not isinstance(pin, dict):
            raise AnsibleFilterError("fleet_report: the pin of %s must be {version, branch}, got %r" % (host, pin))
        version = dp.driver_upstream(str(pin.get("version") or "").strip())
        branch = str(pin.get("branch") or "").strip()
        out[str(host)] = (version, branch)
    return out


def _drift(rows, pins):
    """Each row's driver drift against its pin (gpu_driver_version, else gpu_driver_branch) and, for a row with no pin,
    against the version most nodes run (the newest on a tie); and the summary's words for it."""
    drivers = {}
    for row in rows:
        if row["driver_version"]:
            drivers.setdefault(row["driver_version"], []).append(row["node"])
    # Newest version first; the baseline is the version most nodes run (the newest on a tie).
    versions = sorted(drivers, key=natural_key, reverse=True)
    baseline = max(versions, key=lambda v: len(drivers[v])) if versions else None
    # "most nodes" when one version leads, "newest" when the leaders tie.
    leaders = [v for v in versions if len(drivers[v]) == len(drivers[baseline])] if versions else []
    baseline_reason = "most nodes" if len(leaders) == 1 else "newest"
    for row in rows:
        version, branch = pins.get(row["node"], ("", ""))
        running = row["driver_version"]
        if version:
            row["driver_basis"] = "version"
            row["driver_expected"] = version
            row["driver_drift"] = bool(running and running != version)
            row["driver_drift_text"] = "pinned %s (gpu_driver_version)" % version
        elif branch:
            row["driver_basis"] = "branch"
            row["driver_expected"] = branch
            row["driver_drift"] = bool(running and dp.driver_branch_of(running) != branch)
            row["driver_drift_text"] = "pinned branch %s (gpu_driver_branch)" % branch
        else:
            row["driver_basis"] = "majority"
            row["driver_expected"] = baseline
            row["driver_drift"] = bool(running and len(versions) > 1 and running != baseline)
            row["driver_drift_text"] = "%s, %s (nothing pinned)" % (
                baseline, "the version most nodes run" if baseline_reason == "most nodes"
                else "the newest of the versions most nodes run")
    # Counted over the nodes whose driver answered: the others have no version to measure.
    pinned = [row["node"] for row in rows if row["driver_version"] and row["driver_basis"] != "majority"]
    unpinned = [row["node"] for row in rows if row["driver_version"] and row["driver_basis"] == "majority"]
    if pinned and unpinned:
        basis, text = "mixed", "the inventory's pin on %s, the version most nodes run (%s) on %s with nothing pinned" % (
            _plural(len(pinned), "node"), baseline or "none", _plural(len(unpinned), "node"))
    elif pinned:
        basis, text = "pinned", "each node's pin in the inventory (gpu_driver_version, else gpu_driver_branch)"
    else:
        basis, text = "majority", "the version most nodes run (%s, %s), nothing being pinned in the inventory" % (
            baseline or "none", baseline_reason)
    driver_versions = [
        {"version": v, "count": len(drivers[v]), "nodes": drivers[v], "baseline": v == baseline} for v in versions
    ]
    return {
        "driver_versions": driver_versions,
        "driver_baseline": baseline,
        "driver_baseline_reason": baseline_reason if versions else None,
        "driver_drift": any(row["driver_drift"] for row in rows),
        "driver_drift_nodes": [row["node"] for row in rows if row["driver_drift"]],
        "driver_drift_basis": basis,
        "driver_drift_basis_text": text,
    }


def _today(time):
    """'2026-12-07T18:15:49Z' -> '2026-12-07'; the time must be ISO 8601 in UTC, to the second."""
    if not isinstance(time, str) or not _UTC_RE.match(time):
        raise AnsibleFilterError(
            "fleet_report: time must be the time of writing, ISO 8601 in UTC (YYYY-MM-DDTHH:MM:SSZ), got %r" % (time,))
    return time[:10]


def _cuda_requirements(cuda):
    """[{what, version}] of the CUDA versions the fleet must serve, from smoke-test stage-like dicts
    ({name, image, require_cuda, require_variable}, filter stage_cuda_requirement); unknown ones left out."""
    if cuda is None:
        return []
    if not isinstance(cuda, list) or not all(isinstance(item, dict) for item in cuda):
        raise AnsibleFilterError(
            "fleet_report: cuda must be a list of {name, image, require_cuda, require_variable}, got %r" % (cuda,))
    wanted = []
    for item in cuda:
        version = st.stage_cuda_requirement(item)
        if version:
            what = " ".join(str(word) for word in (item.get("name"), item.get("image")) if word) or "the workload"
            wanted.append({"what": what, "version": version})
    return wanted


def _end_of_life_branches(rows):
    """[{branch, nodes}] of the branches past their end of life, oldest first."""
    branches = {}
    for row in rows:
        if row["driver_end_of_life"]:
            branches.setdefault(row["driver_branch"], []).append(row["node"])
    return [{"branch": branch, "nodes": branches[branch]} for branch in sorted(branches, key=natural_key)]


def _digest(report, layout):
    text = json.dumps({"report": report, "layout": layout}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fleet_report(nodes, cluster=None, pins=None, lifecycle=None, cuda=None, time=None, previous=None, guide=None,
                 layout=None):
    """Rows per node and the fleet summary, from ``{node: facts}``.

    Each value is ``ansible_facts['nvidia']``, the registered result of
    gpufleet.nvidia.nvml_facts (unreachable and failed results included), a
    dict ``{"unreachable": "reason"}``, or null for a host without facts.
    ``cluster`` is what report.yml gathered of the cluster: ``api_host`` (the
    host the Nodes were read through, empty for none), ``nodes`` (its
    kubernetes.core.k8s_info result for kind Node), ``node_names`` (host ->
    Kubernetes node name), ``results`` (the text of the file site.yml keeps,
    see cluster_results) and ``results_file`` (its path, for messages).
    ``pins``: host -> {version, branch}, its gpu_driver_version and
    gpu_driver_branch (or [host, version, branch] triples); drift is measured against them, against the version most
    nodes run only for a host with neither. ``lifecycle``: the gpu_driver role's
    branch lifecycle table (filter driver_end_of_life), judged on the day of
    ``time``. ``cuda``: the CUDA versions the drivers must serve, as smoke-test
    stages (filter stage_cuda_requirement). ``time``: the time of writing (ISO
    8601, UTC); ``previous``: the text of the Markdown report written before,
    whose time of writing is kept when it holds the same report (``layout``
    names the templates, so that another layout is another report). ``guide``:
    the troubleshooting guide each flagged problem links to.
    """
    if not isinstance(nodes, dict):
        raise AnsibleFilterError(
            "fleet_report expects a dict of node name -> ansible_facts['nvidia'], got %s" % type(nodes).__name__)
    context = _cluster_context(cluster)
    pinned = _pins(pins)
    today = _today(time) if time is not None or lifecycle is not None else None
    wanted = _cuda_requirements(cuda)
    guide = guide or TROUBLESHOOTING_URL
    links = dict((name, "%s#%s" % (guide, anchor)) for name, anchor in TROUBLESHOOTING_SECTIONS.items())
    rows = []
    for node in sorted(nodes, key=natural_key):
        row = _row(str(node), nodes[node], context)
        facts = _facts_of(str(node), nodes[node])[0]
        branch = dp.driver_branch_of(row["driver_version"])
        row["driver_branch"] = branch
        row["driver_end_of_life"] = (dp.driver_end_of_life(branch, lifecycle, today, facts) or None
                                     if lifecycle and branch else None)
        # Only the nodes whose driver says its CUDA version: the state of the others already says why it is unknown.
        row["cuda_shortfalls"] = [
            said.split(": ", 1)[1] for item in wanted if row["cuda_version"]
            for said in st.cuda_shortfalls({str(node): facts}, item["version"], item["what"])]
        rows.append(row)

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

    drift = _drift(rows, pinned)

    cudas = {}
    for row in rows:
        if row["cuda_version"]:
            cudas[row["cuda_version"]] = cudas.get(row["cuda_version"], 0) + 1
    cuda_versions = _counted(cudas, sorted(cudas, key=natural_key, reverse=True), "version")

    for row in rows:
        cluster_row = row["cluster"]
        row["links"] = {
            "state": links["states"] if row["severity"] in ("warn", "bad") else None,
            "health": links["states"] if row["health"] or row["health_status"] == "unhealthy" else None,
            "driver": links["roles"] if row["driver_drift"] or row["driver_end_of_life"] else None,
            "cuda": links["roles"] if row["cuda_shortfalls"] else None,
            "cluster": links["roles"] if "bad" in (cluster_row["advertises_severity"], cluster_row["smoke_severity"],
                                                   cluster_row["dra_severity"], cluster_row["gating_severity"])
            or "warn" in (cluster_row["advertises_severity"], cluster_row["smoke_severity"],
                          cluster_row["dra_severity"]) else None,
        }

    flagged = [row["node"] for row in rows if row["health"]]
    healths = {}
    for row in rows:
        healths[row["health_status"]] = healths.get(row["health_status"], 0) + 1
    nodes_by_health = [{"status": status, "count": healths[status], "severity": HEALTH_SEVERITY[status]}
                       for status in HEALTH_ORDER if status in healths]
    summary = {
        "nodes": len(rows),
        "gpus": sum(row["gpu_count"] for row in rows),
        "mig_devices": sum(row["mig"]["device_count"] for row in rows),
        "nodes_ok": states.get("ok", 0),
        "nodes_by_state": nodes_by_state,
        "gpus_by_model": gpus_by_model,
        "cuda_versions": cuda_versions,
        "cuda_required": wanted,
        "cuda_shortfall_nodes": [row["node"] for row in rows if row["cuda_shortfalls"]],
        "end_of_life": dp.driver_end_of_life_summary([(row["node"], row["driver_end_of_life"]) for row in rows]),
        "end_of_life_nodes": [row["node"] for row in rows if row["driver_end_of_life"]],
        "end_of_life_branches": _end_of_life_branches(rows),
        "nodes_with_health_flags": flagged,
        "health_flags": sum(len(row["health"]) for row in rows),
        "nodes_by_health": nodes_by_health,
        "unhealthy_nodes": [row["node"] for row in rows if row["health_status"] == "unhealthy"],
        "lost_gpus": sum(1 for row in rows for gpu in row["gpu_health"] if gpu["status"] == "lost"),
        "cluster": _cluster_summary(rows, context),
        "troubleshooting": guide,
        "troubleshooting_links": links,
    }
    summary.update(drift)
    report = {"summary": summary, "rows": rows}
    # The time of writing: this run's, unless the report written before holds the same report (then the file is
    # left as it is, and says when it was written).
    digest = _digest(report, layout)
    found = _WRITTEN_RE.search(previous) if isinstance(previous, str) else None
    written = found.group(1) if found and found.group(2) == digest and _UTC_RE.match(found.group(1)) else time
    summary["written"] = written
    summary["written_text"] = written.replace("T", " ").replace("Z", " UTC") if written else None
    summary["digest"] = digest
    # The day the lifecycle was judged on: the day of writing (a later day that judges the same keeps the file).
    summary["end_of_life_judged"] = written[:10] if lifecycle and written else None
    return report


class FilterModule(object):
    def filters(self):
        return {
            "cluster_results": cluster_results,
        }
