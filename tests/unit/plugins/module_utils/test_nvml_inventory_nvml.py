# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVML path and the state summary, fed with recorded readings."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "nvidia-smi")

H100_PCI = {
    "address": "0000:00:09.0", "vendor_id": "0x10de", "device_id": "0x2330", "class": "0x030200",
    "is_gpu": True, "is_nvswitch": False, "is_virtual_function": False, "driver": "nvidia", "numa_node": 1,
}


def query(reading):
    nvml = readings.RecordedNvml(reading)
    answer = inv.query_nvml(nvml)
    return answer, nvml


def test_h100():
    answer, nvml = query(readings.H100)
    assert nvml.shut_down
    assert answer["outcome"] == "ok"
    assert answer["driver_version"] == "590.48.01"
    assert answer["cuda_driver_version"] == "13.1"
    gpu = answer["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["pci_bus_id"] == "00000000:00:09.0"
    assert gpu["pci_address"] == "0000:00:09.0"
    assert gpu["pci_device_id"] == "0x2330"
    assert gpu["memory_total_mib"] == 81559
    assert gpu["compute_capability"] == "9.0"
    assert gpu["architecture"] == "Hopper"
    assert gpu["persistence_mode"] is True
    assert gpu["power_limit_w"] == 700.0
    assert gpu["virtualization_mode"] == "passthrough"
    assert gpu["serial"] == "0000000000000"
    assert gpu["mig"] == {"capable": True, "current_mode": "disabled", "pending_mode": "disabled", "devices": [],
                          "profiles": []}
    assert gpu["ecc"] == {
        "current_mode": "enabled", "pending_mode": "enabled",
        "volatile_correctable": 0, "volatile_uncorrectable": 0,
        "aggregate_correctable": 0, "aggregate_uncorrectable": 0,
    }
    assert gpu["health"]["remapped_rows_pending"] is False
    assert gpu["health"]["remapped_rows_failure"] is False
    assert gpu["health"]["retired_pages_pending"] is None
    assert gpu["error"] is None


def test_h100_mig_devices():
    answer, nvml = query(readings.H100_MIG)
    gpu = answer["gpus"][0]
    assert gpu["mig"]["current_mode"] == "enabled"
    assert [(d["index"], d["profile"], d["gpu_instance_id"], d["memory_total_mib"], d["multiprocessor_count"], d["uuid"])
            for d in gpu["mig"]["devices"]] == [
        (0, "3g.40gb", 2, 40448, 60, "MIG-00000000-0000-0000-0000-000000000000"),
        (1, "2g.20gb", 3, 20096, 32, "MIG-00000001-0000-0000-0000-000000000001"),
        (2, "1g.10gb", 9, 9984, 16, "MIG-00000002-0000-0000-0000-000000000002"),
        (3, "1g.10gb", 10, 9984, 16, "MIG-00000003-0000-0000-0000-000000000003"),
    ]
    # Remapped rows answer NotSupported while MIG instances exist: unknown, not an error.
    assert gpu["health"]["remapped_rows_pending"] is None
    assert gpu["error"] is None
    # All seven slots were asked; the three empty ones answered NotFound.
    assert nvml.calls.count("nvmlDeviceGetMigDeviceHandleByIndex") == 7


def test_mig_profiles_agree_with_nvidia_smi_list_of_the_same_board():
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_smi import list_section

    listed = inv.parse_smi_list(list_section("nvgpuexp-capture-linux-h100-mig-driver-590.48.01.txt"))
    answer, dummy = query(readings.H100_MIG)
    assert [(d["profile"], d["uuid"]) for d in answer["gpus"][0]["mig"]["devices"]] == [
        (d["profile"], d["uuid"]) for d in listed[0]["mig_devices"]]


def test_consumer_gpu_not_supported_values_are_null():
    answer, dummy = query(readings.RTX_4080_SUPER)
    gpu = answer["gpus"][0]
    assert answer["outcome"] == "ok"
    assert gpu["compute_capability"] == "8.9"
    assert gpu["architecture"] == "Ada Lovelace"
    assert gpu["mig"] == {"capable": False, "current_mode": None, "pending_mode": None, "devices": [],
                          "profiles": []}
    assert set(gpu["ecc"].values()) == {None}
    assert set(gpu["health"].values()) == {None}
    assert gpu["serial"] is None
    assert gpu["numa_node"] is None
    assert gpu["error"] is None


def test_old_driver_function_not_found():
    answer, nvml = query(readings.QUADRO_P400_OLD_DRIVER)
    gpu = answer["gpus"][0]
    assert answer["cuda_driver_version"] == "10.1"
    assert "nvmlSystemGetCudaDriverVersion" in nvml.calls
    assert gpu["architecture"] is None
    assert gpu["compute_capability"] == "6.1"
    assert gpu["mig"]["capable"] is False
    assert gpu["health"]["remapped_rows_pending"] is None
    assert gpu["error"] is None


def test_bindings_without_a_function_answer_function_not_found():
    class OldBindings(object):
        class NVMLError(Exception):
            value = 999

        @staticmethod
        def nvmlInit():
            return None

    adapter = inv.PynvmlAdapter(OldBindings)
    adapter.init()
    with pytest.raises(inv.NvmlCallError) as caught:
        adapter.call("nvmlDeviceGetRemappedRows", object())
    assert caught.value.code == inv.NVML_ERROR_FUNCTION_NOT_FOUND


def test_adapter_converts_bytes_structs_and_errors():
    import ctypes

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong)]

    class Bindings(object):
        class NVMLError(Exception):
            def __init__(self, value):
                super().__init__(value)
                self.value = value

            def __str__(self):
                return "GPU is lost"

        @staticmethod
        def nvmlSystemGetDriverVersion():
            return b"418.43"

        @staticmethod
        def nvmlDeviceGetMemoryInfo(handle):
            return Memory(total=2 * 1024 * 1024 * 1024, free=1)

        @classmethod
        def nvmlDeviceGetUUID(cls, handle):
            raise cls.NVMLError(15)

    adapter = inv.PynvmlAdapter(Bindings)
    assert adapter.call("nvmlSystemGetDriverVersion") == "418.43"
    assert adapter.call("nvmlDeviceGetMemoryInfo", None) == {"total": 2147483648, "free": 1}
    with pytest.raises(inv.NvmlCallError) as caught:
        adapter.call("nvmlDeviceGetUUID", None)
    assert (caught.value.code, caught.value.text) == (15, "GPU is lost")


