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
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import uuid
import xml.etree.ElementTree as ET

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
KERNEL_LOG_MODES = ("auto", "journal", "dmesg", "none")
HEALTH_STATUSES = ("healthy", "unhealthy", "unknown")
NVIDIA_PCI_VENDOR = "0x10de"

# NVML return codes (nvml.h) that the inventory treats specially.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27

# A query that fails with one of these leaves one value unknown (null);
# any other code is a fault of the device (or of the driver) and is reported.
_UNKNOWN_VALUE_CODES = frozenset((
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NO_DATA,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_DEPRECATED,
    NVML_ERROR_NOT_READY,
))

# nvmlDeviceGetArchitecture() values (nvmlDeviceArchitecture_t), named as
# nvidia-smi prints them in <product_architecture>.
NVML_ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}

# nvmlReturn_t names (nvml.h), for codes that NVML hands back as data (the
# fabric status) rather than as the result of a call.
_NVML_RETURN_NAMES = {
    0: "NVML_SUCCESS",
    1: "NVML_ERROR_UNINITIALIZED",
    2: "NVML_ERROR_INVALID_ARGUMENT",
    3: "NVML_ERROR_NOT_SUPPORTED",
    4: "NVML_ERROR_NO_PERMISSION",
    5: "NVML_ERROR_ALREADY_INITIALIZED",
    6: "NVML_ERROR_NOT_FOUND",
    7: "NVML_ERROR_INSUFFICIENT_SIZE",
    8: "NVML_ERROR_INSUFFICIENT_POWER",
    9: "NVML_ERROR_DRIVER_NOT_LOADED",
    10: "NVML_ERROR_TIMEOUT",
    11: "NVML_ERROR_IRQ_ISSUE",
    12: "NVML_ERROR_LIBRARY_NOT_FOUND",
    13: "NVML_ERROR_FUNCTION_NOT_FOUND",
    14: "NVML_ERROR_CORRUPTED_INFOROM",
    15: "NVML_ERROR_GPU_IS_LOST",
    16: "NVML_ERROR_RESET_REQUIRED",
    17: "NVML_ERROR_OPERATING_SYSTEM",
    18: "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    19: "NVML_ERROR_IN_USE",
    20: "NVML_ERROR_MEMORY",
    21: "NVML_ERROR_NO_DATA",
    23: "NVML_ERROR_INSUFFICIENT_RESOURCES",
    25: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    27: "NVML_ERROR_NOT_READY",
    999: "NVML_ERROR_UNKNOWN",
}

# nvmlGpuFabricState_t (nvml.h) as the facts name the states.
_NVML_FABRIC_STATES = {
    0: "not_supported",
    1: "not_started",
    2: "in_progress",
    3: "completed",
}
_FABRIC_NOT_READY_STATES = ("not_started", "in_progress")
# nvmlGpuFabricInfo_v3_t.healthSummary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*).
_NVML_FABRIC_HEALTH_SUMMARIES = {
    1: "Healthy",
    2: "Unhealthy",
    3: "Limited Capacity",
}

# XID events: what each one means and what an operator does about it, in our
# words after NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors,
# "Analyzing Xid Errors with the Xid Catalog": description and "Resolution
# Bucket (Immediate Action)" per Xid; the page-retirement XIDs 48/63/64 also
# after docs.nvidia.com/deploy/dynamic-page-retirement). An XID not listed
# here keeps a null name and action and is still reported.
XID_CATALOG = {
    8: ("GPU stopped processing (timeout)", "restart application"),
    13: ("graphics engine exception", "restart application"),
    31: ("GPU memory page fault", "restart application"),
    32: ("invalid or corrupted push buffer stream", "restart application"),
    43: ("GPU stopped processing (application fault)", "restart application"),
    45: ("preemptive cleanup after an earlier error", "none (follows another XID)"),
    48: ("double-bit ECC error", "reset GPU"),
    61: ("internal micro-controller breakpoint or warning", "reset GPU"),
    62: ("internal micro-controller halt", "reset GPU"),
    63: ("ECC page retirement or row remapping recorded", "reset GPU when idle"),
    64: ("ECC page retirement or row remapping failed", "reset GPU"),
    69: ("graphics engine class error", "restart application"),
    74: ("NVLink error", "check NVLink / reset GPU"),
    79: ("GPU has fallen off the bus", "reboot"),
    92: ("high single-bit ECC error rate", "none (watch the ECC counters)"),
    94: ("contained ECC error", "restart application"),
    95: ("uncontained ECC error", "reset GPU"),
    109: ("context switch timeout", "restart application"),
    119: ("GSP RPC timeout", "reset GPU"),
    120: ("GSP error", "reset GPU"),
    # Blackwell NVLink XIDs; the line says Fatal or Nonfatal.
    144: ("NVLink SAW error", "check NVLink"),
    145: ("NVLink RLW error", "check NVLink"),
    149: ("NVLink NETIR error", "check NVLink"),
    154: ("GPU recovery action changed", "follow the recovery action in the message"),
}

# XIDs after which a GPU should get no new work until it is reset or the node
# rebooted: the catalog's RESET_GPU / reboot bucket among the XIDs operators
# act on. 63 (a remap or retirement recorded) is left out: the GPU keeps
# working and the pending remap is its own health problem (row_remap_pending,
# retired_pages_pending). The module option unhealthy_xids replaces this set.
# 154 is the driver's recovery action: unhealthy while its latest line names
# an action other than None (0x0).
DEFAULT_UNHEALTHY_XIDS = (48, 61, 62, 64, 74, 79, 95, 119, 120, 154)

# Values that nvidia-smi prints where it has no value. Compared lower-cased,
# with and without the brackets that the CSV output adds. "REDACTED" is how
# people mask identifiers in published captures.
_ABSENT_TOKENS = frozenset((
    "",
    "n/a",
    "not supported",
    "requested functionality has been deprecated",
    "insufficient permissions",
    "unknown error",
    "gpu is lost",
    "redacted",
))

_NVML_MEMORY_ERROR_CORRECTED = 0
_NVML_MEMORY_ERROR_UNCORRECTED = 1
_NVML_VOLATILE_ECC = 0
_NVML_AGGREGATE_ECC = 1
_NVML_PAGE_RETIREMENT_MULTIPLE_SBE = 0
_NVML_PAGE_RETIREMENT_DBE = 1

_NUMBER_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%/()]*)\s*$")
_SMI_LIST_GPU_RE = re.compile(r"^GPU\s+(?P<index>\d+):\s*(?P<name>.*?)\s*\(UUID:\s*(?P<uuid>[^)]*)\)\s*$")
_SMI_LIST_MIG_RE = re.compile(
    r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+(?P<index>\d+):\s*\(UUID:\s*(?P<uuid>[^)]*)\)\s*$"
)
_MIG_NAME_PROFILE_RE = re.compile(r"\bMIG\s+(\S+)\s*$")
_PCI_BUS_ID_RE = re.compile(
    r"^(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})\.(?P<function>[0-7])$"
)


class InventoryError(Exception):
    """A tool answered, but not in a way the inventory can trust.

    ``details`` holds rc/stdout/stderr (or the NVML code) for the failure.
    """

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details


class NvmlCallError(Exception):
    """An NVML call returned an error code; ``text`` is NVML's own wording."""

    def __init__(self, code, text):
        super().__init__(text)
        self.code = code
        self.text = text


# --------------------------------------------------------------------------
# Value normalisation
# --------------------------------------------------------------------------

