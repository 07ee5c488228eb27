# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVML readings replayed to the pure gather code, and the replaying adapter.

Each reading lists what every NVML call returns for one host, in the shapes
that ``PynvmlAdapter`` hands on (ctypes structures as dicts, bytes as str).
An error is ``err(code, text)`` with NVML's own code and nvmlErrorString()
text. Values are transcribed from the real captures in fixtures/nvidia-smi/
(named per reading); the NVML-only values that no nvidia-smi capture prints
(compute capability, architecture code, NUMA node) are the documented ones
for that product. The adapter fails the test on any call a reading does not
list, so a reading is always complete for the code under test.
"""

from __future__ import annotations

import copy

from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_inventory import NvmlCallError


def err(code, text):
    return {"__error__": [code, text]}


NOT_SUPPORTED = err(3, "Not Supported")
NOT_FOUND = err(6, "Not Found")
DRIVER_NOT_LOADED = err(9, "Driver Not Loaded")
LIBRARY_NOT_FOUND = err(12, "NVML Shared Library Not Found")
FUNCTION_NOT_FOUND = err(13, "Function Not Found")
GPU_IS_LOST = err(15, "GPU is lost")
RM_MISMATCH = err(18, "RM has detected an NVML/RM version mismatch.")

MIB = 1024 * 1024


def _device(name, uuid, bus_id, device_id, memory_mib, **overrides):
    """A device's readings with the calls every GPU answers; ``overrides`` win."""
    calls = {
        "nvmlDeviceGetUUID": uuid,
        "nvmlDeviceGetName": name,
        "nvmlDeviceGetSerial": NOT_SUPPORTED,
        "nvmlDeviceGetPciInfo": {"busId": bus_id, "pciDeviceId": device_id, "domain": 0, "bus": 0, "device": 0},
        "nvmlDeviceGetMinorNumber": 0,
        "nvmlDeviceGetVbiosVersion": NOT_SUPPORTED,
        "nvmlDeviceGetCudaComputeCapability": NOT_SUPPORTED,
        "nvmlDeviceGetArchitecture": NOT_SUPPORTED,
        "nvmlDeviceGetMemoryInfo": {"total": memory_mib * MIB, "free": 0, "used": 0},
        "nvmlDeviceGetPersistenceMode": 0,
        "nvmlDeviceGetEnforcedPowerLimit": NOT_SUPPORTED,
        "nvmlDeviceGetVirtualizationMode": 0,
        "nvmlDeviceGetMigMode": NOT_SUPPORTED,
        "nvmlDeviceGetEccMode": NOT_SUPPORTED,
        "nvmlDeviceGetRetiredPagesPendingStatus": NOT_SUPPORTED,
        "nvmlDeviceGetRetiredPages(0)": NOT_SUPPORTED,
        "nvmlDeviceGetRetiredPages(1)": NOT_SUPPORTED,
        "nvmlDeviceGetRemappedRows": NOT_SUPPORTED,
        # A board without NVSwitch fabric: nvidia-smi prints the fabric state
        # as N/A (every v12/v13 XML capture in fixtures/nvidia-smi/).
        "nvmlDeviceGetGpuFabricInfoV": NOT_SUPPORTED,
    }
    calls.update(overrides)
    return calls


def fabric_info(state, status=0, clique_id=0, cluster_uuid="00000000-0000-0000-0000-000000000000",
                health_summary=0):
    """nvmlDeviceGetGpuFabricInfoV as PynvmlAdapter.gpu_fabric_info hands it on.

    state: 0 not supported, 1 not started, 2 in progress, 3 completed;
    status: an nvmlReturn_t (0 success); health_summary 0 is "not supported",
    which nvidia-smi prints as N/A.
    """
    return {"state": state, "status": status, "cliqueId": clique_id, "clusterUuid": cluster_uuid,
            "healthSummary": health_summary}


def _ecc_counts(corrected_volatile, uncorrected_volatile, corrected_aggregate, uncorrected_aggregate):
    return {
        "nvmlDeviceGetTotalEccErrors(0,0)": corrected_volatile,
        "nvmlDeviceGetTotalEccErrors(1,0)": uncorrected_volatile,
        "nvmlDeviceGetTotalEccErrors(0,1)": corrected_aggregate,
        "nvmlDeviceGetTotalEccErrors(1,1)": uncorrected_aggregate,
    }