def test_two_gpus_with_one_uuid_stay_two():
    answer, dummy = query(readings.TWO_GPUS_SAME_UUID)
    assert [(g["index"], g["uuid"], g["pci_bus_id"]) for g in answer["gpus"]] == [
        (0, "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "00000000:01:00.0"),
        (1, "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "00000000:02:00.0"),
    ]
    facts = inv.summarise(answer, [], driver_installed=True, module_version="590.44.01")
    assert facts["gpu_count"] == 2


def test_gpu_lost_is_reported_not_raised():
    answer, dummy = query(readings.GPU_LOST)
    assert [g["error"] for g in answer["gpus"]] == [None, None, None, "GPU is lost"]
    facts = inv.summarise(answer, [], driver_installed=True, module_version="590.48.01")
    assert facts["state"] == "gpu_lost"
    assert facts["gpu_count"] == 4
    assert facts["lost_gpus"] == [
        {"pci_address": None, "gpu_index": 3, "source": "nvml", "message": "NVML: GPU is lost"}]
    assert facts["message"] == "1 of 4 GPUs lost: GPU 3 (NVML: GPU is lost)"
    assert facts["health"]["status"] == "unhealthy"
    assert [p["code"] for p in facts["health"]["problems"]] == ["gpu_lost"]


def test_gpu_lost_before_its_address_was_read_gets_it_from_the_pci_bus():
    answer, dummy = query(readings.GPU_LOST)
    on_bus = [dict(H100_PCI, address="0000:%02x:00.0" % bus) for bus in (0x18, 0x2A, 0x3A, 0x5D)]
    facts = inv.summarise(answer, on_bus, driver_installed=True, module_version="590.48.01")
    assert facts["lost_gpus"] == [{
        "pci_address": "0000:5d:00.0", "gpu_index": 3, "source": "nvml",
        "message": "NVML: GPU is lost; on the PCI bus, not reported by the driver"}]
    assert facts["message"] == \
        "1 of 4 GPUs lost: 0000:5d:00.0 (NVML: GPU is lost; on the PCI bus, not reported by the driver)"


def test_gpu_lost_midway_keeps_what_was_read():
    answer, dummy = query(readings.GPU_LOST_MIDWAY)
    gpu = answer["gpus"][0]
    assert gpu["error"] == "GPU is lost"
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["memory_total_mib"] is None


@pytest.mark.parametrize("reading,pci,state,installed,loaded", [
    (readings.DRIVER_NOT_LOADED_HOST, [], "no_gpu", True, False),
    (readings.DRIVER_NOT_LOADED_HOST, [H100_PCI], "driver_not_loaded", True, False),
    (readings.LIBRARY_MISSING_HOST, [], "no_gpu", False, False),
    (readings.LIBRARY_MISSING_HOST, [H100_PCI], "driver_not_installed", False, False),
    (readings.MISMATCH_HOST, [H100_PCI], "driver_mismatch", True, True),
    (readings.NO_DEVICES, [], "no_gpu", True, True),
    # The driver answers with no GPU while one bound to it is on the bus: lost.
    (readings.NO_DEVICES, [H100_PCI], "gpu_lost", True, True),
    (readings.NO_DEVICES, [dict(H100_PCI, driver="vfio-pci")], "error", True, True),
    # The PCI scan never overrides a driver that answers (PCI hidden in a container).
    (readings.H100, [], "ok", True, True),
])
def test_states(reading, pci, state, installed, loaded):
    answer, dummy = query(reading)
    library_present = reading is not readings.LIBRARY_MISSING_HOST
    module_version = "550.54.14" if reading is readings.MISMATCH_HOST else None
    facts = inv.summarise(answer, pci, driver_installed=library_present, module_version=module_version)
    assert (facts["state"], facts["driver_installed"], facts["driver_loaded"]) == (state, installed, loaded)
    assert facts["state"] in inv.STATES
    assert facts["message"]
    init_error = reading.get("init")
    if init_error:
        # NVML's own words are kept.
        assert init_error["__error__"][1] in facts["message"]


def test_mismatch_message_names_the_loaded_module():
    answer, dummy = query(readings.MISMATCH_HOST)
    facts = inv.summarise(answer, [H100_PCI], driver_installed=True, module_version="550.54.14")
    assert "550.54.14" in facts["message"]
    assert "RM has detected an NVML/RM version mismatch." in facts["message"]


def test_numa_node_is_the_pci_locality_from_sysfs():
    answer, dummy = query(readings.H100)
    facts = inv.summarise(answer, [H100_PCI], driver_installed=True, module_version=None)
    assert facts["gpus"][0]["numa_node"] == 1


@pytest.mark.parametrize("value,expected", [(12020, "12.2"), (13010, "13.1"), (11080, "11.8"), (0, None), (None, None)])
def test_cuda_version_string(value, expected):
    assert inv.cuda_version_string(value) == expected


# --------------------------------------------------------------------------
# gather(): source selection and the probe
# --------------------------------------------------------------------------

class Probe(object):
    def __init__(self, pynvml=None, smi=None, runs=None, pci=(), library=False, module_version=None, kernels=None):
        self._pynvml = pynvml
        self._kernels = kernels
        self._smi = smi
        self._runs = runs or {}
        self._pci = list(pci)
        self._library = library
        self._module_version = module_version
        self.ran = []

    def pynvml(self):
        return self._pynvml

    def which(self, name):
        return self._smi if name == "nvidia-smi" else None

    def run(self, argv):
        self.ran.append(argv)
        if tuple(argv[1:]) == ("mig", "-lgip") and ("mig", "-lgip") not in self._runs:
            # What drivers before 570 print for GPUs not in MIG mode.
            return 6, "No MIG-enabled devices found.\n", ""
        return self._runs[tuple(argv[1:])]

    def pci_devices(self):
        return self._pci

    def nvml_library_present(self):
        return self._library

    def kernel_module_version(self):
        return self._module_version

    def kernels(self):
        return self._kernels


class FakePynvml(object):
    """Just enough of the pynvml module surface for PynvmlAdapter, over a reading."""

    class NVMLError(Exception):
        pass

    def __init__(self, reading):
        self._recorded = readings.RecordedNvml(reading)

    def nvmlInit(self):
        self._recorded.init()

    def nvmlShutdown(self):
        self._recorded.shutdown()

    def __getattr__(self, name):
        if not name.startswith("nvml"):
            raise AttributeError(name)
        return lambda *args: self._recorded.call(name, *args)


def test_auto_prefers_nvml():
    probe = Probe(pynvml=FakePynvml(readings.H100), smi="/usr/bin/nvidia-smi", library=True)
    facts = inv.gather({"source": "auto"}, probe)
    assert facts["source"] == "nvml"
    assert facts["state"] == "ok"
    assert facts["gpus"][0]["compute_capability"] == "9.0"
    # NVML answers everything but the MIG profiles, which only nvidia-smi lists by name.
    assert [argv[1:] for argv in probe.ran] == [["mig", "-lgip"]]


def test_auto_falls_back_to_nvidia_smi():
    with open(os.path.join(FIXTURES, "telegraf-tesla-t4-aws-driver-515.105.01-v11.xml")) as handle:
        xml = handle.read()
    probe = Probe(smi="/usr/bin/nvidia-smi", runs={("-q", "-x"): (0, xml, "")}, library=True)
    facts = inv.gather({"source": "auto"}, probe)
    assert facts["source"] == "nvidia_smi"
    assert facts["state"] == "ok"
    assert facts["driver_version"] == "515.105.01"
    assert facts["gpus"][0]["compute_capability"] is None


def test_explicit_nvml_without_pynvml_fails_clearly():
    with pytest.raises(inv.InventoryError) as caught:
        inv.gather({"source": "nvml"}, Probe(smi="/usr/bin/nvidia-smi"))
    assert "pynvml" in str(caught.value)


def test_explicit_nvidia_smi_is_queried_even_with_pynvml_and_no_pci():
    probe = Probe(pynvml=FakePynvml(readings.H100), smi="/usr/bin/nvidia-smi",
                  runs={("-q", "-x"): (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "")})
    facts = inv.gather({"source": "nvidia_smi"}, probe)
    assert probe.ran == [["/usr/bin/nvidia-smi", "-q", "-x"]]
    assert (facts["source"], facts["state"], facts["driver_installed"]) == ("nvidia_smi", "no_gpu", True)


def test_nothing_installed():
    facts = inv.gather({}, Probe())
    assert (facts["source"], facts["state"], facts["driver_installed"], facts["driver_loaded"]) == (
        "nvidia_smi", "no_gpu", False, False)
    facts = inv.gather({}, Probe(pci=[H100_PCI]))
    assert facts["state"] == "driver_not_installed"
    assert facts["pci_devices"] == [H100_PCI]


def test_unknown_source_is_refused():
    with pytest.raises(inv.InventoryError) as caught:
        inv.gather({"source": "dcgm"}, Probe())
    assert "'dcgm'" in str(caught.value)


def test_every_fact_key_is_present_in_every_state():
    keys = {"state", "message", "source", "driver_installed", "driver_loaded", "kernel_module_version",
            "driver_version", "cuda_driver_version", "kmd_version", "cuda_umd_version", "gpu_count", "gpus",
            "lost_gpus", "pci_devices", "nvswitches", "xid_events", "kernel_log", "kernels", "health"}
    for reading in (readings.H100, readings.DRIVER_NOT_LOADED_HOST, readings.MISMATCH_HOST, readings.NO_DEVICES):
        facts = inv.gather({"source": "nvml"}, Probe(pynvml=FakePynvml(reading), library=True))
        assert set(facts) == keys


# --------------------------------------------------------------------------
# sysfs and procfs readers, on real files
# --------------------------------------------------------------------------

def _pci_function(root, address, vendor, device, pci_class, driver=None, numa="-1"):
    path = root / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "device").write_text(device + "\n")
    (path / "class").write_text(pci_class + "\n")
    (path / "numa_node").write_text(numa + "\n")
    if driver:
        drivers = root.parent / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        (path / "driver").symlink_to(drivers)


def test_scan_pci(tmp_path):
    root = tmp_path / "devices"
    _pci_function(root, "0000:00:02.0", "0x8086", "0x3e92", "0x030000", driver="i915")
    _pci_function(root, "0000:3b:00.0", "0x10de", "0x2330", "0x030200", driver="nvidia", numa="0")
    _pci_function(root, "0000:01:00.0", "0x10de", "0x2684", "0x030000", driver="nouveau")
    _pci_function(root, "0000:01:00.1", "0x10de", "0x22ba", "0x040300", driver="snd_hda_intel")
    _pci_function(root, "0000:c1:00.0", "0x10de", "0x22a3", "0x068000")
    devices = inv.scan_pci(str(root))
    assert [(d["address"], d["is_gpu"], d["driver"], d["numa_node"]) for d in devices] == [
        ("0000:01:00.0", True, "nouveau", None),
        ("0000:01:00.1", False, "snd_hda_intel", None),
        ("0000:3b:00.0", True, "nvidia", 0),
        ("0000:c1:00.0", False, None, None),
    ]
    assert devices[2]["device_id"] == "0x2330"


def test_scan_pci_without_sysfs(tmp_path):
    assert inv.scan_pci(str(tmp_path / "missing")) == []


@pytest.mark.parametrize("text,version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 22:20:39 UTC 2023\n"
     "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", "535.54.03"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  "
     "(dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\n", "550.54.14"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  470.74  Mon Sep 13 22:59:00 UTC 2021\n", "470.74"),
])
def test_kernel_module_version(tmp_path, text, version):
    path = tmp_path / "version"
    path.write_text(text)
    assert inv.kernel_module_version(str(path)) == version