def clean(value):
    """Return ``value`` as a stripped string, or None for an absent-value marker."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = str(value).strip()
    token = text.lower()
    if token.startswith("[") and token.endswith("]"):
        token = token[1:-1].strip()
    if token in _ABSENT_TOKENS:
        return None
    return text


def to_number(value, integer=False):
    """Parse '81920 MiB', '300.00 W', '-7 C', '16x' into a number (None if absent)."""
    text = clean(value)
    if text is None:
        return None
    match = _NUMBER_RE.match(text)
    if not match:
        return None
    number = match.group(1)
    if integer:
        return int(float(number))
    return float(number)


def to_bool(value):
    """Map Enabled/Disabled, Yes/No, On/Off, 1/0 to True/False (None if absent)."""
    text = clean(value)
    if text is None:
        return None
    token = text.lower()
    if token in ("enabled", "yes", "on", "true", "1", "supported"):
        return True
    if token in ("disabled", "no", "off", "false", "0", "not supported"):
        return False
    return None


def to_mode(value):
    """Map Enabled/Disabled (and NVML's 1/0) to 'enabled'/'disabled' (None if absent)."""
    flag = to_bool(value)
    if flag is None:
        return None
    return "enabled" if flag else "disabled"


def pci_address(bus_id):
    """'00000000:01:00.0' (NVIDIA's form) -> '0000:01:00.0' (sysfs form), else None."""
    text = clean(bus_id)
    if text is None:
        return None
    match = _PCI_BUS_ID_RE.match(text)
    if not match:
        return None
    domain = int(match.group("domain"), 16)
    return "%04x:%s:%s.%s" % (
        domain,
        match.group("bus").lower(),
        match.group("device").lower(),
        match.group("function"),
    )


def cuda_version_string(value):
    """NVML's CUDA driver version integer (12020) -> '12.2'."""
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return clean(value)
    if number <= 0:
        return None
    return "%d.%d" % (number // 1000, (number % 1000) // 10)


_VERSION_RE = re.compile(r"^\d+(?:\.\d+)*")


def plain_version(value):
    """'610.47 [Deprecated; ... Use KMD Version instead]' -> '610.47'.

    Driver 610 appends a deprecation note to the driver and CUDA versions of
    ``nvidia-smi -q``, and ``nvidia-smi --version`` prints only a notice
    ('Deprecated, see "KMD version" instead') where the driver version was.
    A version is the number the text starts with; a text that starts with
    none (a notice, 'N/A') is no version, and the caller falls back to the
    KMD version. The numbers inside a notice ('CUDA 14.0') are never taken.
    """
    text = clean(value)
    if text is None:
        return None
    match = _VERSION_RE.match(text)
    return match.group(0) if match else None


def nvml_return_text(code):
    """An nvmlReturn_t handed back as data: 'NVML_ERROR_TIMEOUT (10)'."""
    if code is None:
        return None
    return "%s (%d)" % (_NVML_RETURN_NAMES.get(int(code), "NVML error"), int(code))


# nvmlGpuVirtualizationMode_t values and nvidia-smi's words for them, as one vocabulary.
_NVML_VIRTUALIZATION_MODES = {
    0: "none",
    1: "passthrough",
    2: "vgpu",
    3: "host_vgpu",
    4: "host_vsga",
}
_SMI_VIRTUALIZATION_MODES = {
    "none": "none",
    "pass-through": "passthrough",
    "vgpu": "vgpu",
    "host vgpu": "host_vgpu",
    "host vsga": "host_vsga",
}


def virtualization_mode(text):
    """nvidia-smi's <virtualization_mode> in the vocabulary of the NVML path."""
    value = clean(text)
    if value is None:
        return None
    return _SMI_VIRTUALIZATION_MODES.get(value.lower(), value.lower().replace(" ", "_"))


def _sum_known(values):
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def empty_gpu(index):
    """The shape of one GPU entry, every value unknown."""
    return {
        "index": index,
        "uuid": None,
        "name": None,
        "brand": None,
        "serial": None,
        "pci_bus_id": None,
        "pci_address": None,
        "pci_device_id": None,
        "minor_number": None,
        "vbios_version": None,
        "architecture": None,
        "compute_capability": None,
        "memory_total_mib": None,
        "persistence_mode": None,
        "power_limit_w": None,
        "numa_node": None,
        "virtualization_mode": None,
        "mig": {
            "capable": False,
            "current_mode": None,
            "pending_mode": None,
            "devices": [],
            "profiles": [],
        },
        "ecc": {
            "current_mode": None,
            "pending_mode": None,
            "volatile_correctable": None,
            "volatile_uncorrectable": None,
            "aggregate_correctable": None,
            "aggregate_uncorrectable": None,
        },
        "health": {
            "retired_pages_pending": None,
            "retired_pages_single_bit": None,
            "retired_pages_double_bit": None,
            "remapped_rows_correctable": None,
            "remapped_rows_uncorrectable": None,
            "remapped_rows_pending": None,
            "remapped_rows_failure": None,
        },
        "fabric": empty_fabric(),
        "xids": [],
        "error": None,
    }


def empty_fabric():
    """The NVSwitch fabric block of one GPU, every value unknown."""
    return {
        "state": None,
        "status": None,
        "clique_id": None,
        "cluster_uuid": None,
        "health": None,
    }


def empty_mig_device(index):
    return {
        "index": index,
        "gpu_instance_id": None,
        "compute_instance_id": None,
        "profile": None,
        "gpu_instance_profile": None,
        "memory_total_mib": None,
        "multiprocessor_count": None,
        "uuid": None,
    }


# --------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------

def _text(element, path):
    """Text of the first element at ``path`` below ``element`` (None if missing)."""
    if element is None:
        return None
    found = element.find(path)
    if found is None:
        return None
    return found.text


def _first_number(element, paths, integer=False):
    for path in paths:
        number = to_number(_text(element, path), integer=integer)
        if number is not None:
            return number
    return None


def _smi_ecc_counts(block):
    """(correctable, uncorrectable) totals of one <volatile>/<aggregate> block.

    Pascal and older: <single_bit>/<double_bit> with a <total>.
    Volta and newer: <sram_*>/<dram_*> counters, split further into
    parity/secded SRAM counters from driver 570 on.
    """
    if block is None:
        return None, None
    if block.find("single_bit") is not None or block.find("double_bit") is not None:
        return (
            to_number(_text(block, "single_bit/total"), integer=True),
            to_number(_text(block, "double_bit/total"), integer=True),
        )
    correctable = _sum_known([
        to_number(_text(block, name), integer=True)
        for name in ("sram_correctable", "dram_correctable", "device_memory_correctable")
    ])
    uncorrectable = _sum_known([
        to_number(_text(block, name), integer=True)
        for name in (
            "sram_uncorrectable",
            "sram_uncorrectable_parity",
            "sram_uncorrectable_secded",
            "dram_uncorrectable",
        )
    ])
    return correctable, uncorrectable


def _smi_mig_devices(gpu):
    devices = []
    for node in gpu.findall("mig_devices/mig_device"):
        index = to_number(_text(node, "index"), integer=True)
        device = empty_mig_device(index if index is not None else len(devices))
        device["gpu_instance_id"] = to_number(_text(node, "gpu_instance_id"), integer=True)
        device["compute_instance_id"] = to_number(_text(node, "compute_instance_id"), integer=True)
        device["memory_total_mib"] = to_number(_text(node, "fb_memory_usage/total"), integer=True)
        device["multiprocessor_count"] = to_number(
            _text(node, "device_attributes/shared/multiprocessor_count"), integer=True
        )
        devices.append(device)
    return devices


def _smi_gpu(index, node):
    gpu = empty_gpu(index)
    bus_id = clean(node.get("id")) or clean(_text(node, "pci/pci_bus_id"))
    gpu["pci_bus_id"] = bus_id
    gpu["pci_address"] = pci_address(bus_id)
    device_id = clean(_text(node, "pci/pci_device_id"))
    if device_id and re.match(r"^[0-9A-Fa-f]{8}$", device_id):
        # 20B210DE: device id in the upper half, vendor id in the lower half.
        gpu["pci_device_id"] = "0x" + device_id[:4].lower()
    gpu["uuid"] = clean(_text(node, "uuid"))
    gpu["name"] = clean(_text(node, "product_name"))
    gpu["brand"] = clean(_text(node, "product_brand"))
    gpu["serial"] = clean(_text(node, "serial"))
    gpu["minor_number"] = to_number(_text(node, "minor_number"), integer=True)
    gpu["vbios_version"] = clean(_text(node, "vbios_version"))
    gpu["architecture"] = clean(_text(node, "product_architecture"))
    gpu["memory_total_mib"] = to_number(_text(node, "fb_memory_usage/total"), integer=True)
    gpu["persistence_mode"] = to_bool(_text(node, "persistence_mode"))
    gpu["virtualization_mode"] = virtualization_mode(_text(node, "gpu_virtualization_mode/virtualization_mode"))
    # 530+ renamed <power_readings> to <gpu_power_readings> and the enforced
    # limit to <current_power_limit>; some v12 documents keep the old names.
    gpu["power_limit_w"] = _first_number(node, (
        "gpu_power_readings/current_power_limit",
        "power_readings/enforced_power_limit",
        "gpu_power_readings/enforced_power_limit",
        "power_readings/power_limit",
        "gpu_power_readings/power_limit",
    ))

    mig = gpu["mig"]
    mig["current_mode"] = to_mode(_text(node, "mig_mode/current_mig"))
    mig["pending_mode"] = to_mode(_text(node, "mig_mode/pending_mig"))
    mig["capable"] = mig["current_mode"] is not None
    mig["devices"] = _smi_mig_devices(node)

    ecc = gpu["ecc"]
    ecc["current_mode"] = to_mode(_text(node, "ecc_mode/current_ecc"))
    ecc["pending_mode"] = to_mode(_text(node, "ecc_mode/pending_ecc"))
    ecc["volatile_correctable"], ecc["volatile_uncorrectable"] = _smi_ecc_counts(
        node.find("ecc_errors/volatile"))
    ecc["aggregate_correctable"], ecc["aggregate_uncorrectable"] = _smi_ecc_counts(
        node.find("ecc_errors/aggregate"))

    health = gpu["health"]
    pending = to_bool(_text(node, "retired_pages/pending_retirement"))
    if pending is None:
        pending = to_bool(_text(node, "retired_pages/pending_blacklist"))
    health["retired_pages_pending"] = pending
    health["retired_pages_single_bit"] = to_number(
        _text(node, "retired_pages/multiple_single_bit_retirement/retired_count"), integer=True)
    health["retired_pages_double_bit"] = to_number(
        _text(node, "retired_pages/double_bit_retirement/retired_count"), integer=True)
    health["remapped_rows_correctable"] = to_number(_text(node, "remapped_rows/remapped_row_corr"), integer=True)
    health["remapped_rows_uncorrectable"] = to_number(_text(node, "remapped_rows/remapped_row_unc"), integer=True)
    health["remapped_rows_pending"] = to_bool(_text(node, "remapped_rows/remapped_row_pending"))
    health["remapped_rows_failure"] = to_bool(_text(node, "remapped_rows/remapped_row_failure"))
    gpu["fabric"] = _smi_fabric(node.find("fabric"))
    if _smi_says_lost(node):
        # NVML_ERROR_GPU_IS_LOST: the driver still enumerates the GPU but cannot read it, and nvidia-smi
        # prints the error's text where the values would be.
        gpu["error"] = _SMI_GPU_IS_LOST
    return gpu


# NVML's text for NVML_ERROR_GPU_IS_LOST (nvmlErrorString), which nvidia-smi prints in place of a value.
_SMI_GPU_IS_LOST = "GPU is lost"


def _smi_says_lost(node):
    """Whether nvidia-smi printed 'GPU is lost' in place of any value of this <gpu>."""
    for element in node.iter():
        token = (element.text or "").strip().lower()
        if token.startswith("[") and token.endswith("]"):
            token = token[1:-1].strip()
        if token == _SMI_GPU_IS_LOST.lower():
            return True
    return False


def _smi_printed_lost(gpus):
    """Lost entries for the GPUs nvidia-smi printed with 'GPU is lost' in place of their values."""
    return [{"pci_address": gpu["pci_address"], "gpu_index": gpu["index"], "source": "nvidia_smi",
             "message": "nvidia-smi: %s" % _SMI_GPU_IS_LOST}
            for gpu in gpus if gpu["error"] == _SMI_GPU_IS_LOST]


def _merge_lost(named, printed):
    """The GPUs nvidia-smi named as lost in its lines, with those it printed as lost: one entry per GPU,
    the printed one's index added to the line's entry of the same address."""
    lost = [dict(entry) for entry in named]
    for entry in printed:
        same = next((known for known in lost if entry["pci_address"] and known["pci_address"] == entry["pci_address"]),
                    None)
        if same is None:
            lost.append(dict(entry))
        elif same.get("gpu_index") is None:
            same["gpu_index"] = entry["gpu_index"]
    return lost


def _smi_fabric(block):
    """<fabric>: <state>/<status> since 525, <cliqueId>/<clusterUuid>/<health> later.

    "Not Supported" is a state here (the GPU has no NVSwitch fabric), not an
    absent value; N/A stays null.
    """
    fabric = empty_fabric()
    if block is None:
        return fabric
    state = (_text(block, "state") or "").strip()
    if state.lower() == "not supported":
        fabric["state"] = "not_supported"
    elif clean(state) is not None:
        fabric["state"] = clean(state).lower().replace(" ", "_")
    status = clean(_text(block, "status"))
    if status is not None:
        fabric["status"] = "success" if status.lower() == "success" else status
    fabric["clique_id"] = to_number(_text(block, "cliqueId"), integer=True)
    fabric["cluster_uuid"] = clean(_text(block, "clusterUuid"))
    fabric["health"] = clean(_text(block, "health/summary"))
    return fabric


def parse_smi_xml(text):
    """Parse ``nvidia-smi -q -x`` output.

    Returns ``{"driver_version", "cuda_driver_version", "attached_gpus", "gpus"}``.
    Elements are detected by name, never by the DTD version (the DTD line is
    missing in some releases, and a v12 DTD still carries v11 element names).
    Raises InventoryError when the text is not an nvidia-smi XML log.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as err:
        raise InventoryError("nvidia-smi -q -x did not print XML: %s" % err)
    if root.tag != "nvidia_smi_log":
        raise InventoryError(
            "nvidia-smi -q -x printed XML whose root is <%s>, expected <nvidia_smi_log>" % root.tag)
    gpus = [_smi_gpu(index, node) for index, node in enumerate(root.findall("gpu"))]
    # Driver 610 deprecates "Driver Version" and "CUDA Version" in favour of
    # "KMD Version" and "CUDA UMD Version" and appends a note to the old ones
    # in `nvidia-smi -q`. No 610 XML capture is available: the element names
    # <kmd_version> and <cuda_umd_version> are inferred from the query field
    # names; the old elements are read too, and any note is stripped.
    kmd = plain_version(_text(root, "kmd_version"))
    umd = plain_version(_text(root, "cuda_umd_version"))
    return {
        "driver_version": plain_version(_text(root, "driver_version")) or kmd,
        "cuda_driver_version": plain_version(_text(root, "cuda_version")) or umd,
        "kmd_version": kmd,
        "cuda_umd_version": umd,
        "attached_gpus": to_number(_text(root, "attached_gpus"), integer=True),
        "gpus": gpus,
    }


def parse_smi_list(text):
    """Parse ``nvidia-smi -L``: GPUs with their MIG devices' profiles and UUIDs."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    gpus = []
    for line in text.splitlines():
        match = _SMI_LIST_GPU_RE.match(line)
        if match:
            gpus.append({
                "index": int(match.group("index")),
                "name": match.group("name"),
                "uuid": clean(match.group("uuid")),
                "mig_devices": [],
            })
            continue
        match = _SMI_LIST_MIG_RE.match(line)
        if match and gpus:
            gpus[-1]["mig_devices"].append({
                "index": int(match.group("index")),
                "profile": match.group("profile"),
                "uuid": clean(match.group("uuid")),
            })
    return gpus


def merge_smi_list(gpus, listed):
    """Add MIG profiles and UUIDs from ``nvidia-smi -L`` to the XML's GPUs.

    GPUs are matched by index (both come from the same NVML enumeration);
    a GPU whose name differs is left alone rather than mislabelled.
    """
    by_index = {entry["index"]: entry for entry in listed}
    for gpu in gpus:
        entry = by_index.get(gpu["index"])
        if entry is None or (gpu["name"] and entry["name"] != gpu["name"]):
            continue
        mig_by_index = {mig["index"]: mig for mig in entry["mig_devices"]}
        for device in gpu["mig"]["devices"]:
            listed_mig = mig_by_index.get(device["index"])
            if listed_mig is None:
                continue
            device["profile"] = device["profile"] or listed_mig["profile"]
            device["uuid"] = device["uuid"] or listed_mig["uuid"]
    return gpus


# nvidia-smi's exit codes (nvidia-smi(1), RETURN VALUE) and the words it
# prints for the states the inventory reports rather than fails on.
_SMI_OUTCOMES = (
    ("mismatch", (18,), "version mismatch"),
    ("not_loaded", (9,), "couldn't communicate with the nvidia driver"),
    ("no_devices", (6,), "no devices were found"),
    ("not_installed", (12,), "couldn't find libnvidia-ml"),
    ("not_installed", (12,), "shared library not found"),
    ("gpu_lost", (15,), "gpu is lost"),
    ("gpu_lost", (15,), "unable to determine the device handle"),
)

# What nvidia-smi prints for a GPU that NVML enumerates but cannot open, e.g.
# "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.
# Reboot the system to recover this GPU" or "... for GPU0000:07:00.0: Unknown
# Error" (fixtures/nvidia-smi-lost/SOURCES.md lists the real lines).
_SMI_LOST_RE = re.compile(
    r"Unable to determine the device handle for GPU\s*"
    r"(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})\.(?P<function>[0-7])"
    r"\s*:\s*(?P<reason>.*?)\s*$"
)


def parse_smi_lost(*texts):
    """GPUs that nvidia-smi names as lost: [{"pci_address", "source", "message"}]."""
    lost = []
    seen = set()
    for text in texts:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        for line in (text or "").splitlines():
            match = _SMI_LOST_RE.search(line)
            if not match:
                continue
            address = "%04x:%s:%s.%s" % (
                int(match.group("domain"), 16), match.group("bus").lower(),
                match.group("device").lower(), match.group("function"))
            if address in seen:
                continue
            seen.add(address)
            reason = re.sub(r"\s+", " ", match.group("reason")) or "unknown error"
            lost.append({"pci_address": address, "gpu_index": None, "source": "nvidia_smi",
                         "message": "nvidia-smi: %s" % reason})
    return lost


def classify_smi_failure(rc, stdout, stderr):
    """Name the state behind a failed nvidia-smi run, or None if unknown."""
    words = ("%s\n%s" % (stdout or "", stderr or "")).lower()
    for outcome, codes, phrase in _SMI_OUTCOMES:
        if phrase in words:
            return outcome
    for outcome, codes, phrase in _SMI_OUTCOMES:
        if rc in codes:
            return outcome
    return None


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


def _smi_answer_fields(parsed):
    return {
        "driver_version": parsed["driver_version"],
        "cuda_driver_version": parsed["cuda_driver_version"],
        "kmd_version": parsed["kmd_version"],
        "cuda_umd_version": parsed["cuda_umd_version"],
        "attached_gpus": parsed["attached_gpus"],
        "gpus": parsed["gpus"],
    }


def query_nvidia_smi(run, executable):
    """Ask nvidia-smi. ``run(argv) -> (rc, stdout, stderr)``.

    Returns an answer dict (see ``query_nvml``); raises InventoryError when
    nvidia-smi answers something that is neither an inventory nor a known state.
    """
    rc, out, err = run([executable, "-q", "-x"])
    if rc != 0:
        outcome = classify_smi_failure(rc, out, err)
        if outcome is None:
            raise InventoryError(
                "nvidia-smi -q -x failed with rc=%s: %s" % (rc, _first_line(err, out) or "no output"),
                rc=rc, stdout=out, stderr=err, cmd=[executable, "-q", "-x"])
        answer = {"outcome": outcome, "message": "nvidia-smi: %s" % _first_line(err, out)}
        if outcome == "gpu_lost":
            answer["lost"] = parse_smi_lost(out, err)
        if outcome == "gpu_lost" and "<nvidia_smi_log" in (out or ""):
            # The GPUs that still answer are printed before the failure.
            try:
                partial = parse_smi_xml(out[out.index("<"):])
            except InventoryError:
                partial = None
            if partial:
                answer.update(_smi_answer_fields(partial))
                answer["lost"] = _merge_lost(answer["lost"], _smi_printed_lost(partial["gpus"]))
        return answer
    try:
        parsed = parse_smi_xml(out[out.index("<"):] if "<" in (out or "") else out)
    except InventoryError as exc:
        raise InventoryError(str(exc), rc=rc, stdout=out, stderr=err, cmd=[executable, "-q", "-x"])
    answer = {
        "outcome": "ok" if parsed["gpus"] else "no_devices",
        "message": None,
        # A GPU that cannot be opened is named on stderr (or before the XML)
        # while the others are printed and nvidia-smi may still exit 0.
        "lost": _merge_lost(parse_smi_lost(out[:out.index("<")] if "<" in (out or "") else "", err),
                            _smi_printed_lost(parsed["gpus"])),
    }
    answer.update(_smi_answer_fields(parsed))
    needs_list = any(
        device["uuid"] is None or device["profile"] is None
        for gpu in parsed["gpus"] for device in gpu["mig"]["devices"]
    )
    if needs_list:
        list_rc, list_out, dummy = run([executable, "-L"])
        if list_rc == 0:
            merge_smi_list(parsed["gpus"], parse_smi_list(list_out))
    return answer


# One profile row of `nvidia-smi mig -lgip` (both widths: drivers up to 535 and 570 on):
# |   0  MIG 1g.10gb         19     7/7        9.75       No     16     1     0   |
_SMI_PROFILE_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<memory>[0-9.]+)\s")


def parse_smi_profiles(text):
    """``nvidia-smi mig -lgip`` -> {GPU index: [{name, id, instances_free, instances_total, memory_gib}]}."""
    profiles = {}
    for line in (text or "").splitlines():
        match = _SMI_PROFILE_RE.match(line)
        if not match:
            continue
        profiles.setdefault(int(match.group("gpu")), []).append({
            "name": match.group("name"),
            "id": int(match.group("id")),
            "instances_free": int(match.group("free")),
            "instances_total": int(match.group("total")),
            "memory_gib": float(match.group("memory")),
        })
    return profiles


# One GPU instance row of `nvidia-smi mig -lgi` (both widths):
# |   0  MIG 1g.10gb+me        20       11          4:1     |
_SMI_GPU_INSTANCE_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<profile_id>\d+)\s+(?P<id>\d+)\s+\d+:\d+\s*\|$")


