# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVML reader: GPU entries from the driver's library through pynvml.

The NVML return codes and enumerations the inventory uses, ``query_nvml``
(which reads every GPU through an adapter, so that the unit tests feed
recorded readings) and ``PynvmlAdapter``, the adapter over the real pynvml.
"""

from __future__ import annotations

import ctypes
import re
import uuid

from ansible_collections.gpufleet.nvidia.plugins.module_utils.inventory_values import (
    _NVML_VIRTUALIZATION_MODES,
    clean,
    cuda_version_string,
    empty_fabric,
    empty_gpu,
    empty_mig_device,
    pci_address,
    plain_version,
    to_bool,
    to_mode,
)


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


# nvmlGpuFabricInfo_v3_t.healthSummary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*).
_NVML_FABRIC_HEALTH_SUMMARIES = {
    1: "Healthy",
    2: "Unhealthy",
    3: "Limited Capacity",
}


_NVML_MEMORY_ERROR_CORRECTED = 0
_NVML_MEMORY_ERROR_UNCORRECTED = 1
_NVML_VOLATILE_ECC = 0
_NVML_AGGREGATE_ECC = 1
_NVML_PAGE_RETIREMENT_MULTIPLE_SBE = 0
_NVML_PAGE_RETIREMENT_DBE = 1


_MIG_NAME_PROFILE_RE = re.compile(r"\bMIG\s+(\S+)\s*$")


class NvmlCallError(Exception):
    """An NVML call returned an error code; ``text`` is NVML's own wording."""

    def __init__(self, code, text):
        super().__init__(text)
        self.code = code
        self.text = text


def nvml_return_text(code):
    """An nvmlReturn_t handed back as data: 'NVML_ERROR_TIMEOUT (10)'."""
    if code is None:
        return None
    return "%s (%d)" % (_NVML_RETURN_NAMES.get(int(code), "NVML error"), int(code))


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