_SYSTEM_590 = {
    "nvmlSystemGetDriverVersion": "590.48.01",
    "nvmlSystemGetCudaDriverVersion_v2": 13010,
}

# nvgpuexp-capture-linux-h100-80gb-hbm3-driver-590.48.01.txt: H100 SXM in a
# pass-through VM, ECC on, 700 W, remapped rows answered on Hopper. Its -q
# text prints Fabric State Completed, Status Success, CliqueId 0, ClusterUUID
# 00000000-0000-0000-0000-000000000000 and every Health field N/A.
H100 = {
    "init": None,
    "system": dict(_SYSTEM_590, nvmlDeviceGetCount=1),
    "devices": [
        _device(
            "NVIDIA H100 80GB HBM3", "GPU-00000000-0000-0000-0000-000000000000",
            "00000000:00:09.0", 0x233010DE, 81559,
            nvmlDeviceGetSerial="0000000000000",
            nvmlDeviceGetVbiosVersion="96.00.A5.00.01",
            nvmlDeviceGetCudaComputeCapability=[9, 0],
            nvmlDeviceGetArchitecture=9,
            nvmlDeviceGetPersistenceMode=1,
            nvmlDeviceGetEnforcedPowerLimit=700000,
            nvmlDeviceGetVirtualizationMode=1,
            nvmlDeviceGetMigMode=[0, 0],
            nvmlDeviceGetEccMode=[1, 1],
            nvmlDeviceGetRetiredPagesPendingStatus=NOT_SUPPORTED,
            nvmlDeviceGetRemappedRows=[0, 0, 0, 0],
            nvmlDeviceGetGpuFabricInfoV=fabric_info(3),
            **_ecc_counts(0, 0, 0, 0)
        ),
    ],
}

# nvgpuexp-capture-linux-h200-driver-590.48.01.txt (-q section): H200 in a
# pass-through VM at bus 83:00.0, 143771 MiB, ECC on, 700 W, VBIOS
# 96.00.A5.00.03, retired pages N/A, remapped rows 0/0/No/No, and the same
# fabric block as the H100: Completed, Success, CliqueId 0, zero ClusterUUID.
H200 = {
    "init": None,
    "system": dict(_SYSTEM_590, nvmlDeviceGetCount=1),
    "devices": [
        _device(
            "NVIDIA H200", "GPU-00000000-0000-0000-0000-000000000000",
            "00000000:83:00.0", 0x233510DE, 143771,
            nvmlDeviceGetSerial="0000000000000",
            nvmlDeviceGetVbiosVersion="96.00.A5.00.03",
            nvmlDeviceGetCudaComputeCapability=[9, 0],
            nvmlDeviceGetArchitecture=9,
            nvmlDeviceGetPersistenceMode=1,
            nvmlDeviceGetEnforcedPowerLimit=700000,
            nvmlDeviceGetVirtualizationMode=1,
            nvmlDeviceGetMigMode=[0, 0],
            nvmlDeviceGetEccMode=[1, 1],
            nvmlDeviceGetRetiredPagesPendingStatus=NOT_SUPPORTED,
            nvmlDeviceGetRemappedRows=[0, 0, 0, 0],
            nvmlDeviceGetGpuFabricInfoV=fabric_info(3),
            **_ecc_counts(0, 0, 0, 0)
        ),
    ],
}