def parse_smi_gpu_instances(text):
    """``nvidia-smi mig -lgi`` -> {GPU index: {GPU instance ID: profile name}}."""
    instances = {}
    for line in (text or "").splitlines():
        match = _SMI_GPU_INSTANCE_RE.match(line)
        if match:
            instances.setdefault(int(match.group("gpu")), {})[int(match.group("id"))] = match.group("name")
    return instances


def add_mig_profiles(run, executable, gpus):
    """Add what ``nvidia-smi mig`` lists to the MIG-capable GPUs: the GPU instance profiles
    (``-lgip``) and, for GPUs in MIG mode, each MIG device's GPU instance profile (``-lgi``;
    ``-L`` names a ``1g.10gb+me`` instance's device ``1g.10gb``).

    Recent drivers list the profiles whatever the MIG mode; older ones only for GPUs
    in MIG mode ("No MIG-enabled devices found."), and then the list stays empty.
    """
    if not any(((gpu.get("mig") or {}).get("capable")) for gpu in gpus or []):
        return
    rc, out, dummy = run([executable, "mig", "-lgip"])
    listed = parse_smi_profiles(out) if rc == 0 else {}
    for gpu in gpus:
        if (gpu.get("mig") or {}).get("capable") and gpu.get("index") in listed:
            gpu["mig"]["profiles"] = listed[gpu["index"]]
    if not any(((gpu.get("mig") or {}).get("devices")) for gpu in gpus):
        return
    rc, out, dummy = run([executable, "mig", "-lgi"])
    instances = parse_smi_gpu_instances(out) if rc == 0 else {}
    for gpu in gpus:
        for device in (gpu.get("mig") or {}).get("devices") or []:
            device["gpu_instance_profile"] = (instances.get(gpu.get("index")) or {}).get(device["gpu_instance_id"])


