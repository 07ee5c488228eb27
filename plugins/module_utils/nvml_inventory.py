# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPU inventory: NVML readings and nvidia-smi output to one facts dict.

Everything here is pure data handling: no Ansible imports, no global state.
Input and output go through a *probe* object (see ``gather``), so that the
unit tests feed recorded readings and real captures instead of a GPU.

Policy (what the facts say about a host):

* the driver is asked first; the PCI scan (sysfs, vendor 0x10de) explains a
  driver that does not answer, and names the GPUs a driver that answers has
  lost (on the bus, bound to the nvidia driver or to none, not reported);
* absence of a GPU or a driver is a normal *state*, not an error;
* a tool that is present but answers garbage raises ``InventoryError`` with
  rc/stdout/stderr attached, which the module turns into a failure;
* a kernel log that cannot be read is reported (``kernel_log.read`` false
  with the reason), never an error: health then rests on the driver alone.

The readers live in their own files beside this one, and this module composes
them (``summarise``, ``gather``) and names all of their public names, so that
callers import from here alone:

* ``nvidia_smi``: nvidia-smi's XML report, list and MIG profiles;
* ``nvml_reader``: NVML through pynvml;
* ``pci_scan``: NVIDIA PCI functions in sysfs;
* ``kernels``: the loaded kernel module and the installed kernels;
* ``kernel_log``: XID events in the kernel log;
* ``health``: lost GPUs and the health problems;
* ``inventory_values``: ``InventoryError``, value normalisation, empty records.
"""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.module_utils.inventory_values import (
    InventoryError,
    clean,
    cuda_version_string,
    empty_fabric,
    empty_gpu,
    empty_mig_device,
    pci_address,
    plain_version,
    to_bool,
    to_mode,
    to_number,
    virtualization_mode,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvidia_smi import (
    add_mig_profiles,
    classify_smi_failure,
    merge_smi_list,
    parse_smi_gpu_instances,
    parse_smi_list,
    parse_smi_lost,
    parse_smi_profiles,
    parse_smi_xml,
    query_nvidia_smi,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_reader import (
    NVML_ARCHITECTURES,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_CORRUPTED_INFOROM,
    NVML_ERROR_DEPRECATED,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_READY,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_NO_DATA,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_UNINITIALIZED,
    NvmlCallError,
    PynvmlAdapter,
    nvml_return_text,
    query_nvml,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.pci_scan import (
    NVIDIA_PCI_VENDOR,
    is_nvswitch_class,
    scan_pci,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.kernels import (
    kernel_module_version,
    nvidia_module_of,
    scan_kernels,
    version_key,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.kernel_log import (
    DEFAULT_UNHEALTHY_XIDS,
    JOURNAL_ARGS,
    KERNEL_LOG_MODES,
    XID_CATALOG,
    parse_xid_events,
    read_kernel_log,
)
from ansible_collections.gpufleet.nvidia.plugins.module_utils.health import (
    assess_health,
    find_lost_gpus,
    lost_message,
    next_boot_problem,
)

STATES = (
    "ok",
    "no_gpu",
    "driver_not_installed",
    "driver_not_loaded",
    "driver_mismatch",
    "gpu_lost",
    "error",
)
SOURCES = ("auto", "nvml", "nvidia_smi")
HEALTH_STATUSES = ("healthy", "unhealthy", "unknown")


# --------------------------------------------------------------------------
# The whole inventory
# --------------------------------------------------------------------------

def _count_phrase(count, noun):
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


_UNREAD_OUTCOMES = ("not_installed", "no_reader")


NO_KERNELS = {"running": None, "installed": [], "next_boot": None, "next_boot_source": None, "without_module": []}


def summarise(answer, pci_devices, driver_installed, module_version, kernel_log=None,
              unhealthy_xids=DEFAULT_UNHEALTHY_XIDS, kernels=None):
    """Turn a source's answer plus what the host shows into the facts.

    ``driver_installed`` says whether the NVML library is on the host.
    ``driver_loaded`` is true when the driver answered (even with a fault or
    a version mismatch), false when it said it is not loaded, and otherwise
    whether /proc shows a loaded kernel module. ``kernel_log`` is the pair
    ``read_kernel_log`` returns (None: not read); ``kernels`` what ``scan_kernels`` returns (None:
    none seen).
    """
    outcome = answer["outcome"]
    gpus = answer.get("gpus") or []
    words = answer.get("message")
    # Entries from an older scan (or a caller's own) get is_nvswitch; the caller's dicts stay as they are.
    pci_devices = [device if "is_nvswitch" in device else dict(device, is_nvswitch=is_nvswitch_class(device.get("class")))
                   for device in pci_devices]
    gpu_functions = [d for d in pci_devices if d["is_gpu"]]
    log_fact, log_text = kernel_log or ({"source": None, "read": False, "message": "not read"}, None)

    if outcome == "not_loaded":
        loaded = False
    elif outcome in _UNREAD_OUTCOMES:
        loaded = bool(module_version)
    else:
        loaded = True
    cuda = plain_version(answer.get("cuda_driver_version"))
    kmd = plain_version(answer.get("kmd_version")) or module_version
    driver_version = plain_version(answer.get("driver_version"))
    if driver_version is None and outcome in ("ok", "no_devices", "gpu_lost"):
        # The driver answered with a notice where its version was (610's 'Deprecated, see
        # "KMD version" instead'): the kernel-mode driver's version is the driver's version.
        driver_version = kmd
    facts = {
        "state": None,
        "message": None,
        # Any answer but "not installed" came from the driver's library.
        "driver_installed": bool(driver_installed) if outcome in _UNREAD_OUTCOMES else True,
        "driver_loaded": loaded,
        "kernel_module_version": module_version,
        "driver_version": driver_version,
        "cuda_driver_version": cuda,
        "kmd_version": kmd,
        "cuda_umd_version": plain_version(answer.get("cuda_umd_version")) or cuda,
        "gpu_count": len(gpus),
        "gpus": gpus,
        "lost_gpus": [],
        "pci_devices": pci_devices,
        "nvswitches": sorted(d["address"] for d in pci_devices if d["is_nvswitch"]),
        "xid_events": [],
        "kernel_log": log_fact,
        "kernels": kernels or dict(NO_KERNELS),
        "health": None,
    }
    # NUMA node (PCI locality) from sysfs.
    numa_by_address = dict((d["address"], d["numa_node"]) for d in pci_devices)
    for gpu in gpus:
        if gpu["numa_node"] is None and gpu["pci_address"] in numa_by_address:
            gpu["numa_node"] = numa_by_address[gpu["pci_address"]]

    pci_words = (
        "no NVIDIA GPU on the PCI bus" if not gpu_functions
        else "%s on the PCI bus" % _count_phrase(len(gpu_functions), "NVIDIA GPU")
    )
    # The driver answered: every GPU it should report and does not is lost.
    lost = find_lost_gpus(answer, pci_devices) if outcome in ("ok", "no_devices", "gpu_lost") else []
    facts["lost_gpus"] = lost
    lost_indexes = set(entry["gpu_index"] for entry in lost if entry["gpu_index"] is not None)
    faulty = [gpu for gpu in gpus if gpu["error"] and gpu["index"] not in lost_indexes]
    fault_words = "; ".join(
        "GPU %d (%s): %s" % (gpu["index"], gpu["pci_bus_id"] or "unknown bus id", gpu["error"]) for gpu in faulty)
    if lost:
        facts["state"] = "gpu_lost"
        answering = len([gpu for gpu in gpus if gpu["index"] not in lost_indexes])
        facts["message"] = lost_message(lost, answering + len(lost))
        if fault_words:
            facts["message"] += "; %s" % fault_words
    elif outcome == "ok":
        if faulty:
            facts["state"] = "error"
            facts["message"] = fault_words
        else:
            facts["state"] = "ok"
            facts["message"] = "%s, driver %s" % (
                _count_phrase(len(gpus), "GPU"), facts["driver_version"] or "of unknown version")
    elif outcome == "mismatch":
        facts["state"] = "driver_mismatch"
        loaded = " (kernel module %s loaded)" % module_version if module_version else ""
        facts["message"] = "the loaded kernel module and the driver libraries differ%s, reboot or reload " \
            "the module; %s" % (loaded, words)
    elif outcome in ("error", "gpu_lost"):
        facts["state"] = "error"
        facts["message"] = words
    elif not gpu_functions:
        facts["state"] = "no_gpu"
        detail = words or "the driver reports no GPU"
        facts["message"] = "%s; %s" % (pci_words, detail) if outcome != "no_devices" else detail
    elif outcome == "not_loaded" and module_version:
        facts["state"] = "driver_not_loaded"
        facts["message"] = "%s and kernel module %s is loaded, but the driver cannot be reached " \
            "(missing /dev/nvidia* device nodes?); %s" % (pci_words, module_version, words)
    elif outcome == "not_loaded":
        facts["state"] = "driver_not_loaded"
        facts["message"] = "%s but the driver is not loaded; %s" % (pci_words, words)
    elif outcome == "no_reader" and facts["driver_installed"]:
        facts["state"] = "error"
        facts["message"] = "%s and the NVML library is installed, but nothing can read it: install " \
            "nvidia-smi or pynvml; %s" % (pci_words, words)
    elif outcome in _UNREAD_OUTCOMES:
        facts["state"] = "driver_not_installed"
        facts["message"] = "%s but no NVIDIA driver is installed; %s" % (pci_words, words)
    else:  # no_devices while the PCI bus shows GPUs the nvidia driver does not own
        facts["state"] = "error"
        facts["message"] = "%s but the driver reports none; %s" % (pci_words, words or "no devices")

    events = parse_xid_events(log_text, gpus, unhealthy_xids) if log_text else []
    facts["xid_events"] = events
    for gpu in gpus:
        gpu["xids"] = [event for event in events if event["gpu_index"] == gpu["index"]]
    facts["health"] = assess_health(facts, events)
    return facts


def gather(params, probe):
    """Collect ``ansible_facts['nvidia']``.

    ``probe`` gives the I/O: ``pynvml()`` (the module or None),
    ``which(name)``, ``run(argv)``, ``pci_devices()``,
    ``nvml_library_present()``, ``kernel_module_version()``, ``kernels()`` and, for
    ``kernel_log_path``, ``read_text(path)`` (a plain read without it).
    """
    source = params.get("source") or "auto"
    if source not in SOURCES:
        raise InventoryError("source must be one of %s, got %r" % (", ".join(SOURCES), source))
    unhealthy_xids = params.get("unhealthy_xids")
    if unhealthy_xids is None:
        unhealthy_xids = DEFAULT_UNHEALTHY_XIDS
    try:
        unhealthy_xids = sorted(set(int(xid) for xid in unhealthy_xids))
    except (TypeError, ValueError):
        raise InventoryError("unhealthy_xids must be a list of XID numbers, got %r" % (unhealthy_xids,))
    kernel_log = read_kernel_log(params, probe)
    pynvml = probe.pynvml() if source in ("auto", "nvml") else None
    smi = probe.which("nvidia-smi")
    if source == "auto":
        source = "nvml" if pynvml is not None else "nvidia_smi"

    if source == "nvml":
        if pynvml is None:
            raise InventoryError(
                "source=nvml was requested but the Python module pynvml is not importable on the "
                "target; install nvidia-ml-py (pip) or python3-pynvml (Debian contrib), or use "
                "source=nvidia_smi or auto")
        answer = query_nvml(PynvmlAdapter(pynvml))
    elif smi is None:
        answer = {"outcome": "no_reader", "message": (
            "nvidia-smi: command not found" if params.get("source") == "nvidia_smi"
            else "neither pynvml nor nvidia-smi is available")}
    else:
        answer = query_nvidia_smi(probe.run, smi)
    if smi is not None and answer.get("gpus"):
        add_mig_profiles(probe.run, smi, answer["gpus"])

    facts = summarise(
        answer,
        probe.pci_devices(),
        driver_installed=probe.nvml_library_present(),
        module_version=probe.kernel_module_version(),
        kernel_log=kernel_log,
        unhealthy_xids=unhealthy_xids,
        kernels=probe.kernels(),
    )
    facts["source"] = source
    return facts


# Every public name of the inventory, wherever it is defined.
__all__ = (
    "STATES",
    "SOURCES",
    "KERNEL_LOG_MODES",
    "HEALTH_STATUSES",
    "NVIDIA_PCI_VENDOR",
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_CORRUPTED_INFOROM",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "NVML_ERROR_NO_DATA",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    "NVML_ERROR_DEPRECATED",
    "NVML_ERROR_NOT_READY",
    "NVML_ARCHITECTURES",
    "XID_CATALOG",
    "DEFAULT_UNHEALTHY_XIDS",
    "InventoryError",
    "NvmlCallError",
    "clean",
    "to_number",
    "to_bool",
    "to_mode",
    "pci_address",
    "cuda_version_string",
    "plain_version",
    "nvml_return_text",
    "virtualization_mode",
    "empty_gpu",
    "empty_fabric",
    "empty_mig_device",
    "parse_smi_xml",
    "parse_smi_list",
    "merge_smi_list",
    "parse_smi_lost",
    "classify_smi_failure",
    "query_nvidia_smi",
    "parse_smi_profiles",
    "parse_smi_gpu_instances",
    "add_mig_profiles",
    "query_nvml",
    "PynvmlAdapter",
    "is_nvswitch_class",
    "scan_pci",
    "kernel_module_version",
    "version_key",
    "nvidia_module_of",
    "scan_kernels",
    "JOURNAL_ARGS",
    "read_kernel_log",
    "parse_xid_events",
    "find_lost_gpus",
    "lost_message",
    "next_boot_problem",
    "assess_health",
    "NO_KERNELS",
    "summarise",
    "gather",
)
