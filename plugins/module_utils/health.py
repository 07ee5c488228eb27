# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Health: lost GPUs and the problems that make a node unhealthy.

``find_lost_gpus`` compares the driver's answer with the PCI scan;
``assess_health`` turns the facts and the XID events into a status and a
list of problems (lost GPUs, a driver at fault, fatal XIDs, the NVSwitch
fabric, pending remaps and retirements, uncorrectable ECC errors, a next
boot without the NVIDIA kernel module).
"""

from __future__ import annotations


_FABRIC_NOT_READY_STATES = ("not_started", "in_progress")


# A GPU function bound to another driver (vfio-pci for a VM, nouveau) is not
# the nvidia driver's to report; an unbound one may be a GPU that failed to
# come up, and is counted.
_LOST_CANDIDATE_DRIVERS = ("nvidia", None)


def find_lost_gpus(answer, pci_devices):
    """GPUs the driver should report and does not: [{"pci_address", "gpu_index", "source", "message"}].

    (c) GPUs the driver itself names as lost (NVML GpuIsLost, nvidia-smi's
    "Unable to determine the device handle" lines); (a) GPU functions on the
    PCI bus, bound to nvidia or to no driver and not SR-IOV virtual functions,
    whose address no GPU of the answer has; (b) nvidia-smi's <attached_gpus>
    beyond the GPUs it printed, of unknown address. A GPU is counted once.
    """
    gpus = answer.get("gpus") or []
    lost = [dict(entry) for entry in answer.get("lost") or []]
    known = set(entry["pci_address"] for entry in lost if entry["pci_address"])
    reported = set(gpu["pci_address"] for gpu in gpus if gpu.get("pci_address"))
    for device in pci_devices:
        if not device.get("is_gpu") or device.get("is_virtual_function"):
            continue
        if device.get("driver") not in _LOST_CANDIDATE_DRIVERS:
            continue
        address = device["address"]
        if address in reported or address in known:
            continue
        known.add(address)
        why = "on the PCI bus, not reported by the driver" if device.get("driver") \
            else "on the PCI bus, bound to no driver"
        unnamed = next((entry for entry in lost if entry["pci_address"] is None), None)
        if unnamed is not None:
            # NVML lost a GPU before it could read its address: this is it.
            unnamed["pci_address"] = address
            unnamed["message"] = "%s; %s" % (unnamed["message"], why)
            continue
        lost.append({"pci_address": address, "gpu_index": None, "source": "pci_bus", "message": why})
    attached = answer.get("attached_gpus")
    if attached is not None:
        printed = len(gpus)
        unaccounted = attached - printed - len(lost)
        for dummy in range(max(0, unaccounted)):
            lost.append({
                "pci_address": None, "gpu_index": None, "source": "nvidia_smi",
                "message": "nvidia-smi reports %d attached GPUs but prints %d" % (attached, printed),
            })
    lost.sort(key=lambda entry: (entry["pci_address"] is None, entry["pci_address"] or "",
                                 entry["gpu_index"] if entry["gpu_index"] is not None else -1))
    return lost


def lost_message(lost, total):
    """'2 of 8 GPUs lost: 0000:3b:00.0, 0000:5d:00.0 (on the PCI bus, not reported by the driver)'."""
    groups = []
    for entry in lost:
        for group in groups:
            if group[0] == entry["message"]:
                group[1].append(entry)
                break
        else:
            groups.append((entry["message"], [entry]))
    parts = []
    for why, entries in groups:
        named = [entry["pci_address"] for entry in entries if entry["pci_address"]]
        unnamed = [entry for entry in entries if not entry["pci_address"]]
        where = list(named)
        if unnamed:
            indexes = [entry["gpu_index"] for entry in unnamed if entry["gpu_index"] is not None]
            if indexes:
                where.extend("GPU %d" % index for index in indexes)
            if len(unnamed) > len(indexes):
                where.append("%d of unknown address" % (len(unnamed) - len(indexes)))
        parts.append("%s (%s)" % (", ".join(where), why))
    return "%d of %d GPUs lost: %s" % (len(lost), total, "; ".join(parts))


def _gpu_words(gpu):
    return "GPU %d (%s)" % (gpu["index"], gpu["pci_address"] or gpu["pci_bus_id"] or "unknown address")


def _problem(code, message, pci_address=None, gpu_index=None):
    return {"code": code, "pci_address": pci_address, "gpu_index": gpu_index, "message": message}


def _fabric_problem(gpu):
    """Why a GPU's NVSwitch fabric is not ready for work, or None.

    Not flagged: a null or not_supported state, also beside NVSwitches on the
    bus. A100-generation HGX boards need the fabric manager yet report no
    fabric state through NVML or nvidia-smi; there the fabric manager
    service itself is the gauge (gpu_driver checks it).
    """
    fabric = gpu.get("fabric") or {}
    state = fabric.get("state")
    status = fabric.get("status")
    if state in _FABRIC_NOT_READY_STATES:
        return "fabric manager has not set up the NVSwitch fabric (state %s)" % state
    if state == "completed" and status not in (None, "success"):
        return "NVSwitch fabric setup failed (state completed, status %s)" % status
    if state is None and status:
        return "the fabric state could not be read (%s)" % status
    if (fabric.get("health") or "").lower() == "unhealthy":
        return "the NVSwitch fabric reports its health as Unhealthy"
    return None


def next_boot_problem(kernels, module_version):
    """Why the node loses its GPUs at the next reboot, or None.

    Only where the driver runs through a kernel module: one is loaded, or an installed kernel has
    one. A node with userspace only (a container, an image build) has nothing to lose.
    """
    kernels = kernels or {}
    installed = kernels.get("installed") or []
    if not module_version and not any(entry.get("nvidia_module") for entry in installed):
        return None
    if installed and not kernels.get("next_boot") and kernels.get("without_module"):
        return ("the kernel the node boots next cannot be told (%s), and installed kernels have no NVIDIA "
                "kernel module: %s; the GPUs are gone after a reboot into one of them; build the module for "
                "them (gpu_driver does, with DKMS) or remove them"
                % (kernels.get("next_boot_source"), ", ".join(kernels["without_module"])))
    for entry in installed:
        if entry.get("next_boot") and not entry.get("nvidia_module"):
            return ("the kernel the node boots next, %s (%s), has no NVIDIA kernel module: the GPUs are "
                    "gone after the next reboot; build the module for it (gpu_driver does, with DKMS) or "
                    "remove that kernel" % (entry["release"], kernels.get("next_boot_source") or "unknown"))
    return None


def assess_health(facts, xid_events):
    """``health``: status and problems, from the facts and the XID events."""
    problems = []
    state = facts["state"]
    for entry in facts["lost_gpus"]:
        problems.append(_problem("gpu_lost", "GPU lost: %s" % entry["message"], entry["pci_address"],
                                 entry["gpu_index"]))
    if state in ("driver_mismatch", "driver_not_loaded", "error"):
        problems.append(_problem("driver", "driver state %s: %s" % (state, facts["message"])))
    for event in xid_events:
        if not event["fatal"]:
            continue
        where = "GPU %d (%s)" % (event["gpu_index"], event["pci_address"]) if event["gpu_index"] is not None \
            else (event["pci_address"] or "an unknown GPU")
        problems.append(_problem("xid", "Xid %d (%s) on %s, %d since boot; %s" % (
            event["xid"], event["name"] or "not in the catalog", where, event["count"],
            event["action"] or "see NVIDIA's Xid catalog"), event["pci_address"], event["gpu_index"]))
    for gpu in facts["gpus"]:
        address = gpu["pci_address"]
        why = _fabric_problem(gpu)
        if why:
            problems.append(_problem("fabric_not_ready", "%s: %s" % (_gpu_words(gpu), why), address, gpu["index"]))
        health = gpu["health"]
        if health["remapped_rows_pending"]:
            problems.append(_problem("row_remap_pending", "%s: a row remapping is pending, reset the GPU to "
                                     "apply it" % _gpu_words(gpu), address, gpu["index"]))
        if health["remapped_rows_failure"]:
            problems.append(_problem("row_remap_failed", "%s: a row remapping failed; the GPU needs service"
                                     % _gpu_words(gpu), address, gpu["index"]))
        if health["retired_pages_pending"]:
            problems.append(_problem("retired_pages_pending", "%s: retired pages are pending, reset the GPU "
                                     "to retire them" % _gpu_words(gpu), address, gpu["index"]))
        uncorrectable = gpu["ecc"]["volatile_uncorrectable"]
        if uncorrectable:
            problems.append(_problem("ecc_uncorrectable", "%s: %d uncorrectable ECC errors since the driver "
                                     "loaded" % (_gpu_words(gpu), uncorrectable), address, gpu["index"]))
    why = next_boot_problem(facts.get("kernels"), facts.get("kernel_module_version"))
    if why:
        problems.append(_problem("next_boot_no_module", why))
    if problems:
        status = "unhealthy"
    elif state == "ok":
        status = "healthy"
    else:
        status = "unknown"
    return {"status": status, "problems": problems}
