# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind the gpu_dra_driver role: what each DRA node should publish, and who else holds its GPUs.

NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin)
publishes, for its node, a pool named after the node under the driver ``gpu.nvidia.com``: each
GPU without MIG as a device of type ``gpu``, each MIG device of a GPU in MIG mode as a device of
type ``mig`` (the GPU itself is then not published), with the device's ``uuid``, ``productName``,
MIG ``profile`` and ``parentUUID`` attributes and its ``memory`` capacity in bytes.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation

from ansible.errors import AnsibleFilterError

DRIVER = "gpu.nvidia.com"
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_FACTORS = {None: 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
            "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
# The driver reads memory from NVML; the facts' MiB may come from nvidia-smi, which rounds.
MEMORY_TOLERANCE = Decimal("0.01")
# Problems after which the driver publishes fewer devices (a GPU the driver no longer reads).
_SHORTFALL_PROBLEMS = ("gpu_lost",)


def _bytes(value):
    """Bytes of a resource.Quantity string, or None."""
    match = _QUANTITY.match(str(value or "").strip())
    if not match:
        return None
    try:
        return Decimal(match.group(1)) * _FACTORS[match.group(2)]
    except InvalidOperation:
        return None


def _attribute(device, name, driver=DRIVER):
    attributes = device.get("attributes") or {}
    value = attributes.get(name) or attributes.get("%s/%s" % (driver, name)) or {}
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            return value[kind]
    return None


def _memory_differs(published, facts_mib):
    if published is None or facts_mib is None:
        return False
    expected = Decimal(int(facts_mib)) * 2 ** 20
    return abs(published - expected) > expected * MEMORY_TOLERANCE


def dra_expected(facts):
    """The devices a node with these facts publishes: [{uuid, type, product, memory_mib, profile, parent}]."""
    out = []
    for gpu in (facts or {}).get("gpus") or []:
        if gpu.get("error"):
            continue
        mig = gpu.get("mig") or {}
        if mig.get("current_mode") == "enabled":
            for device in mig.get("devices") or []:
                out.append({"uuid": device.get("uuid"), "type": "mig", "product": gpu.get("name"),
                            "memory_mib": device.get("memory_total_mib"), "profile": device.get("profile"),
                            "parent": gpu.get("uuid")})
            continue
        out.append({"uuid": gpu.get("uuid"), "type": "gpu", "product": gpu.get("name"),
                    "memory_mib": gpu.get("memory_total_mib"), "profile": None, "parent": None})
    return out


def _newest_pool(slices, node, driver):
    """The devices of the node's pool of this driver, newest generation only, and whether it is complete."""
    mine = [s for s in slices or [] if ((s or {}).get("spec") or {}).get("nodeName") == node
            and s["spec"].get("driver") == driver]
    if not mine:
        return None, True
    newest = max(int(((s["spec"].get("pool") or {}).get("generation")) or 0) for s in mine)
    current = [s for s in mine if int(((s["spec"].get("pool") or {}).get("generation")) or 0) == newest]
    count = int(((current[0]["spec"].get("pool") or {}).get("resourceSliceCount")) or 1)
    devices = [d for s in current for d in s["spec"].get("devices") or []]
    return devices, len(current) == count


def _unhealthy(facts):
    health = (facts or {}).get("health") or {}
    if health.get("status") != "unhealthy":
        return None
    codes = []
    for problem in health.get("problems") or []:
        code = problem.get("code") or "unknown"
        if code not in codes:
            codes.append(code)
    return codes if any(code in _SHORTFALL_PROBLEMS for code in codes) else None


def _compare(expected, devices):
    """Problems of what is published against what is expected, and the words for what is published."""
    by_uuid = {}
    for device in devices:
        uuid = _attribute(device, "uuid")
        if uuid:
            by_uuid[uuid] = device
    problems = []
    unknown = [e for e in expected if not e["uuid"]]
    if unknown:
        problems.append("the facts name no UUID for %d device(s)" % len(unknown))
    missing = [e for e in expected if e["uuid"] and e["uuid"] not in by_uuid]
    if missing:
        problems.append("does not publish %s" % ", ".join(
            "%s %s" % (e["type"].upper() if e["type"] == "mig" else "GPU", e["uuid"]) for e in missing))
    for entry in expected:
        device = by_uuid.get(entry["uuid"])
        if device is None:
            continue
        kind = _attribute(device, "type")
        if kind != entry["type"]:
            problems.append("%s is published as type %s, the facts say %s" % (entry["uuid"], kind, entry["type"]))
        product = _attribute(device, "productName")
        if entry["product"] and product != entry["product"]:
            problems.append("%s is published as %r, the facts say %r" % (entry["uuid"], product, entry["product"]))
        if entry["profile"] and _attribute(device, "profile") != entry["profile"]:
            problems.append("%s is published with profile %r, the facts say %r" % (
                entry["uuid"], _attribute(device, "profile"), entry["profile"]))
        memory = _bytes(((device.get("capacity") or {}).get("memory") or {}).get("value"))
        if _memory_differs(memory, entry["memory_mib"]):
            problems.append("%s is published with %d MiB of memory, the facts say %s MiB" % (
                entry["uuid"], int(memory / 2 ** 20), entry["memory_mib"]))
    return problems


def _summary(devices):
    counts = {}
    for device in devices:
        label = "%s %s" % (_attribute(device, "productName") or "unknown model",
                           "MIG " + str(_attribute(device, "profile")) if _attribute(device, "type") == "mig"
                           else "GPU")
        counts[label] = counts.get(label, 0) + 1
    return ", ".join("%d x %s" % (count, label) for label, count in sorted(counts.items())) or "no devices"


def dra_slices_check(slices, hosts, driver=DRIVER):
    """Compare each DRA node's ResourceSlices with its NVIDIA facts.

    ``slices``: ResourceSlice objects from the API. ``hosts``: [{host, node, facts, excluded}] as
    fleet_nodes gives them. Returns one row per host: {host, node, expected, published, ok,
    unhealthy, message, devices} (``excluded`` too for a host left out).
    """
    if not isinstance(hosts, list):
        raise AnsibleFilterError("dra_slices_check: hosts must be a list, got %s" % type(hosts).__name__)
    rows = []
    for entry in hosts:
        row = {"host": entry.get("host"), "node": entry.get("node"), "expected": 0, "published": 0,
               "ok": False, "unhealthy": False, "message": "", "devices": []}
        rows.append(row)
        if entry.get("excluded"):
            row["excluded"] = entry["excluded"]
            row["message"] = "not checked: %s" % entry["excluded"]
            continue
        facts = entry.get("facts") or {}
        if facts.get("state") not in ("ok", "gpu_lost"):
            row["message"] = "cannot say what it should publish: NVIDIA state %s: %s" % (
                facts.get("state") or "not gathered", facts.get("message") or "no facts")
            continue
        expected = dra_expected(facts)
        row["expected"] = len(expected)
        devices, complete = _newest_pool(slices, entry.get("node"), driver)
        if devices is None:
            row["message"] = "publishes no ResourceSlice of driver %s (expected %d device%s)" % (
                driver, len(expected), "" if len(expected) == 1 else "s")
        elif not complete:
            row["message"] = "its pool of driver %s is incomplete (being updated)" % driver
        else:
            row["published"] = len(devices)
            row["devices"] = [{"name": d.get("name"), "uuid": _attribute(d, "uuid"),
                               "type": _attribute(d, "type"), "product": _attribute(d, "productName"),
                               "profile": _attribute(d, "profile"),
                               "memory": ((d.get("capacity") or {}).get("memory") or {}).get("value")}
                              for d in devices]
            problems = _compare(expected, devices)
            if problems:
                row["message"] = "; ".join(problems)
            else:
                row["ok"] = True
                row["message"] = "publishes %s" % _summary(devices)
        codes = _unhealthy(facts)
        if not row["ok"] and codes:
            row["unhealthy"] = True
            row["message"] = "unhealthy (%s), not checked: %s" % (", ".join(codes), row["message"])
    return rows


def dra_device_plugin_nodes(nodes, node_names):
    """The Nodes among ``node_names`` whose kubelet advertises NVIDIA device-plugin resources:
    [{node, resources: {name: count}, words}]. A node is on one path or the other."""
    wanted = set(node_names or [])
    out = []
    for node in nodes or []:
        name = ((node or {}).get("metadata") or {}).get("name")
        if name not in wanted:
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        held = {}
        for key, value in allocatable.items():
            if key == "nvidia.com/gpu" or key.startswith("nvidia.com/mig-") or key.startswith("nvidia.com/gpu."):
                count = _bytes(value)
                if count:
                    held[key] = int(count)
        if held:
            out.append({"node": name, "resources": held, "words": "%s (%s)" % (
                name, ", ".join("%s=%d" % item for item in sorted(held.items())))})
    return out


def _version_numbers(text):
    """``565.57.01`` -> (565, 57, 1); None when the text does not start with a number."""
    numbers = []
    for part in str(text or "").strip().split("."):
        match = re.match(r"^([0-9]+)", part)
        if not match:
            break
        numbers.append(int(match.group(1)))
        if match.group(1) != part:
            break
    return tuple(numbers) or None


def dra_old_drivers(rows, minimum):
    """The hosts of ``rows`` (fleet_nodes' rows: host, facts, excluded) whose NVIDIA driver is older than
    ``minimum`` (``565``: NVIDIA's DRA driver's prerequisite): [{host, driver_version, words}].

    A host without facts (outside --limit, unreachable, unreadable) or whose facts hold no driver version
    (driver not loaded) is not judged here: the role's check of the slices names it."""
    wanted = _version_numbers(minimum)
    if wanted is None:
        raise AnsibleFilterError("dra_old_drivers: the minimum %r is not a driver version such as 565" % (minimum,))
    out = []
    for row in rows or []:
        facts = (row or {}).get("facts")
        if row.get("excluded") or not isinstance(facts, dict):
            continue
        version = facts.get("driver_version")
        numbers = _version_numbers(version)
        if numbers is None or numbers >= wanted:
            continue
        out.append({"host": row.get("host"), "driver_version": str(version),
                    "words": "%s (driver %s)" % (row.get("host"), version)})
    return out


def _gate_on(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "yes", "on", "1")


# NVIDIA's DRA driver's feature gates at the pinned release (sigs.k8s.io/dra-driver-nvidia-gpu v0.5.0,
# pkg/featuregates/featuregates.go) with their defaults, and the logging gates it takes besides
# (k8s.io/component-base/logs/api); gpu-kubelet-plugin refuses any other name at its start.
DRA_FEATURE_GATES = {
    "TimeSlicingSettings": False, "MPSSupport": False, "IMEXDaemonsWithDNSNames": True, "PassthroughSupport": False,
    "DynamicMIG": False, "NVMLDeviceHealthCheck": False, "ComputeDomainCliques": True,
    "CrashOnNVLinkFabricErrors": True, "DeviceMetadata": False, "FabricManagerPartitioning": False,
    "HostManagedIMEXDaemon": False, "DRAListTypeAttributes": False, "ConsumableShares": False,
    "ContextualLogging": True, "LoggingAlphaOptions": False, "LoggingBetaOptions": True,
}
# What ValidateFeatureGates refuses at the plugin's start (v0.5.0): (gate, needs or excludes, other gate).
_DRA_GATE_RULES = (
    ("ComputeDomainCliques", "needs", "IMEXDaemonsWithDNSNames"),
    ("DynamicMIG", "excludes", "PassthroughSupport"),
    ("DynamicMIG", "excludes", "NVMLDeviceHealthCheck"),
    ("DynamicMIG", "excludes", "MPSSupport"),
    ("PassthroughSupport", "excludes", "NVMLDeviceHealthCheck"),
    ("DeviceMetadata", "needs", "PassthroughSupport"),
)
# The gates whose settings only the chart renders (RBAC, mounts, values).
_DRA_HELM_ONLY_GATES = ("ConsumableShares", "DeviceMetadata", "MPSSupport", "PassthroughSupport")


def dra_feature_gate_errors(feature_gates, method="manifests"):
    """What NVIDIA's kubelet plugin would refuse at its start, or the role's manifests cannot serve, in
    ``feature_gates`` (name -> bool, booleans already checked), as sentences naming the gates."""
    if not isinstance(feature_gates, dict):
        raise AnsibleFilterError("dra_feature_gate_errors expects gpu_dra_driver_feature_gates as a dict, got %r"
                                 % (feature_gates,))
    errors = []
    unknown = sorted(name for name in feature_gates if name not in DRA_FEATURE_GATES)
    if unknown:
        errors.append("gpu_dra_driver_feature_gates has %s, which NVIDIA's DRA driver does not know (its gates: %s)"
                      % (", ".join(json.dumps(name) for name in unknown), ", ".join(sorted(DRA_FEATURE_GATES))))
    enabled = dict(DRA_FEATURE_GATES, **dict((name, bool(value)) for name, value in feature_gates.items()
                                             if name in DRA_FEATURE_GATES))
    for gate, rule, other in _DRA_GATE_RULES:
        if not enabled[gate]:
            continue
        if rule == "needs" and not enabled[other]:
            errors.append("gpu_dra_driver_feature_gates turns on %s%s, which needs %s turned on too (NVIDIA's kubelet "
                          "plugin refuses it at its start)" % (
                              gate, "" if gate in feature_gates else " (on by default)", other))
        if rule == "excludes" and enabled[other]:
            errors.append("gpu_dra_driver_feature_gates turns on both %s and %s, which NVIDIA's kubelet plugin refuses "
                          "together at its start" % (gate, other))
    if method == "manifests":
        errors.extend("gpu_dra_driver_feature_gates turns on %s, which needs RBAC, mounts or values only the chart "
                      "renders (gpu_dra_driver_method: helm)" % gate
                      for gate in _DRA_HELM_ONLY_GATES if feature_gates.get(gate) and enabled[gate])
    return errors


def dra_dynamic_mig_layouts(hosts, hostvars, feature_gates):
    """With the DynamicMIG feature gate on in ``feature_gates``, the hosts whose inventory declares a gpu_mig
    layout (a non-empty ``gpu_mig_layout``): [{host, layout, words}]; none when the gate is off.

    NVIDIA's kubelet plugin with DynamicMIG deletes at its start every MIG device its checkpoint does not
    name, and turns MIG mode off on a GPU left without one (cmd/gpu-kubelet-plugin, driver.go NewDriver ->
    DestroyUnknownMIGDevices): it and gpu_mig cannot both own a node's MIG layout."""
    if not _gate_on((feature_gates or {}).get("DynamicMIG", False)):
        return []
    out = []
    for host in hosts or []:
        if host not in hostvars:
            continue
        layout = hostvars[host].get("gpu_mig_layout")
        if layout in (None, "", [], {}):
            continue
        words = json.dumps(layout, sort_keys=True, default=str)
        out.append({"host": host, "layout": layout, "words": "%s (gpu_mig_layout %s)" % (host, words)})
    return out


class FilterModule(object):
    """DRA driver filters."""

    def filters(self):
        return {
            "dra_slices_check": dra_slices_check,
            "dra_device_plugin_nodes": dra_device_plugin_nodes,
            "dra_old_drivers": dra_old_drivers,
            "dra_dynamic_mig_layouts": dra_dynamic_mig_layouts,
            "dra_feature_gate_errors": dra_feature_gate_errors,
        }