# --------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------

class _Device(object):
    """Calls on one device handle, keeping the first fault that is not 'unknown value'."""

    def __init__(self, nvml, handle):
        self.nvml = nvml
        self.handle = handle
        self.fault = None

    def get(self, function, *args):
        try:
            return self.nvml.call(function, self.handle, *args)
        except NvmlCallError as err:
            if err.code not in _UNKNOWN_VALUE_CODES and self.fault is None:
                self.fault = err
            return None


def _field(struct, name):
    if isinstance(struct, dict):
        return struct.get(name)
    return None


def _nvml_mig_devices(nvml, device):
    count = device.get("nvmlDeviceGetMaxMigDeviceCount") or 0
    devices = []
    for slot in range(int(count)):
        try:
            handle = nvml.call("nvmlDeviceGetMigDeviceHandleByIndex", device.handle, slot)
        except NvmlCallError as err:
            if err.code in _UNKNOWN_VALUE_CODES:
                continue  # an empty slot answers NotFound
            if device.fault is None:
                device.fault = err
            continue
        mig = _Device(nvml, handle)
        entry = empty_mig_device(len(devices))
        entry["uuid"] = clean(mig.get("nvmlDeviceGetUUID"))
        entry["gpu_instance_id"] = mig.get("nvmlDeviceGetGpuInstanceId")
        entry["compute_instance_id"] = mig.get("nvmlDeviceGetComputeInstanceId")
        name = clean(mig.get("nvmlDeviceGetName"))
        match = _MIG_NAME_PROFILE_RE.search(name or "")
        entry["profile"] = match.group(1) if match else None
        total = _field(mig.get("nvmlDeviceGetMemoryInfo"), "total")
        entry["memory_total_mib"] = int(total) // (1024 * 1024) if total is not None else None
        entry["multiprocessor_count"] = _field(mig.get("nvmlDeviceGetAttributes"), "multiprocessorCount")
        devices.append(entry)
        if mig.fault is not None and device.fault is None:
            device.fault = mig.fault
    return devices