def test_kernel_module_not_loaded(tmp_path):
    assert inv.kernel_module_version(str(tmp_path / "absent")) is None


def test_real_pynvml_error_of_a_container_without_kernel_module():
    path = os.path.join(os.path.dirname(__file__), "fixtures", "debian12-container-no-kernel-module", "pynvml-nvmlInit.txt")
    with open(path) as handle:
        name, code, text = handle.read().strip().split(" ", 2)
    assert name == "NVMLError_DriverNotLoaded"
    answer, dummy = query({"init": readings.err(int(code), text)})
    facts = inv.summarise(answer, [], driver_installed=True, module_version=None)
    assert (facts["state"], facts["driver_loaded"]) == ("no_gpu", False)
    assert facts["message"].endswith("NVML: Driver Not Loaded")


def test_library_without_a_reader_is_an_error_on_a_gpu_host():
    # libnvidia-ml present, but neither pynvml nor nvidia-smi to read it.
    facts = inv.gather({}, Probe(pci=[H100_PCI], library=True))
    assert (facts["state"], facts["driver_installed"]) == ("error", True)
    assert "nvidia-smi or pynvml" in facts["message"]
    facts = inv.gather({}, Probe(library=True))
    assert (facts["state"], facts["driver_installed"]) == ("no_gpu", True)


