# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind the gpu_driver role's decisions: module flavour, packages, reboot.

Pure functions over facts and the role's data tables, so the decisions are
unit-tested on data alone.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

# Architectures that NVIDIA's open kernel modules do not support.
PRE_TURING = ("kepler", "maxwell", "pascal", "volta", "fermi", "tesla")
# First PCI device id of Turing (TU10x, 0x1e00); every later NVIDIA GPU
# generation has higher ids (Ampere 0x20xx, Hopper 0x23xx, Ada 0x26xx-0x28xx,
# Blackwell 0x29xx-0x2cxx). Older GPUs are below it.
TURING_FIRST_DEVICE_ID = 0x1E00
_BRANCH_RE = re.compile(r"^[0-9]{3}$")


def _gpu_generation(gpu):
    """'old', 'new' or None (unknown) for one GPU of the nvml_facts facts."""
    capability = gpu.get("compute_capability")
    if capability:
        major, minor = (int(part) for part in str(capability).split(".")[:2])
        return "new" if (major, minor) >= (7, 5) else "old"
    architecture = (gpu.get("architecture") or "").lower()
    if architecture:
        return "old" if architecture in PRE_TURING else "new"
    return None


def _pci_generation(function):
    device_id = function.get("device_id")
    if not device_id:
        return None
    return "new" if int(device_id, 16) >= TURING_FIRST_DEVICE_ID else "old"


def older_gpus(facts):
    """Descriptions of the GPUs that are older than Turing, from NVML/nvidia-smi or PCI ids."""
    facts = facts or {}
    older = []
    for gpu in facts.get("gpus") or []:
        if _gpu_generation(gpu) == "old":
            older.append("%s at %s" % (gpu.get("name"), gpu.get("pci_bus_id")))
    if facts.get("gpus"):
        return older
    for function in facts.get("pci_devices") or []:
        if function.get("is_gpu") and _pci_generation(function) == "old":
            older.append("PCI device %s at %s" % (function.get("device_id"), function.get("address")))
    return older


def driver_flavor(requested, facts):
    """Resolve gpu_driver_module_flavor ('auto', 'open', 'proprietary') against the GPUs."""
    if requested not in ("auto", "open", "proprietary"):
        raise AnsibleFilterError(
            "gpu_driver_module_flavor must be auto, open or proprietary, got %r" % (requested,))
    older = older_gpus(facts)
    if requested == "open" and older:
        raise AnsibleFilterError(
            "gpu_driver_module_flavor is 'open' but NVIDIA's open kernel modules need Turing or newer, and "
            "this host has older GPUs: %s. Use gpu_driver_module_flavor: proprietary (or auto)." % "; ".join(older))
    if requested == "auto":
        return "proprietary" if older else "open"
    return requested


def driver_packages(table, source, kernel_module, flavor, branch, kernel=""):
    """Package names for a source, kernel module type, flavour and branch.

    ``table`` is the role's per-OS data: table[source][kernel_module][flavor]
    is a list of names in which ``{branch}`` is replaced by the branch and
    ``{kernel}`` by the running kernel's release (precompiled modules).
    """
    if not _BRANCH_RE.match(str(branch)):
        raise AnsibleFilterError("gpu_driver_branch must be a three-digit branch such as '550', got %r" % (branch,))
    by_module = (table or {}).get(source)
    if by_module is None:
        raise AnsibleFilterError(
            "gpu_driver_source %r is not available on this OS; available: %s"
            % (source, ", ".join(sorted(table or {})) or "none"))
    by_flavor = by_module.get(kernel_module)
    if by_flavor is None:
        raise AnsibleFilterError(
            "gpu_driver_kernel_module %r is not available with gpu_driver_source %r on this OS; available: %s"
            % (kernel_module, source, ", ".join(sorted(by_module))))
    names = by_flavor.get(flavor, by_flavor.get("any"))
    if names is None:
        raise AnsibleFilterError(
            "gpu_driver_module_flavor %r is not available with gpu_driver_source %r and kernel module %r on "
            "this OS; available: %s" % (flavor, source, kernel_module, ", ".join(sorted(by_flavor))))
    return [name.replace("{branch}", str(branch)).replace("{kernel}", str(kernel)) for name in names]


def driver_branch_of(version):
    """'1:535.261.03-1' -> '535'; None for an empty or unversioned value."""
    if not version:
        return None
    text = str(version).split(":", 1)[-1]
    match = re.match(r"^([0-9]+)\.", text)
    return match.group(1) if match else None


def driver_reboot_reasons(facts, nouveau_loaded=False, module_changed=False, kernel_module="dkms"):
    """Why this host needs a reboot, as a list of sentences (empty: no reboot).

    ``facts`` are ansible_facts['nvidia'] after the install; a host without a
    kernel module of ours (kernel_module 'none') never needs one.
    """
    if kernel_module == "none":
        return []
    facts = facts or {}
    reasons = []
    if nouveau_loaded:
        reasons.append("the nouveau module is loaded and must give way to nvidia")
    if module_changed:
        reasons.append("the NVIDIA kernel module package changed")
    if facts.get("state") == "driver_mismatch":
        reasons.append("NVML reports that the loaded kernel module and the libraries differ")
    elif facts.get("state") == "driver_not_loaded":
        reasons.append("the driver is installed but its kernel module is not loaded")
    return reasons


class FilterModule(object):
    def filters(self):
        return {
            "driver_flavor": driver_flavor,
            "driver_packages": driver_packages,
            "driver_branch_of": driver_branch_of,
            "driver_reboot_reasons": driver_reboot_reasons,
        }