# nvgpuexp-capture-linux-h100-mig-driver-590.48.01.txt: the same board with
# MIG on, four MIG devices (3g.40gb, 2g.20gb, 1g.10gb x2) in slots 0-3 of 7;
# remapped rows are N/A while MIG instances exist.
_H100_MIG_SLOTS = {
    0: ("3g.40gb", "MIG-00000000-0000-0000-0000-000000000000", 2, 40448, 60),
    1: ("2g.20gb", "MIG-00000001-0000-0000-0000-000000000001", 3, 20096, 32),
    2: ("1g.10gb", "MIG-00000002-0000-0000-0000-000000000002", 9, 9984, 16),
    3: ("1g.10gb", "MIG-00000003-0000-0000-0000-000000000003", 10, 9984, 16),
}
H100_MIG = copy.deepcopy(H100)
H100_MIG["devices"][0].update({
    "nvmlDeviceGetMigMode": [1, 1],
    "nvmlDeviceGetRemappedRows": NOT_SUPPORTED,
    "nvmlDeviceGetMaxMigDeviceCount": 7,
    "mig": dict(
        (slot, {
            "nvmlDeviceGetUUID": uuid,
            "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3 MIG %s" % profile,
            "nvmlDeviceGetGpuInstanceId": gi,
            "nvmlDeviceGetComputeInstanceId": 0,
            "nvmlDeviceGetMemoryInfo": {"total": memory * MIB, "free": 0, "used": 0},
            "nvmlDeviceGetAttributes": {"multiprocessorCount": sms, "sharedCopyEngineCount": 1},
        })
        for slot, (profile, uuid, gi, memory, sms) in _H100_MIG_SLOTS.items()
    ),
})

# nvgpuexp-capture-linux-rtx-4080-super-driver-595.71.05.txt: a consumer
# board: ECC, MIG, page retirement and row remapping all answer NotSupported.
RTX_4080_SUPER = {
    "init": None,
    "system": {
        "nvmlSystemGetDriverVersion": "595.71.05",
        "nvmlSystemGetCudaDriverVersion_v2": 13020,
        "nvmlDeviceGetCount": 1,
    },
    "devices": [
        _device(
            "NVIDIA GeForce RTX 4080 SUPER", "GPU-00000000-0000-0000-0000-000000000000",
            "00000000:01:00.0", 0x270210DE, 16376,
            nvmlDeviceGetCudaComputeCapability=[8, 9],
            nvmlDeviceGetArchitecture=8,
            nvmlDeviceGetEnforcedPowerLimit=320000,
        ),
    ],
}

# A Pascal board on a 418 driver with bindings newer than the driver
# (telegraf-quadro-p400-driver-418.43-no-doctype.xml): the newer entry
# points answer FunctionNotFound, the older CUDA version call still works.
QUADRO_P400_OLD_DRIVER = {
    "init": None,
    "system": {
        "nvmlSystemGetDriverVersion": "418.43",
        "nvmlSystemGetCudaDriverVersion_v2": FUNCTION_NOT_FOUND,
        "nvmlSystemGetCudaDriverVersion": 10010,
        "nvmlDeviceGetCount": 1,
    },
    "devices": [
        _device(
            "Quadro P400", "GPU-8f750be4-dfbc-23b9-b33f-da729a536494",
            "00000000:01:00.0", 0x1CB310DE, 1998,
            nvmlDeviceGetCudaComputeCapability=[6, 1],
            nvmlDeviceGetArchitecture=FUNCTION_NOT_FOUND,
            nvmlDeviceGetMigMode=FUNCTION_NOT_FOUND,
            nvmlDeviceGetRemappedRows=FUNCTION_NOT_FOUND,
            nvmlDeviceGetGpuFabricInfoV=FUNCTION_NOT_FOUND,
            nvmlDeviceGetEccMode=NOT_SUPPORTED,
            nvmlDeviceGetRetiredPagesPendingStatus=NOT_SUPPORTED,
        ),
    ],
}

# Two boards reporting one UUID (masked capture, telegraf-2x-rtx-2070): they
# stay two GPUs, told apart by bus id.
TWO_GPUS_SAME_UUID = {
    "init": None,
    "system": {
        "nvmlSystemGetDriverVersion": "590.44.01",
        "nvmlSystemGetCudaDriverVersion_v2": 13010,
        "nvmlDeviceGetCount": 2,
    },
    "devices": [
        _device("NVIDIA GeForce RTX 2070", "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                "00000000:01:00.0", 0x1F0210DE, 8192,
                nvmlDeviceGetCudaComputeCapability=[7, 5], nvmlDeviceGetArchitecture=6),
        _device("NVIDIA GeForce RTX 2070", "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                "00000000:02:00.0", 0x1F0210DE, 8192, nvmlDeviceGetMinorNumber=1,
                nvmlDeviceGetCudaComputeCapability=[7, 5], nvmlDeviceGetArchitecture=6),
    ],
}

