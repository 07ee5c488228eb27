# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: NVIDIA facts (gpufleet.nvidia.nvml_facts) to Kubernetes node labels, and which nodes get them."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

LABEL_PREFIX = "nvidia.com/"
_LABEL_VALUE_MAX = 63
_GFD_DROPPED_CHARS = re.compile(r"[^A-Za-z0-9_. -]")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# Compute capability -> family, as gpu-feature-discovery names it
# (k8s-device-plugin internal/lm/resource.go getArchFamily). That table ends
# at Hopper and says "undefined" beyond; Blackwell (10.x, 12.x) is named here.
_FAMILIES = {
    1: "tesla",
    2: "fermi",
    3: "kepler",
    5: "maxwell",
    6: "pascal",
    9: "hopper",
    10: "blackwell",
    12: "blackwell",
}


def label_value(text):
    """Make ``text`` a valid label value the way gpu-feature-discovery does.

    gpu-feature-discovery drops every character but letters, digits, '-',
    '_', '.' and blanks, then joins the words with '-'. The result is also
    cut to 63 characters and trimmed to start and end alphanumeric, which a
    label value needs.
    """
    value = "-".join(_GFD_DROPPED_CHARS.sub("", str(text)).split())
    value = value[:_LABEL_VALUE_MAX]
    value = re.sub(r"^[^A-Za-z0-9]+", "", value)
    value = re.sub(r"[^A-Za-z0-9]+$", "", value)
    return value


def family(major, minor):
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return _FAMILIES.get(major, "undefined")


def _version_parts(version, count):
    parts = str(version).split(".")
    return (parts + [""] * count)[:count]


def node_labels(facts):
    """Return the gpu-feature-discovery labels that ``facts`` support.

    ``facts`` is ``ansible_facts['nvidia']``. Labels come from the first
    GPU that answered (gpu-feature-discovery labels a node by one product);
    a host without a readable GPU gets no labels. Every value is a valid
    Kubernetes label value.
    """
    if not isinstance(facts, dict):
        raise AnsibleFilterError(
            "node_labels expects ansible_facts['nvidia'] (a dict from gpufleet.nvidia.nvml_facts), "
            "got %s: %r" % (type(facts).__name__, facts))
    if "gpus" not in facts:
        raise AnsibleFilterError(
            "node_labels expects ansible_facts['nvidia'] from gpufleet.nvidia.nvml_facts; "
            "the value has no 'gpus' key (keys: %s)" % ", ".join(sorted(str(k) for k in facts)))
    gpus = [gpu for gpu in facts.get("gpus") or [] if gpu.get("name") and not gpu.get("error")]
    if not gpus:
        return {}

    first = gpus[0]
    labels = {
        "gpu.present": "true",
        "gpu.product": label_value(first["name"]),
        "gpu.count": str(len(gpus)),
        "mig.capable": "true" if any((gpu.get("mig") or {}).get("capable") for gpu in gpus) else "false",
    }
    if first.get("memory_total_mib"):
        labels["gpu.memory"] = str(int(first["memory_total_mib"]))

    capability = first.get("compute_capability")
    if capability:
        major, minor = (int(part) for part in _version_parts(capability, 2))
        labels["gpu.family"] = family(major, minor)
        labels["gpu.compute.major"] = str(major)
        labels["gpu.compute.minor"] = str(minor)

    driver = facts.get("driver_version")
    if driver:
        major, minor, revision = _version_parts(driver, 3)
        labels["cuda.driver-version.major"] = major
        labels["cuda.driver-version.minor"] = minor
        labels["cuda.driver-version.revision"] = revision
        labels["cuda.driver-version.full"] = str(driver)

    cuda = facts.get("cuda_driver_version")
    if cuda:
        major, minor = _version_parts(cuda, 2)
        labels["cuda.runtime-version.major"] = major
        labels["cuda.runtime-version.minor"] = minor
        labels["cuda.runtime-version.full"] = "%s.%s" % (major, minor)

    result = {}
    for key, value in labels.items():
        value = label_value(value)
        if not _LABEL_VALUE_RE.match(value):
            raise AnsibleFilterError("node_labels built an invalid value %r for label %s" % (value, key))
        result[LABEL_PREFIX + key] = value
    return result