def _nvml_fabric(nvml, device):
    """nvmlDeviceGetGpuFabricInfoV through the adapter (a dict, see PynvmlAdapter).

    NotSupported / FunctionNotFound (no fabric, or bindings and driver older
    than the call) leave the block unknown; GpuIsLost is the GPU's fault; any
    other code is the fabric's own failure and lands in ``status``.
    """
    fabric = empty_fabric()
    try:
        info = nvml.call("nvmlDeviceGetGpuFabricInfoV", device.handle)
    except NvmlCallError as err:
        if err.code == NVML_ERROR_GPU_IS_LOST:
            if device.fault is None:
                device.fault = err
        elif err.code not in _UNKNOWN_VALUE_CODES:
            fabric["status"] = "NVML: %s" % err.text
        return fabric
    if not isinstance(info, dict) or info.get("state") is None:
        return fabric
    # The state is one byte in nvml.h; some bindings declare it as an int.
    state = _NVML_FABRIC_STATES.get(int(info["state"]) & 0xFF)
    fabric["state"] = state
    if state is None or state == "not_supported":
        return fabric
    # status "must be checked only if state returns complete" (nvml.h).
    if state == "completed" and info.get("status") is not None:
        fabric["status"] = "success" if int(info["status"]) == 0 else nvml_return_text(info["status"])
    fabric["clique_id"] = info.get("cliqueId")
    fabric["cluster_uuid"] = clean(info.get("clusterUuid"))
    summary = info.get("healthSummary")
    fabric["health"] = _NVML_FABRIC_HEALTH_SUMMARIES.get(int(summary)) if summary is not None else None
    return fabric