# Four-GPU host on which GPU 3 fell off the bus: NVML still counts it, its
# handle answers GpuIsLost; GPUs 0-2 answer normally.
_H100_DEVICE = H100["devices"][0]
GPU_LOST = {
    "init": None,
    "system": dict(_SYSTEM_590, nvmlDeviceGetCount=4),
    "devices": [
        dict(_H100_DEVICE, nvmlDeviceGetPciInfo=dict(_H100_DEVICE["nvmlDeviceGetPciInfo"], busId="00000000:%02X:00.0" % bus))
        for bus in (0x18, 0x2A, 0x3A)
    ] + [{"nvmlDeviceGetHandleByIndex": GPU_IS_LOST}],
}

# A GPU whose handle opens but whose memory query fails with GpuIsLost halfway.
GPU_LOST_MIDWAY = copy.deepcopy(H100)
GPU_LOST_MIDWAY["devices"][0]["nvmlDeviceGetMemoryInfo"] = GPU_IS_LOST

# A MIG device whose memory query fails with GpuIsLost: the fault reaches the GPU.
MIG_DEVICE_LOST = copy.deepcopy(H100_MIG)
MIG_DEVICE_LOST["devices"][0]["mig"][1]["nvmlDeviceGetMemoryInfo"] = GPU_IS_LOST

# A board whose infoROM is corrupted: a health fault, not an unknown value.
CORRUPTED_INFOROM = copy.deepcopy(H100)
CORRUPTED_INFOROM["devices"][0]["nvmlDeviceGetVbiosVersion"] = err(14, "Corrupted infoROM")

# Fabric states no capture shows, on the H100 reading: the fabric manager
# still setting up the fabric, and a setup that completed with an error.
FABRIC_IN_PROGRESS = copy.deepcopy(H100)
FABRIC_IN_PROGRESS["devices"][0]["nvmlDeviceGetGpuFabricInfoV"] = fabric_info(2, status=3)
FABRIC_FAILED = copy.deepcopy(H100)
FABRIC_FAILED["devices"][0]["nvmlDeviceGetGpuFabricInfoV"] = fabric_info(3, status=999)

# nvmlInit() failures, as NVML words them.
DRIVER_NOT_LOADED_HOST = {"init": DRIVER_NOT_LOADED}
LIBRARY_MISSING_HOST = {"init": LIBRARY_NOT_FOUND}
MISMATCH_HOST = {"init": RM_MISMATCH}
NO_DEVICES = {"init": None, "system": dict(_SYSTEM_590, nvmlDeviceGetCount=0), "devices": []}


class RecordedNvml(object):
    """Replays a reading through the adapter interface query_nvml() uses."""

    def __init__(self, reading):
        self.reading = reading
        self.calls = []
        self.shut_down = False

    @staticmethod
    def _answer(value):
        if isinstance(value, dict) and "__error__" in value:
            code, text = value["__error__"]
            raise NvmlCallError(code, text)
        return copy.deepcopy(value)

    def init(self):
        self.calls.append("nvmlInit")
        self._answer(self.reading["init"])

    def shutdown(self):
        self.shut_down = True

    def call(self, name, *args):
        self.calls.append(name)
        if not args:
            return self._answer(self._lookup(self.reading["system"], name))
        handle, rest = args[0], args[1:]
        if name == "nvmlDeviceGetHandleByIndex":
            device = self.reading["devices"][handle]
            self._answer(device.get(name))
            return ("gpu", handle)
        calls = self.reading["devices"][handle[1]]
        if handle[0] == "mig":
            calls = calls["mig"][handle[2]]
        if name == "nvmlDeviceGetMigDeviceHandleByIndex":
            slot = rest[0]
            if slot not in calls.get("mig", {}):
                raise NvmlCallError(6, "Not Found")
            return ("mig", handle[1], slot)
        if rest:
            name = "%s(%s)" % (name, ",".join(str(arg) for arg in rest))
        return self._answer(self._lookup(calls, name))

    @staticmethod
    def _lookup(calls, name):
        assert name in calls, "the reading does not list %s; add what NVML answers" % name
        return calls[name]
