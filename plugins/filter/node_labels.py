# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: NVIDIA facts (gpufleet.nvidia.nvml_facts) to Kubernetes node labels."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

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


class FilterModule(object):
    def filters(self):
        return {"node_labels": node_labels}
