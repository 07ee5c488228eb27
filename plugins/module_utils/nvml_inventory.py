# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPU inventory: NVML readings and nvidia-smi output to one facts dict.

Everything here is pure data handling: no Ansible imports, no global state.
Input and output go through a *probe* object (see ``gather``), so that the
unit tests feed recorded readings and real captures instead of a GPU.

Policy (what the facts say about a host):

* the driver is asked first; the PCI scan (sysfs, vendor 0x10de) only
  explains a driver that does not answer, it never overrides one that does;
* absence of a GPU or a driver is a normal *state*, not an error;
* a tool that is present but answers garbage raises ``InventoryError`` with
  rc/stdout/stderr attached, which the module turns into a failure.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

STATES = (
    "ok",
    "no_gpu",
    "driver_not_installed",
    "driver_not_loaded",
    "driver_mismatch",
    "error",
)
SOURCES = ("auto", "nvml", "nvidia_smi")
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
        "error": None,
    }


def empty_mig_device(index):
    return {
        "index": index,
        "gpu_instance_id": None,
        "compute_instance_id": None,
        "profile": None,
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
    return gpu


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
    return {
        "driver_version": clean(_text(root, "driver_version")),
        "cuda_driver_version": clean(_text(root, "cuda_version")),
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
)


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
        if outcome == "gpu_lost" and "<nvidia_smi_log" in (out or ""):
            # The GPUs that still answer are printed before the failure.
            try:
                partial = parse_smi_xml(out[out.index("<"):])
            except InventoryError:
                partial = None
            if partial:
                answer.update(driver_version=partial["driver_version"],
                              cuda_driver_version=partial["cuda_driver_version"], gpus=partial["gpus"])
        return answer
    try:
        parsed = parse_smi_xml(out)
    except InventoryError as exc:
        raise InventoryError(str(exc), rc=rc, stdout=out, stderr=err, cmd=[executable, "-q", "-x"])
    answer = {
        "outcome": "ok" if parsed["gpus"] else "no_devices",
        "message": None,
        "driver_version": parsed["driver_version"],
        "cuda_driver_version": parsed["cuda_driver_version"],
        "gpus": parsed["gpus"],
    }
    needs_list = any(
        device["uuid"] is None or device["profile"] is None
        for gpu in parsed["gpus"] for device in gpu["mig"]["devices"]
    )
    if needs_list:
        list_rc, list_out, dummy = run([executable, "-L"])
        if list_rc == 0:
            merge_smi_list(parsed["gpus"], parse_smi_list(list_out))
    return answer


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


def _nvml_gpu(nvml, index):
    gpu = empty_gpu(index)
    try:
        handle = nvml.call("nvmlDeviceGetHandleByIndex", index)
    except NvmlCallError as err:
        gpu["error"] = err.text
        return gpu
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

    if device.fault is not None:
        gpu["error"] = device.fault.text
    return gpu


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
            driver_version = clean(nvml.call("nvmlSystemGetDriverVersion"))
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
        gpus = [_nvml_gpu(nvml, index) for index in range(count)]
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
        function = getattr(self._nvml, name, None)
        if function is None:
            # Bindings older than the function: the same answer NVML gives
            # for a driver older than the function.
            raise NvmlCallError(NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found")
        return self._invoke(function, *args)


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
# The whole inventory
# --------------------------------------------------------------------------

def _count_phrase(count, noun):
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


_UNREAD_OUTCOMES = ("not_installed", "no_reader")


def summarise(answer, pci_devices, driver_installed, module_version):
    """Turn a source's answer plus what the host shows into the state facts.

    ``driver_installed`` says whether the NVML library is on the host.
    ``driver_loaded`` is true when the driver answered (even with a fault or
    a version mismatch), false when it said it is not loaded, and otherwise
    whether /proc shows a loaded kernel module.
    """
    outcome = answer["outcome"]
    gpus = answer.get("gpus") or []
    words = answer.get("message")
    gpu_functions = [d for d in pci_devices if d["is_gpu"]]

    if outcome == "not_loaded":
        loaded = False
    elif outcome in _UNREAD_OUTCOMES:
        loaded = bool(module_version)
    else:
        loaded = True
    facts = {
        "state": None,
        "message": None,
        # Any answer but "not installed" came from the driver's library.
        "driver_installed": bool(driver_installed) if outcome in _UNREAD_OUTCOMES else True,
        "driver_loaded": loaded,
        "kernel_module_version": module_version,
        "driver_version": answer.get("driver_version"),
        "cuda_driver_version": answer.get("cuda_driver_version"),
        "gpu_count": len(gpus),
        "gpus": gpus,
        "pci_devices": pci_devices,
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
    if outcome == "ok":
        faulty = [gpu for gpu in gpus if gpu["error"]]
        if faulty:
            facts["state"] = "error"
            facts["message"] = "; ".join(
                "GPU %d (%s): %s" % (gpu["index"], gpu["pci_bus_id"] or "unknown bus id", gpu["error"])
                for gpu in faulty)
        else:
            facts["state"] = "ok"
            facts["message"] = "%s, driver %s" % (
                _count_phrase(len(gpus), "GPU"), facts["driver_version"] or "of unknown version")
    elif outcome == "mismatch":
        facts["state"] = "driver_mismatch"
        loaded = " (kernel module %s loaded)" % module_version if module_version else ""
        facts["message"] = "the loaded kernel module and the driver libraries differ%s, reboot or reload " \
            "the module; %s" % (loaded, words)
    elif outcome == "error":
        facts["state"] = "error"
        facts["message"] = words
    elif outcome == "gpu_lost":
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
    else:  # no_devices while the PCI bus shows GPUs
        facts["state"] = "error"
        facts["message"] = "%s but the driver reports none; %s" % (pci_words, words or "no devices")
    return facts


def gather(params, probe):
    """Collect ``ansible_facts['nvidia']``.

    ``probe`` gives the I/O: ``pynvml()`` (the module or None),
    ``which(name)``, ``run(argv)``, ``pci_devices()``,
    ``nvml_library_present()``, ``kernel_module_version()``.
    """
    source = params.get("source") or "auto"
    if source not in SOURCES:
        raise InventoryError("source must be one of %s, got %r" % (", ".join(SOURCES), source))
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

    facts = summarise(
        answer,
        probe.pci_devices(),
        driver_installed=probe.nvml_library_present(),
        module_version=probe.kernel_module_version(),
    )
    facts["source"] = source
    return facts
