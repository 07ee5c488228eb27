"""What NVML answers when asked directly through pynvml, as JSON: the test's own reading, to hold
nvml_facts' facts against (molecule nvml_facts, verify.yml). Each value is one plain pynvml call;
a call NVML answers with an error gives the error's text."""

import json

import pynvml


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def ask(call, *args):
    try:
        return text(call(*args))
    except pynvml.NVMLError as err:
        return "error: %s" % err


def mig_devices(handle):
    devices = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        devices.append({
            "uuid": ask(pynvml.nvmlDeviceGetUUID, mig),
            "name": ask(pynvml.nvmlDeviceGetName, mig),
            "gpu_instance_id": ask(pynvml.nvmlDeviceGetGpuInstanceId, mig),
            "compute_instance_id": ask(pynvml.nvmlDeviceGetComputeInstanceId, mig),
            "memory_total": pynvml.nvmlDeviceGetMemoryInfo(mig).total,
        })
    return devices


def gpu(index):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    return {
        "index": index,
        "uuid": ask(pynvml.nvmlDeviceGetUUID, handle),
        "name": ask(pynvml.nvmlDeviceGetName, handle),
        "pci_bus_id": text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
        "pci_device_id": pynvml.nvmlDeviceGetPciInfo(handle).pciDeviceId,
        "minor_number": ask(pynvml.nvmlDeviceGetMinorNumber, handle),
        "memory_total": pynvml.nvmlDeviceGetMemoryInfo(handle).total,
        "compute_capability": list(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
        "serial": ask(pynvml.nvmlDeviceGetSerial, handle),
        "mig_mode": [current, pending],
        "mig_devices": mig_devices(handle) if current == 1 else [],
    }


pynvml.nvmlInit()
try:
    print(json.dumps({
        "driver_version": ask(pynvml.nvmlSystemGetDriverVersion),
        "cuda_driver_version": ask(pynvml.nvmlSystemGetCudaDriverVersion),
        "gpus": [gpu(index) for index in range(pynvml.nvmlDeviceGetCount())],
    }))
finally:
    pynvml.nvmlShutdown()