def _nvml_gpu(nvml, index):
    """One GPU's entry and the NVML code of its fault (None without one)."""
    gpu = empty_gpu(index)
    try:
        handle = nvml.call("nvmlDeviceGetHandleByIndex", index)
    except NvmlCallError as err:
        gpu["error"] = err.text
        return gpu, err.code
    device = _Device(nvml, handle)
    gpu["uuid"] = clean(device.get("nvmlDeviceGetUUID"))
    gpu["name"] = clean(device.get("nvmlDeviceGetName"))
    gpu["serial"] = clean(device.get("nvmlDeviceGetSerial"))
    pci = device.get("nvmlDeviceGetPciInfo")
    gpu["pci_bus_id"] = clean(_field(pci, "busId"))
    gpu["pci_address"] = pci_address(gpu["pci_bus_id"])
    pci_device = _field(pci, "pciDeviceId")
    if pci_device is not None:
        gpu["pci_device_id"] = "0x%04x" % ((int(pci_device) >> 16) & 0xFFFF)
    gpu["minor_number"] = device.get("nvmlDeviceGetMinorNumber")
    gpu["vbios_version"] = clean(device.get("nvmlDeviceGetVbiosVersion"))
    capability = device.get("nvmlDeviceGetCudaComputeCapability")
    if capability:
        gpu["compute_capability"] = "%d.%d" % (int(capability[0]), int(capability[1]))
    arch = device.get("nvmlDeviceGetArchitecture")
    gpu["architecture"] = NVML_ARCHITECTURES.get(arch) if arch is not None else None
    total = _field(device.get("nvmlDeviceGetMemoryInfo"), "total")
    gpu["memory_total_mib"] = int(total) // (1024 * 1024) if total is not None else None
    gpu["persistence_mode"] = to_bool(device.get("nvmlDeviceGetPersistenceMode"))
    limit_mw = device.get("nvmlDeviceGetEnforcedPowerLimit")
    gpu["power_limit_w"] = round(int(limit_mw) / 1000.0, 2) if limit_mw is not None else None
    # numa_node is the PCI locality from sysfs (see summarise); NVML's
    # nvmlDeviceGetNumaNodeId is the GPU memory's own node on coherent
    # platforms, another fact.
    virt = device.get("nvmlDeviceGetVirtualizationMode")
    gpu["virtualization_mode"] = _NVML_VIRTUALIZATION_MODES.get(virt) if virt is not None else None

    mig_mode = device.get("nvmlDeviceGetMigMode")
    if mig_mode:
        gpu["mig"]["capable"] = True
        gpu["mig"]["current_mode"] = to_mode(mig_mode[0])
        gpu["mig"]["pending_mode"] = to_mode(mig_mode[1])
        if gpu["mig"]["current_mode"] == "enabled":
            gpu["mig"]["devices"] = _nvml_mig_devices(nvml, device)

    ecc = gpu["ecc"]
    ecc_mode = device.get("nvmlDeviceGetEccMode")
    if ecc_mode:
        ecc["current_mode"] = to_mode(ecc_mode[0])
        ecc["pending_mode"] = to_mode(ecc_mode[1])
    if ecc["current_mode"] is not None:
        ecc["volatile_correctable"] = device.get(
            "nvmlDeviceGetTotalEccErrors", _NVML_MEMORY_ERROR_CORRECTED, _NVML_VOLATILE_ECC)
        ecc["volatile_uncorrectable"] = device.get(
            "nvmlDeviceGetTotalEccErrors", _NVML_MEMORY_ERROR_UNCORRECTED, _NVML_VOLATILE_ECC)
        ecc["aggregate_correctable"] = device.get(
            "nvmlDeviceGetTotalEccErrors", _NVML_MEMORY_ERROR_CORRECTED, _NVML_AGGREGATE_ECC)
        ecc["aggregate_uncorrectable"] = device.get(
            "nvmlDeviceGetTotalEccErrors", _NVML_MEMORY_ERROR_UNCORRECTED, _NVML_AGGREGATE_ECC)

    health = gpu["health"]
    health["retired_pages_pending"] = to_bool(device.get("nvmlDeviceGetRetiredPagesPendingStatus"))
    single = device.get("nvmlDeviceGetRetiredPages", _NVML_PAGE_RETIREMENT_MULTIPLE_SBE)
    double = device.get("nvmlDeviceGetRetiredPages", _NVML_PAGE_RETIREMENT_DBE)
    health["retired_pages_single_bit"] = len(single) if single is not None else None
    health["retired_pages_double_bit"] = len(double) if double is not None else None
    remapped = device.get("nvmlDeviceGetRemappedRows")
    if remapped:
        health["remapped_rows_correctable"] = remapped[0]
        health["remapped_rows_uncorrectable"] = remapped[1]
        health["remapped_rows_pending"] = bool(remapped[2])
        health["remapped_rows_failure"] = bool(remapped[3])
    gpu["fabric"] = _nvml_fabric(nvml, device)

    if device.fault is not None:
        gpu["error"] = device.fault.text
        return gpu, device.fault.code
    return gpu, None


_NVML_INIT_OUTCOMES = {
    NVML_ERROR_DRIVER_NOT_LOADED: "not_loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "not_installed",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "mismatch",
}


def query_nvml(nvml):
    """Ask NVML through an adapter with ``init()``, ``shutdown()``, ``call(name, *args)``.

    ``call`` returns plain Python data (structs as dicts) and raises
    NvmlCallError. Returns an answer dict: ``outcome`` (ok, no_devices,
    not_loaded, not_installed, mismatch, error), ``message`` and, when NVML
    answered, ``driver_version``, ``cuda_driver_version`` and ``gpus``.
    """
    try:
        nvml.init()
    except NvmlCallError as err:
        return {
            "outcome": _NVML_INIT_OUTCOMES.get(err.code, "error"),
            "message": "NVML: %s" % err.text,
        }
    try:
        try:
            driver_version = plain_version(nvml.call("nvmlSystemGetDriverVersion"))
            count = int(nvml.call("nvmlDeviceGetCount"))
        except NvmlCallError as err:
            return {"outcome": _NVML_INIT_OUTCOMES.get(err.code, "error"), "message": "NVML: %s" % err.text}
        cuda = None
        for function in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
            try:
                cuda = cuda_version_string(nvml.call(function))
                break
            except NvmlCallError:
                continue
        gpus = []
        lost = []
        for index in range(count):
            gpu, fault = _nvml_gpu(nvml, index)
            gpus.append(gpu)
            if fault == NVML_ERROR_GPU_IS_LOST:
                lost.append({"pci_address": gpu["pci_address"], "gpu_index": index, "source": "nvml",
                             "message": "NVML: %s" % gpu["error"]})
    finally:
        try:
            nvml.shutdown()
        except NvmlCallError:
            pass
    return {
        "outcome": "ok" if gpus else "no_devices",
        "message": None,
        "driver_version": driver_version,
        "cuda_driver_version": cuda,
        "gpus": gpus,
        "lost": lost,
    }