# What nvidia-smi prints where libnvidia-ml is missing (a container started
# without the NVIDIA runtime that still has the binary).
SMI_NO_LIBRARY = (
    "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA "
    "Display Driver is properly installed and present in your system.\n"
    "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n")


def test_nvidia_smi_without_its_library_is_driver_not_installed():
    probe = Probe(smi="/usr/bin/nvidia-smi", runs={("-q", "-x"): (12, SMI_NO_LIBRARY, "")}, pci=[H100_PCI])
    facts = inv.gather({}, probe)
    assert (facts["state"], facts["driver_installed"], facts["driver_loaded"]) == ("driver_not_installed", False, False)
    assert "couldn't find libnvidia-ml.so" in facts["message"]
    # The host's module may be loaded (visible in /proc) while the userspace is missing.
    probe = Probe(smi="/usr/bin/nvidia-smi", runs={("-q", "-x"): (12, SMI_NO_LIBRARY, "")}, pci=[H100_PCI],
                  module_version="550.54.14")
    facts = inv.gather({}, probe)
    assert (facts["state"], facts["driver_loaded"]) == ("driver_not_installed", True)


def test_kernel_module_loaded_but_unreachable():
    answer, dummy = query(readings.DRIVER_NOT_LOADED_HOST)
    facts = inv.summarise(answer, [H100_PCI], driver_installed=True, module_version="550.54.14")
    assert (facts["state"], facts["driver_loaded"]) == ("driver_not_loaded", False)
    assert "550.54.14" in facts["message"] and "/dev/nvidia" in facts["message"]