NOT_GATHERED = ("no NVIDIA facts from this run (outside --limit, unreachable, or gpufleet.nvidia.nvml_facts "
                "failed or did not run on it)")


def _plan_row(row):
    """(labels, None) for a host to label, or (None, reason) for one to leave alone."""
    host = row.get("host")
    facts = row.get("facts")
    if facts is None:
        return None, NOT_GATHERED
    if not isinstance(facts, dict) or "state" not in facts or "gpus" not in facts:
        return None, ("ansible_facts['nvidia'] is not what gpufleet.nvidia.nvml_facts returns (%s)"
                      % ("keys: " + ", ".join(sorted(str(k) for k in facts)) if isinstance(facts, dict)
                         else type(facts).__name__))
    if facts["state"] != "ok":
        message = facts.get("message")
        return None, "NVIDIA state is %s%s" % (facts["state"], ": %s" % message if message else "")
    extra = row.get("node_labels")
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        return None, "gpu_kubelet_node_labels of %s is a %s, not a mapping of label to value" % (
            host, type(extra).__name__)
    try:
        gpu_labels = boolean(row.get("gpu_labels", True), strict=True)
    except TypeError:
        return None, "gpu_kubelet_gpu_labels of %s is %r, not a boolean" % (host, row.get("gpu_labels"))
    try:
        labels = dict(node_labels(facts)) if gpu_labels else {}
    except AnsibleFilterError as err:
        return None, str(err)
    labels.update(extra)
    if not labels:
        return None, ("no labels to set: %s and gpu_kubelet_node_labels is empty"
                      % ("no GPU answered" if gpu_labels else "gpu_kubelet_gpu_labels is false"))
    return labels, None


def node_label_plan(hosts, nodes=None):
    """Split GPU hosts into those whose Node gets its kubelet's labels and those left alone, with why.

    With ``nodes`` (the Node objects of one list of the API: their metadata.name and labels), a host
    whose Node carries every label already is in ``same`` (no request needed: a re-run of a converged
    fleet writes nothing), one whose Node is not in the list is skipped as not in the cluster, and
    ``label`` keeps only the labels that differ.

    ``hosts`` has one dict per GPU host: ``host`` (inventory name), ``node`` (Kubernetes node name),
    ``facts`` (``ansible_facts['nvidia']`` when gpufleet.nvidia.nvml_facts ran on the host in this
    run, else None), ``gpu_labels`` (gpu_kubelet_gpu_labels) and ``node_labels``
    (gpu_kubelet_node_labels). A host is labelled only when its facts say ``state: ok``; the labels
    are the ones gpu_kubelet gives kubelet: node_labels of the facts, then the user's on top.
    One host's missing or broken facts never stop the others.
    """
    if not isinstance(hosts, list):
        raise AnsibleFilterError("node_label_plan expects a list of hosts (dicts with host, node, facts, "
                                 "gpu_labels, node_labels), got %s: %r" % (type(hosts).__name__, hosts))
    plan = {"label": [], "skip": [], "same": []}
    current = None
    if nodes is not None:
        current = dict((((node or {}).get("metadata") or {}).get("name"),
                        ((node or {}).get("metadata") or {}).get("labels") or {}) for node in nodes)
    for row in hosts:
        if not isinstance(row, dict) or not row.get("host"):
            raise AnsibleFilterError("node_label_plan expects each host as a dict with at least 'host', got %r"
                                     % (row,))
        node = row.get("node") or row["host"]
        labels, reason = _plan_row(row)
        if not reason and current is not None and node not in current:
            reason = "not in the cluster (no Node named %s)" % node
        if reason:
            plan["skip"].append({"host": row["host"], "node": node, "reason": reason})
            continue
        entry = {"host": row["host"], "node": node}
        if current is not None:
            labels = dict((key, value) for key, value in labels.items() if current[node].get(key) != str(value))
            if not labels:
                plan["same"].append(entry)
                continue
            # what those labels are now, for --diff
            now = dict((key, current[node][key]) for key in labels if key in current[node])
            entry["before"] = {"metadata": {"labels": now}}
        # name and patch: what gpufleet.nvidia.internal.api_patch sends for it
        entry.update(labels=labels, name=node, patch={"metadata": {"labels": labels}})
        plan["label"].append(entry)
    return plan


class FilterModule(object):
    def filters(self):
        return {"node_label_plan": node_label_plan}