class PynvmlAdapter(object):
    """Adapter over NVIDIA's ``pynvml`` bindings (nvidia-ml-py or python3-pynvml).

    Converts ctypes structures to dicts and bytes to str, and NVMLError to
    NvmlCallError, so that ``query_nvml`` sees the same data as in tests.
    """

    def __init__(self, pynvml):
        self._nvml = pynvml

    def _invoke(self, function, *args):
        try:
            return _plain(function(*args))
        except self._nvml.NVMLError as err:
            raise NvmlCallError(getattr(err, "value", None), str(err))

    def init(self):
        self._invoke(self._nvml.nvmlInit)

    def shutdown(self):
        self._invoke(self._nvml.nvmlShutdown)

    def call(self, name, *args):
        if name == "nvmlDeviceGetGpuFabricInfoV":
            return self.gpu_fabric_info(*args)
        function = getattr(self._nvml, name, None)
        if function is None:
            # Bindings older than the function: the same answer NVML gives
            # for a driver older than the function.
            raise NvmlCallError(NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found")
        return self._invoke(function, *args)

    # nvidia-ml-py's fabric calls take a struct by reference and return only
    # the status: nvmlDeviceGetGpuFabricInfoV(device, byref(info)) with
    # c_nvmlGpuFabricInfo_v3_t / _v2_t (versioned, nvmlGpuFabricInfo_v3 / _v2),
    # or the older nvmlDeviceGetGpuFabricInfo(device, byref(info)) with
    # c_nvmlGpuFabricInfo_t (cliqueId, named partitionId in early bindings).
    _FABRIC_STRUCTS = (
        ("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3"),
        ("c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2"),
        ("c_nvmlGpuFabricInfoV_t", "nvmlGpuFabricInfo_v2"),
    )

    def _fabric_attempts(self):
        nvml = self._nvml
        attempts = []
        versioned = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
        if versioned is not None:
            for struct_name, version_name in self._FABRIC_STRUCTS:
                struct = getattr(nvml, struct_name, None)
                version = getattr(nvml, version_name, None)
                if struct is not None and version is not None and struct not in [a[1] for a in attempts]:
                    attempts.append((versioned, struct, version))
        legacy = getattr(nvml, "nvmlDeviceGetGpuFabricInfo", None)
        struct = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
        if legacy is not None and struct is not None:
            attempts.append((legacy, struct, None))
        return attempts

    def gpu_fabric_info(self, handle):
        """The GPU's fabric info as a dict: state, status, cliqueId, clusterUuid, healthSummary.

        Tries the newest struct the bindings define; a driver that does not
        know that struct version (ArgumentVersionMismatch) or the versioned
        call (FunctionNotFound) gets the next. Bindings without any fabric
        call answer FunctionNotFound, as NVML does for a driver without it.
        """
        attempts = self._fabric_attempts()
        failure = NvmlCallError(NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found")
        for function, struct, version in attempts:
            info = struct()
            if version is not None:
                info.version = version
            try:
                self._invoke(function, handle, ctypes.byref(info))
            except NvmlCallError as err:
                if err.code in (NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_FUNCTION_NOT_FOUND):
                    failure = err
                    continue
                raise
            return _fabric_info_dict(info)
        raise failure


def _fabric_info_dict(info):
    names = [field[0] for field in info._fields_]
    raw = None
    if "clusterUuid" in names:
        # Read the 16 bytes themselves: a c_char array would stop at the
        # first zero byte.
        offset = getattr(type(info), "clusterUuid").offset
        raw = ctypes.string_at(ctypes.addressof(info) + offset, 16)
    clique = getattr(info, "cliqueId", None) if "cliqueId" in names else getattr(info, "partitionId", None)
    return {
        "state": int(info.state),
        "status": int(info.status),
        "cliqueId": int(clique) if clique is not None else None,
        "clusterUuid": str(uuid.UUID(bytes=raw)) if raw is not None else None,
        "healthSummary": int(info.healthSummary) if "healthSummary" in names else None,
    }


def _plain(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    fields = getattr(value, "_fields_", None)
    if fields is not None and not callable(value):
        return dict((field[0], _plain(getattr(value, field[0]))) for field in fields)
    return value


# --------------------------------------------------------------------------
# sysfs and procfs
# --------------------------------------------------------------------------

def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def is_nvswitch_class(pci_class):
    """An NVIDIA function of PCI class 0x0680xx (bridge, other) is an NVSwitch."""
    return bool(pci_class and pci_class.lower()[:6] == "0x0680")


def scan_pci(root="/sys/bus/pci/devices"):
    """NVIDIA PCI functions (vendor 0x10de) seen in sysfs, sorted by address."""
    devices = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return devices
    for name in names:
        base = os.path.join(root, name)
        if (_read(os.path.join(base, "vendor")) or "").lower() != NVIDIA_PCI_VENDOR:
            continue
        pci_class = (_read(os.path.join(base, "class")) or "").lower() or None
        driver = None
        if os.path.islink(os.path.join(base, "driver")):
            driver = os.path.basename(os.readlink(os.path.join(base, "driver")))
        numa = _read(os.path.join(base, "numa_node"))
        try:
            numa_node = int(numa) if numa is not None else None
        except ValueError:
            numa_node = None
        devices.append({
            "address": name.lower(),
            "vendor_id": NVIDIA_PCI_VENDOR,
            "device_id": (_read(os.path.join(base, "device")) or "").lower() or None,
            "class": pci_class,
            # 0x0300xx VGA, 0x0302xx 3D controller: the GPU functions, as
            # opposed to a board's audio, USB or NVSwitch bridge functions.
            "is_gpu": bool(pci_class and pci_class[:6] in ("0x0300", "0x0302")),
            # 0x0680xx "bridge, other": the NVSwitch chips of HGX/DGX boards.
            "is_nvswitch": is_nvswitch_class(pci_class),
            # An SR-IOV virtual function (vGPU hosts) has a physfn link; it is
            # no GPU of its own that the driver would report.
            "is_virtual_function": os.path.islink(os.path.join(base, "physfn")),
            "driver": driver,
            "numa_node": numa_node if numa_node is not None and numa_node >= 0 else None,
        })
    return devices


def kernel_module_version(path="/proc/driver/nvidia/version"):
    """Version of the loaded nvidia kernel module (None when not loaded)."""
    text = _read(path)
    if not text:
        return None
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


# --------------------------------------------------------------------------
# The installed kernels and their NVIDIA modules
# --------------------------------------------------------------------------

# The names the NVIDIA kernel module is installed under: NVIDIA's and Ubuntu's
# nvidia.ko, Debian's renamed nvidia-current.ko and nvidia-tesla(-<branch>).ko,
# compressed or not.
_NVIDIA_KO_RE = re.compile(r"^nvidia(-current|-tesla(-[0-9]+)?)?\.ko(\.(gz|xz|zst))?$")
# Kernel images as Debian and Ubuntu install them (vmlinux on some architectures), less what
# grub-mkconfig takes for garbage (grub_file_is_not_garbage: dpkg's and rpm's leftovers, backups,
# signatures).
_KERNEL_IMAGE_RE = re.compile(r"^vmlinu[xz]-(?P<release>[0-9][^/]*)$")
_GARBAGE_RE = re.compile(r"(\.dpkg-[a-z]+|\.rpmsave|\.rpmnew|\.bak|\.sig|\.old|~)$")
# A GRUB entry named by its place (0, 1>2): which kernel that is depends on grub.cfg's menu.
_ENTRY_NUMBER_RE = re.compile(r"^[0-9]+(>[0-9]+)*$")
# A grubenv or /etc/default/grub assignment.
_ASSIGNMENT_RE = re.compile(r"""^\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*?)\s*$""")


def version_key(release):
    """A kernel release as GRUB and linux-version order them: numbers as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"([0-9]+)", str(release)) if part]


def nvidia_module_of(release, modules="/lib/modules"):
    """Path of the NVIDIA kernel module installed for a kernel release, or None.

    DKMS installs it under updates/ (Debian, Ubuntu, NVIDIA's packages), some
    builds under extra/, Ubuntu's precompiled packages under kernel/nvidia-*/,
    NVIDIA's .run installer in kernel/drivers/video/.
    """
    base = os.path.join(modules, release)
    tops = [os.path.join(base, "updates"), os.path.join(base, "extra"), os.path.join(base, "kernel", "drivers", "video")]
    try:
        tops += sorted(os.path.join(base, "kernel", name) for name in os.listdir(os.path.join(base, "kernel"))
                       if name.startswith("nvidia"))
    except OSError:
        pass
    for top in tops:
        for folder, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if _NVIDIA_KO_RE.match(name):
                    return os.path.join(folder, name)
    return None


def _assignments(text):
    values = {}
    for line in (text or "").splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = _ASSIGNMENT_RE.match(line)
        if match:
            values[match.group("key")] = match.group("value").strip().strip("\"'")
    return values


def _release_in(entry, releases):
    """The installed release a GRUB menu entry (title or id) names: the longest that occurs in it."""
    named = [release for release in releases if release in (entry or "")]
    return max(named, key=len) if named else None


def scan_kernels(boot="/boot", modules="/lib/modules", running=None, grub_default="/etc/default/grub"):
    """The kernels installed to boot (a kernel image in ``boot``), each with its NVIDIA module.

    The next boot's kernel: a one-time ``next_entry`` of GRUB's environment block, else its
    ``saved_entry`` under ``GRUB_DEFAULT=saved``, else an entry ``GRUB_DEFAULT`` names,
    else the newest installed (GRUB's first entry, as update-grub sorts them, and Debian's
    /vmlinuz link). An entry named by its place other than the first (``1>2``), or Ubuntu's
    ``GRUB_FLAVOUR_ORDER`` (which reorders the menu), cannot be told from here: the next boot is
    then None, with the reason in ``next_boot_source``, and any installed kernel may be it.
    """
    releases = []
    try:
        names = os.listdir(boot)
    except OSError:
        names = []
    for name in names:
        match = _KERNEL_IMAGE_RE.match(name)
        if match and not _GARBAGE_RE.search(name) and os.path.isfile(os.path.join(boot, name)) and match.group("release") not in releases:
            releases.append(match.group("release"))
    releases.sort(key=version_key, reverse=True)
    next_boot, source = None, None
    if releases:
        grubenv = _assignments(_read(os.path.join(boot, "grub", "grubenv")))
        defaults = {}
        for path in [grub_default] + sorted(glob.glob(grub_default + ".d/*.cfg")):
            defaults.update(_assignments(_read(path)))
        default = defaults.get("GRUB_DEFAULT", "0")
        # GRUB boots next_entry when it is set (a name it does not find: its first entry), else
        # GRUB_DEFAULT, which "saved" makes saved_entry (GRUB's 00_header).
        if grubenv.get("next_entry"):
            what, entry = "grub next_entry", grubenv["next_entry"]
        elif default == "saved":
            what, entry = "grub saved_entry", grubenv.get("saved_entry") or "0"
        else:
            what, entry = "GRUB_DEFAULT", default
        if defaults.get("GRUB_FLAVOUR_ORDER"):
            source = "unknown: GRUB_FLAVOUR_ORDER reorders GRUB's menu"
        elif _ENTRY_NUMBER_RE.match(entry) and entry != "0":
            source = "unknown: %s %s names an entry by its place in GRUB's menu" % (what, entry)
        else:
            next_boot = _release_in(entry, releases)
            source = what if next_boot else "newest installed"
            next_boot = next_boot or releases[0]
    installed = []
    for release in releases:
        installed.append({
            "release": release,
            "nvidia_module": nvidia_module_of(release, modules),
            "running": release == running,
            "next_boot": release == next_boot,
        })
    return {
        "running": running,
        "installed": installed,
        "next_boot": next_boot,
        "next_boot_source": source,
        "without_module": [entry["release"] for entry in installed if entry["nvidia_module"] is None],
    }


# --------------------------------------------------------------------------
# The kernel log: XID events since boot
# --------------------------------------------------------------------------

# One command, filtered by journald itself. With --grep, journalctl exits 1
# and prints "-- No entries --" (stderr empty) when nothing matches.
JOURNAL_ARGS = ("-k", "-b", "0", "--no-pager", "-o", "short-monotonic", "--grep", "NVRM: Xid")

# "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has
# fallen off the bus." and the older "NVRM: Xid (0000:01:00): 3, C 00000005
# ...", after any dmesg "[  123.456789] " / "[Fri Aug 30 11:43:09 2024] " or
# journal "Nov 23 10:00:00 host kernel: " prefix (fixtures/kernel-log/SOURCES.md).
_XID_RE = re.compile(r"NVRM: Xid \((?P<where>[^)]*)\):\s*(?P<xid>\d+)\b")
_XID_WHERE_RE = re.compile(
    r"^(?:PCI:)?(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})"
    r"(?:\.(?P<function>[0-7]))?"
    # On a GPU in MIG mode the driver names the GPU and compute instance too:
    # "PCI:0000:01:00 GPU-I:05" and "PCI:0000:3b:00 GPU-I:01 GPU-CI:02".
    r"(?:\s+GPU-I:[0-9A-Fa-f]+)?(?:\s+GPU-CI:[0-9A-Fa-f]+)?$"
)
# Xid 154 carries the driver's own recovery verdict: "GPU recovery action
# changed from 0x0 (None) to 0x1 (GPU Reset Required)"; back to 0x0 (None) the
# GPU needs nothing.
_XID_154_ACTION_RE = re.compile(r"\bto\s+0x(?P<action>[0-9A-Fa-f]+)")


def _read_text(path):
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def read_kernel_log(params, probe):
    """Read the kernel log once. Returns (kernel_log fact, text or None).

    ``kernel_log_path`` reads a saved log (offline analysis, tests); otherwise
    ``kernel_log``: auto (journalctl when it answers, else dmesg), journal,
    dmesg or none. Failing to read is a fact (read false, the reason), not an
    error.
    """
    path = params.get("kernel_log_path")
    mode = params.get("kernel_log") or "auto"
    if mode not in KERNEL_LOG_MODES:
        raise InventoryError("kernel_log must be one of %s, got %r" % (", ".join(KERNEL_LOG_MODES), mode))
    if path:
        reader = getattr(probe, "read_text", None) or _read_text
        try:
            return {"source": "file", "read": True, "message": None}, reader(path)
        except (IOError, OSError) as err:
            return {"source": "file", "read": False,
                    "message": "%s: %s" % (path, getattr(err, "strerror", None) or err)}, None
    if mode == "none":
        return {"source": None, "read": False, "message": "not read (kernel_log=none)"}, None
    reasons = []
    source = None
    if mode in ("auto", "journal"):
        journalctl = probe.which("journalctl")
        if journalctl:
            source = "journal"
            rc, out, err = probe.run([journalctl] + list(JOURNAL_ARGS))
            if rc == 0 or (rc == 1 and not (err or "").strip()):
                return {"source": "journal", "read": True, "message": None}, out
            reasons.append("journalctl -k failed with rc=%s: %s" % (rc, _first_line(err, out) or "no output"))
        else:
            reasons.append("journalctl not found")
    if mode in ("auto", "dmesg"):
        dmesg = probe.which("dmesg")
        if dmesg:
            source = "dmesg"
            rc, out, err = probe.run([dmesg])
            if rc == 0:
                return {"source": "dmesg", "read": True, "message": None}, out
            reasons.append("dmesg failed with rc=%s: %s" % (rc, _first_line(err, out) or "no output"))
        else:
            reasons.append("dmesg not found")
    return {"source": source, "read": False, "message": "; ".join(reasons)}, None


def _xid_gpu(where, gpus):
    """(pci_address, gpu_index) of an XID line's "PCI:0000:3b:00" (no function)."""
    match = _XID_WHERE_RE.match(where.strip())
    if not match:
        return None, None
    prefix = "%04x:%s:%s" % (int(match.group("domain"), 16), match.group("bus").lower(),
                             match.group("device").lower())
    function = match.group("function")
    candidates = [gpu for gpu in gpus if (gpu.get("pci_address") or "").startswith(prefix + ".")]
    if function is not None:
        exact = [gpu for gpu in candidates if gpu["pci_address"] == "%s.%s" % (prefix, function)]
        candidates = exact or candidates
    if candidates:
        return candidates[0]["pci_address"], candidates[0]["index"]
    return "%s.%s" % (prefix, function or "0"), None


def parse_xid_events(text, gpus=(), unhealthy_xids=DEFAULT_UNHEALTHY_XIDS):
    """XID events of a kernel log: one entry per (PCI address, XID), in log order of first sight."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    unhealthy = frozenset(int(xid) for xid in unhealthy_xids)
    events = {}
    for line in (text or "").splitlines():
        if "NVRM: Xid" not in line:
            continue
        match = _XID_RE.search(line)
        if not match:
            continue
        xid = int(match.group("xid"))
        address, index = _xid_gpu(match.group("where"), gpus)
        key = (address, xid)
        event = events.get(key)
        if event is None:
            name, action = XID_CATALOG.get(xid, (None, None))
            event = events[key] = {
                "pci_address": address,
                "gpu_index": index,
                "xid": xid,
                "name": name,
                "action": action,
                "fatal": xid in unhealthy,
                "count": 0,
                "last": None,
            }
        event["count"] += 1
        event["last"] = line.strip()
        if xid == 154:
            action = _XID_154_ACTION_RE.search(line)
            if action:
                # Only the latest recovery action counts; None (0x0) means recovered.
                event["fatal"] = xid in unhealthy and int(action.group("action"), 16) != 0
    return list(events.values())


# --------------------------------------------------------------------------
# Lost GPUs and health
# --------------------------------------------------------------------------

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