def test_mig_device_fault_reaches_the_gpu():
    answer, dummy = query(readings.MIG_DEVICE_LOST)
    gpu = answer["gpus"][0]
    assert gpu["error"] == "GPU is lost"
    assert gpu["mig"]["devices"][1]["memory_total_mib"] is None
    facts = inv.summarise(answer, [], True, None)
    assert facts["state"] == "gpu_lost"
    assert facts["lost_gpus"][0]["pci_address"] == "0000:00:09.0"


def test_corrupted_inforom_is_an_error_not_a_lost_gpu():
    facts = inv.summarise(query(readings.CORRUPTED_INFOROM)[0], [H100_PCI], True, None)
    assert (facts["state"], facts["lost_gpus"]) == ("error", [])
    assert facts["health"]["problems"][0]["code"] == "driver"


def test_corrupted_inforom_is_a_fault():
    answer, dummy = query(readings.CORRUPTED_INFOROM)
    assert answer["gpus"][0]["error"] == "Corrupted infoROM"
    assert answer["gpus"][0]["vbios_version"] is None


def test_adapter_passes_device_handles_through():
    import ctypes

    class Device(ctypes.Structure):
        pass

    handle = ctypes.POINTER(Device)()

    class Bindings(object):
        class NVMLError(Exception):
            pass

        @staticmethod
        def nvmlDeviceGetHandleByIndex(index):
            return handle

    assert inv.PynvmlAdapter(Bindings).call("nvmlDeviceGetHandleByIndex", 0) is handle


def test_driver_not_loaded_means_installed_even_if_the_library_search_missed_it():
    answer, dummy = query(readings.DRIVER_NOT_LOADED_HOST)
    facts = inv.summarise(answer, [H100_PCI], driver_installed=False, module_version=None)
    assert (facts["state"], facts["driver_installed"]) == ("driver_not_loaded", True)
