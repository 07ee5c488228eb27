# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health in the facts: lost GPUs, XID events from the kernel log, the NVSwitch fabric,
driver 610's version words, and the health summary built from them.

Inputs are real captures (fixtures/nvidia-smi/), recorded NVML readings (nvml_readings.py),
recorded kernel log lines (fixtures/kernel-log/) and recorded nvidia-smi lines
(fixtures/nvidia-smi-lost/). Where a test needs a value no capture shows, it says what it
changed in which capture.
"""

from __future__ import annotations

import copy
import ctypes
import os
import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_nvml import (
    H100_PCI,
    FakePynvml,
    Probe,
)
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_smi import (
    Runs,
    fixture,
)

HERE = os.path.dirname(__file__)
XID_LOG = os.path.join(HERE, "fixtures", "kernel-log", "xid-lines.log")
LOST_LINES = os.path.join(HERE, "fixtures", "nvidia-smi-lost", "unable-to-determine-device-handle.txt")
A100_MIG_XML = "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"
A5000_PAIR_XML = "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"
RTX_3080_V13_XML = "telegraf-rtx-3080-driver-595.58.03-v13.xml"
XML_FILES = sorted(name for name in os.listdir(os.path.join(HERE, "fixtures", "nvidia-smi")) if name.endswith(".xml"))


def read(path):
    with open(path) as handle:
        return handle.read()


def nvml_facts(reading, pci=(), kernel_log=None, unhealthy_xids=inv.DEFAULT_UNHEALTHY_XIDS, module_version=None):
    answer = inv.query_nvml(readings.RecordedNvml(reading))
    return inv.summarise(answer, [dict(device) for device in pci], driver_installed=True,
                         module_version=module_version, kernel_log=kernel_log, unhealthy_xids=unhealthy_xids)


def smi_facts(xml, stderr="", rc=0, pci=()):
    # `nvidia-smi -L` (asked for MIG names) is refused: no capture of these boards has it.
    answer = inv.query_nvidia_smi(Runs({("-q", "-x"): (rc, xml, stderr), ("-L",): (2, "", "unsupported")}),
                                  "nvidia-smi")
    return inv.summarise(answer, [dict(device) for device in pci], driver_installed=True, module_version=None)


def hgx(buses, fabric=None):
    """An H100 board per bus, the H100 reading's values with that bus id (and fabric answer)."""
    reading = copy.deepcopy(readings.H100)
    device = reading["devices"][0]
    reading["devices"] = []
    for bus in buses:
        entry = copy.deepcopy(device)
        entry["nvmlDeviceGetPciInfo"]["busId"] = "00000000:%02X:00.0" % bus
        if fabric is not None:
            entry["nvmlDeviceGetGpuFabricInfoV"] = fabric
        reading["devices"].append(entry)
    reading["system"] = dict(reading["system"], nvmlDeviceGetCount=len(buses))
    return reading


def on_bus(bus, **overrides):
    return dict(H100_PCI, address="0000:%02x:00.0" % bus, **overrides)


def walk_strings(value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from walk_strings(item)
    elif isinstance(value, str):
        yield value


# --------------------------------------------------------------------------
# Driver 610: plain version numbers, KMD and CUDA UMD versions
# --------------------------------------------------------------------------

# The words of `nvidia-smi -q` on driver 610.47, as quoted in
# Jaded-Encoding-Thaumaturgy/vs-jetpack pull request 297 (an issue thread in the issues corpus).
DRIVER_610 = "610.47 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]"
CUDA_610 = "13.3 [Deprecated; will be removed in CUDA 14.0. Use CUDA UMD Version instead]"
NOTICE_610 = 'Deprecated, see "KMD version" instead'


@pytest.mark.parametrize("value,expected", [
    (DRIVER_610, "610.47"),
    (CUDA_610, "13.3"),
    ("590.48.01", "590.48.01"),
    (b"418.43", "418.43"),
    ("535.54.03 (beta)", "535.54.03"),
    ("N/A", None),
    ("", None),
    (None, None),
    # Where `nvidia-smi --version` printed the driver and CUDA versions, 610 prints a notice
    # (NVIDIA/aicr issue 1667 quotes it); its numbers ('CUDA 14.0' in -q's note) are no version.
    (NOTICE_610, None),
    ('Deprecated, see "CUDA UMD version" instead', None),
    ("[Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]", None),
])
def test_plain_version(value, expected):
    assert inv.plain_version(value) == expected


def xml_610(with_new_elements=True):
    """The RTX 3080 v13 capture with driver 610's header words; no 610 XML capture exists."""
    xml = fixture(RTX_3080_V13_XML).decode("utf-8")
    header = "<driver_version>%s</driver_version>\n\t<cuda_version>%s</cuda_version>" % (DRIVER_610, CUDA_610)
    if with_new_elements:
        header += "\n\t<kmd_version>610.47</kmd_version>\n\t<cuda_umd_version>13.3</cuda_umd_version>"
    return xml.replace("<driver_version>595.58.03</driver_version>\n\t<cuda_version>13.2</cuda_version>", header)


def test_driver_610_words_never_reach_a_fact():
    facts = smi_facts(xml_610())
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("610.47", "13.3")
    assert (facts["kmd_version"], facts["cuda_umd_version"]) == ("610.47", "13.3")
    assert facts["state"] == "ok"
    assert not [text for text in walk_strings(facts) if "Deprecated" in text]


def test_a_notice_where_the_driver_version_was_gives_the_kmd_version():
    # No 610 XML capture exists: the RTX 3080 v13 capture with only the notice in the old
    # element, as `nvidia-smi --version` prints it, and the version in <kmd_version>.
    xml = xml_610().replace(DRIVER_610, NOTICE_610).replace(CUDA_610, 'Deprecated, see "CUDA UMD version" instead')
    facts = smi_facts(xml)
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("610.47", "13.3")
    assert facts["state"] == "ok"
    assert not [text for text in walk_strings(facts) if "Deprecated" in text]
    # Without the new elements the loaded kernel module's version is the driver's version.
    answer = inv.query_nvidia_smi(Runs({("-q", "-x"): (0, xml_610(with_new_elements=False).replace(DRIVER_610, NOTICE_610),
                                                       "")}), "nvidia-smi")
    facts = inv.summarise(answer, [], driver_installed=True, module_version="610.47")
    assert (facts["driver_version"], facts["kmd_version"]) == ("610.47", "610.47")
    facts = inv.summarise(answer, [], driver_installed=True, module_version=None)
    assert facts["driver_version"] is None


def test_nvml_notice_in_the_driver_version_gives_the_loaded_module_version():
    reading = copy.deepcopy(readings.H100)
    reading["system"] = dict(reading["system"], nvmlSystemGetDriverVersion=NOTICE_610)
    facts = nvml_facts(reading, module_version="610.43.02")
    assert (facts["driver_version"], facts["kmd_version"]) == ("610.43.02", "610.43.02")
    assert facts["state"] == "ok"
    # A driver that answers with no GPU still answered: the same.
    reading["system"] = dict(reading["system"], nvmlDeviceGetCount=0)
    reading["devices"] = []
    facts = nvml_facts(reading, module_version="610.43.02")
    assert (facts["driver_version"], facts["gpu_count"]) == ("610.43.02", 0)


def test_kmd_version_falls_back_to_the_loaded_module_and_umd_to_the_cuda_version():
    answer = inv.query_nvidia_smi(Runs({("-q", "-x"): (0, xml_610(with_new_elements=False), "")}), "nvidia-smi")
    facts = inv.summarise(answer, [], driver_installed=True, module_version="610.47")
    assert (facts["driver_version"], facts["kmd_version"], facts["cuda_umd_version"]) == ("610.47", "610.47", "13.3")
    facts = nvml_facts(readings.H100)
    assert (facts["kmd_version"], facts["cuda_umd_version"]) == (None, "13.1")
    assert nvml_facts(readings.H100, module_version="590.48.01")["kmd_version"] == "590.48.01"


# --------------------------------------------------------------------------
# NVSwitch fabric
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name", XML_FILES)
def test_no_xml_capture_has_a_fabric_value(name):
    """Every XML capture prints its <fabric> fields as N/A (535+) or has no <fabric> (older)."""
    for gpu in inv.parse_smi_xml(fixture(name))["gpus"]:
        assert gpu["fabric"] == inv.empty_fabric()


def fabric_q_text(name):
    """The Fabric block of the `nvidia-smi -q` section of a text capture, as {field: value}."""
    lines = fixture(name).decode("utf-8").splitlines()
    start = lines.index("# $ nvidia-smi -q")
    block = {}
    inside = False
    for line in lines[start:]:
        if line.strip() == "Fabric":
            inside = True
            continue
        if inside:
            if line.startswith("    ") and not line.startswith("        "):
                break
            if ":" in line:
                key, value = line.split(":", 1)
                block[key.strip()] = value.strip()
    return block


@pytest.mark.parametrize("name,reading", [
    ("nvgpuexp-capture-linux-h100-80gb-hbm3-driver-590.48.01.txt", readings.H100),
    ("nvgpuexp-capture-linux-h200-driver-590.48.01.txt", readings.H200),
])
def test_nvml_fabric_of_the_h100_and_h200_says_what_their_q_text_says(name, reading):
    text = fabric_q_text(name)
    assert (text["State"], text["Status"], text["CliqueId"], text["Summary"]) == ("Completed", "Success", "0", "N/A")
    fabric = nvml_facts(reading)["gpus"][0]["fabric"]
    assert fabric == {
        "state": text["State"].lower(),
        "status": text["Status"].lower(),
        "clique_id": int(text["CliqueId"]),
        "cluster_uuid": text["ClusterUUID"],
        "health": None,
    }


def test_h200_reading():
    facts = nvml_facts(readings.H200)
    gpu = facts["gpus"][0]
    assert (facts["state"], facts["health"]["status"]) == ("ok", "healthy")
    assert (gpu["name"], gpu["pci_address"], gpu["pci_device_id"], gpu["memory_total_mib"]) == (
        "NVIDIA H200", "0000:83:00.0", "0x2335", 143771)
    assert (gpu["architecture"], gpu["compute_capability"], gpu["power_limit_w"]) == ("Hopper", "9.0", 700.0)


def a5000_with_fabric(state, status, clique="0", uuid="00000000-0000-0000-0000-000000000000"):
    """The A5000 pair capture's v13 <fabric> layout holding the H100 -q text's fabric values."""
    xml = fixture(A5000_PAIR_XML).decode("utf-8")
    return xml.replace(
        "<state>N/A</state>\n\t\t\t<status>N/A</status>\n\t\t\t<cliqueId>N/A</cliqueId>\n\t\t\t<clusterUuid>N/A</clusterUuid>",
        "<state>%s</state>\n\t\t\t<status>%s</status>\n\t\t\t<cliqueId>%s</cliqueId>\n\t\t\t<clusterUuid>%s</clusterUuid>"
        % (state, status, clique, uuid))


def test_xml_fabric_reads_the_v13_elements():
    gpus = inv.parse_smi_xml(a5000_with_fabric("Completed", "Success"))["gpus"]
    assert [gpu["fabric"] for gpu in gpus] == [{
        "state": "completed", "status": "success", "clique_id": 0,
        "cluster_uuid": "00000000-0000-0000-0000-000000000000", "health": None}] * 2
    assert inv.parse_smi_xml(a5000_with_fabric("Not Supported", "N/A"))["gpus"][0]["fabric"]["state"] == "not_supported"


@pytest.mark.parametrize("state,status,problem", [
    ("Completed", "Success", None),
    ("Not Supported", "N/A", None),
    ("N/A", "N/A", None),
    ("In Progress", "N/A", "fabric manager has not set up the NVSwitch fabric (state in_progress)"),
    ("Not Started", "N/A", "fabric manager has not set up the NVSwitch fabric (state not_started)"),
    ("Completed", "Timeout", "NVSwitch fabric setup failed (state completed, status Timeout)"),
])
def test_fabric_not_ready_from_nvidia_smi(state, status, problem):
    facts = smi_facts(a5000_with_fabric(state, status))
    problems = [p for p in facts["health"]["problems"] if p["code"] == "fabric_not_ready"]
    if problem is None:
        assert (problems, facts["health"]["status"]) == ([], "healthy")
    else:
        assert [(p["gpu_index"], p["pci_address"], p["message"]) for p in problems] == [
            (0, "0000:81:00.0", "GPU 0 (0000:81:00.0): %s" % problem),
            (1, "0000:c1:00.0", "GPU 1 (0000:c1:00.0): %s" % problem)]
        assert facts["health"]["status"] == "unhealthy"
        # The driver works: the state stays ok, the health says why no work should land.
        assert facts["state"] == "ok"


@pytest.mark.parametrize("reading,fabric,problem", [
    (readings.FABRIC_IN_PROGRESS, {"state": "in_progress", "status": None, "clique_id": 0,
                                   "cluster_uuid": "00000000-0000-0000-0000-000000000000", "health": None},
     "fabric manager has not set up the NVSwitch fabric (state in_progress)"),
    (readings.FABRIC_FAILED, {"state": "completed", "status": "NVML_ERROR_UNKNOWN (999)", "clique_id": 0,
                              "cluster_uuid": "00000000-0000-0000-0000-000000000000", "health": None},
     "NVSwitch fabric setup failed (state completed, status NVML_ERROR_UNKNOWN (999))"),
    (readings.RTX_4080_SUPER, inv.empty_fabric(), None),
    (readings.QUADRO_P400_OLD_DRIVER, inv.empty_fabric(), None),
])
def test_nvml_fabric_states(reading, fabric, problem):
    facts = nvml_facts(reading)
    assert facts["gpus"][0]["fabric"] == fabric
    messages = [p["message"] for p in facts["health"]["problems"] if p["code"] == "fabric_not_ready"]
    assert messages == ([] if problem is None else ["GPU 0 (%s): %s" % (facts["gpus"][0]["pci_address"], problem)])


def test_fabric_query_failure_is_the_fabrics_not_the_gpus():
    reading = copy.deepcopy(readings.H100)
    reading["devices"][0]["nvmlDeviceGetGpuFabricInfoV"] = readings.err(999, "Unknown Error")
    facts = nvml_facts(reading)
    assert (facts["state"], facts["gpus"][0]["error"]) == ("ok", None)
    assert facts["gpus"][0]["fabric"]["status"] == "NVML: Unknown Error"
    assert [p["message"] for p in facts["health"]["problems"]] == [
        "GPU 0 (0000:00:09.0): the fabric state could not be read (NVML: Unknown Error)"]


def test_fabric_query_that_finds_the_gpu_lost_loses_the_gpu():
    reading = copy.deepcopy(readings.H100)
    reading["devices"][0]["nvmlDeviceGetGpuFabricInfoV"] = readings.GPU_IS_LOST
    facts = nvml_facts(reading)
    assert facts["state"] == "gpu_lost"
    assert facts["lost_gpus"][0]["pci_address"] == "0000:00:09.0"


def test_nvswitches_are_not_lost_gpus_and_an_unset_fabric_beside_them_is_not_flagged():
    """A100-generation HGX boards report no fabric state; their NVSwitches alone say nothing."""
    # Entries as an older scan made them, without is_nvswitch: summarise tells from the class.
    older = dict((key, value) for key, value in H100_PCI.items() if key != "is_nvswitch")
    nvswitch = dict(older, address="0000:c1:00.0", device_id="0x22a3", is_gpu=False, **{"class": "0x068000"})
    facts = nvml_facts(readings.RTX_4080_SUPER, pci=[dict(older, address="0000:01:00.0"), nvswitch])
    assert facts["nvswitches"] == ["0000:c1:00.0"]
    assert [d["is_nvswitch"] for d in facts["pci_devices"]] == [False, True]
    assert (facts["state"], facts["health"]["status"]) == ("ok", "healthy")


# --------------------------------------------------------------------------
# PynvmlAdapter: the fabric call takes a struct
# --------------------------------------------------------------------------

class FabricV2(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t's layout (nvml.h): version, clusterUuid[16], status, cliqueId, state, healthMask."""
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32)]

    def __init__(self):
        super(FabricV2, self).__init__(version=0x02000024)


class FabricV3(ctypes.Structure):
    _fields_ = FabricV2._fields_ + [("healthSummary", ctypes.c_uint8)]


class FabricLegacy(ctypes.Structure):
    """The unversioned struct of early bindings: c_char clusterUuid and partitionId."""
    _fields_ = [("clusterUuid", ctypes.c_char * 16), ("status", ctypes.c_uint),
                ("partitionId", ctypes.c_uint32), ("state", ctypes.c_ubyte)]


class NVMLError(Exception):
    def __init__(self, value):
        super(NVMLError, self).__init__(value)
        self.value = value

    def __str__(self):
        return {3: "Not Supported", 25: "Argument Version Mismatch"}.get(self.value, "Unknown Error")


CLUSTER = bytes(bytearray(range(16)))


def filling(code=0, state=3, status=0, clique=7):
    """A fabric call that fills the struct it is handed by reference, or fails with ``code``."""
    seen = []

    def call(device, reference):
        info = reference._obj
        seen.append((type(info).__name__, getattr(info, "version", None)))
        if code:
            raise NVMLError(code)
        ctypes.memmove(ctypes.addressof(info) + type(info).clusterUuid.offset, CLUSTER, 16)
        info.status = status
        info.state = state
        if hasattr(info, "cliqueId"):
            info.cliqueId = clique
        else:
            info.partitionId = clique
        return 0
    call.seen = seen
    return call


def bindings(**members):
    return type("Bindings", (object,), dict({"NVMLError": NVMLError}, **dict(
        (name, staticmethod(value) if callable(value) and not isinstance(value, type) else value)
        for name, value in members.items())))


def test_adapter_reads_the_versioned_fabric_struct():
    call = filling()
    adapter = inv.PynvmlAdapter(bindings(nvmlDeviceGetGpuFabricInfoV=call, c_nvmlGpuFabricInfo_v2_t=FabricV2,
                                         nvmlGpuFabricInfo_v2=0x02000024))
    assert adapter.call("nvmlDeviceGetGpuFabricInfoV", "handle") == {
        "state": 3, "status": 0, "cliqueId": 7, "clusterUuid": "00010203-0405-0607-0809-0a0b0c0d0e0f",
        "healthSummary": None}
    assert call.seen == [("FabricV2", 0x02000024)]


def test_adapter_steps_down_a_struct_version_the_driver_does_not_know():
    call = filling()
    versions = []

    def versioned(device, reference):
        versions.append(reference._obj.version)
        if reference._obj.version == 0x3000028:
            raise NVMLError(25)
        return call(device, reference)
    adapter = inv.PynvmlAdapter(bindings(
        nvmlDeviceGetGpuFabricInfoV=versioned, c_nvmlGpuFabricInfo_v3_t=FabricV3, nvmlGpuFabricInfo_v3=0x3000028,
        c_nvmlGpuFabricInfo_v2_t=FabricV2, c_nvmlGpuFabricInfoV_t=FabricV2, nvmlGpuFabricInfo_v2=0x02000024))
    assert adapter.gpu_fabric_info("handle")["cliqueId"] == 7
    assert versions == [0x3000028, 0x02000024]


def test_adapter_falls_back_to_the_unversioned_call_and_keeps_zero_bytes_of_a_char_uuid():
    call = filling(clique=3)
    adapter = inv.PynvmlAdapter(bindings(nvmlDeviceGetGpuFabricInfo=call, c_nvmlGpuFabricInfo_t=FabricLegacy))
    info = adapter.gpu_fabric_info("handle")
    # CLUSTER starts with a zero byte, where a c_char array's value would stop.
    assert (info["cliqueId"], info["clusterUuid"], info["healthSummary"]) == (
        3, "00010203-0405-0607-0809-0a0b0c0d0e0f", None)


def test_adapter_without_fabric_bindings_answers_function_not_found():
    with pytest.raises(inv.NvmlCallError) as caught:
        inv.PynvmlAdapter(bindings()).call("nvmlDeviceGetGpuFabricInfoV", "handle")
    assert caught.value.code == inv.NVML_ERROR_FUNCTION_NOT_FOUND


def test_adapter_passes_other_errors_on():
    adapter = inv.PynvmlAdapter(bindings(nvmlDeviceGetGpuFabricInfoV=filling(code=3),
                                         c_nvmlGpuFabricInfo_v2_t=FabricV2, nvmlGpuFabricInfo_v2=0x02000024))
    with pytest.raises(inv.NvmlCallError) as caught:
        adapter.gpu_fabric_info("handle")
    assert (caught.value.code, caught.value.text) == (3, "Not Supported")


# --------------------------------------------------------------------------
# Lost GPUs
# --------------------------------------------------------------------------

EIGHT = (0x18, 0x2A, 0x3A, 0x3B, 0x5D, 0x9A, 0xAB, 0xBA)


def test_gpus_on_the_pci_bus_the_driver_does_not_report_are_lost():
    reported = [bus for bus in EIGHT if bus not in (0x3B, 0x5D)]
    facts = nvml_facts(hgx(reported), pci=[on_bus(bus) for bus in EIGHT])
    assert facts["state"] == "gpu_lost"
    assert facts["message"] == \
        "2 of 8 GPUs lost: 0000:3b:00.0, 0000:5d:00.0 (on the PCI bus, not reported by the driver)"
    assert facts["lost_gpus"] == [
        {"pci_address": "0000:3b:00.0", "gpu_index": None, "source": "pci_bus",
         "message": "on the PCI bus, not reported by the driver"},
        {"pci_address": "0000:5d:00.0", "gpu_index": None, "source": "pci_bus",
         "message": "on the PCI bus, not reported by the driver"}]
    # The GPUs that answer are still listed.
    assert [gpu["pci_address"] for gpu in facts["gpus"]] == ["0000:%02x:00.0" % bus for bus in reported]
    assert [(p["code"], p["pci_address"]) for p in facts["health"]["problems"]] == [
        ("gpu_lost", "0000:3b:00.0"), ("gpu_lost", "0000:5d:00.0")]


def test_gpu_functions_that_are_not_the_drivers_are_not_lost():
    pci = [on_bus(0x18), on_bus(0x2A, driver="vfio-pci"), on_bus(0x3A, driver="nouveau"),
           on_bus(0x3B, is_virtual_function=True), on_bus(0x5D, driver=None)]
    facts = nvml_facts(hgx([0x18]), pci=pci)
    # vfio-pci (a VM's), nouveau and an SR-IOV virtual function are not counted; an unbound one is.
    assert facts["lost_gpus"] == [{"pci_address": "0000:5d:00.0", "gpu_index": None, "source": "pci_bus",
                                   "message": "on the PCI bus, bound to no driver"}]
    assert facts["message"] == "1 of 2 GPUs lost: 0000:5d:00.0 (on the PCI bus, bound to no driver)"


def test_attached_gpus_beyond_those_printed_are_lost_of_unknown_address():
    """The A100 capture: <attached_gpus>4</attached_gpus> and one <gpu>."""
    facts = smi_facts(fixture(A100_MIG_XML).decode("utf-8"))
    assert facts["state"] == "gpu_lost"
    assert facts["gpu_count"] == 1
    assert facts["lost_gpus"] == [{"pci_address": None, "gpu_index": None, "source": "nvidia_smi",
                                   "message": "nvidia-smi reports 4 attached GPUs but prints 1"}] * 3
    assert facts["message"] == "3 of 4 GPUs lost: 3 of unknown address (nvidia-smi reports 4 attached GPUs but prints 1)"
    assert [p["code"] for p in facts["health"]["problems"]] == ["gpu_lost"] * 3


def test_the_pci_bus_names_the_gpus_nvidia_smi_only_counts():
    # The capture's GPU is at 00000000:01:00.0; three more A100 functions on the bus.
    a100_bus = dict(H100_PCI, address="0000:01:00.0", device_id="0x20b2")
    pci = [a100_bus] + [dict(a100_bus, address="0000:%02x:00.0" % bus) for bus in (0x0F, 0x47, 0x4E)]
    facts = smi_facts(fixture(A100_MIG_XML).decode("utf-8"), pci=pci)
    assert [entry["pci_address"] for entry in facts["lost_gpus"]] == ["0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0"]
    assert facts["message"] == \
        "3 of 4 GPUs lost: 0000:0f:00.0, 0000:47:00.0, 0000:4e:00.0 (on the PCI bus, not reported by the driver)"


@pytest.mark.parametrize("line", read(LOST_LINES).splitlines())
def test_nvidia_smi_names_a_lost_gpu(line):
    answer = inv.query_nvidia_smi(Runs({("-q", "-x"): (15, line + "\n", "")}), "nvidia-smi")
    assert answer["outcome"] == "gpu_lost"
    facts = inv.summarise(answer, [], driver_installed=True, module_version=None)
    assert facts["state"] == "gpu_lost"
    (lost,) = facts["lost_gpus"]
    assert lost["source"] == "nvidia_smi"
    assert lost["pci_address"].lower() in line.lower().replace("gpu0", "gpu 0").replace(" 000:", " 0000:")
    assert lost["message"].startswith("nvidia-smi: ") and "  " not in lost["message"]


def test_nvidia_smi_lost_lines_are_read_from_stderr_of_a_run_that_printed_the_others():
    xml = fixture(A5000_PAIR_XML).decode("utf-8")
    first_gpu_only = xml[:xml.index("<gpu id=", xml.index("<gpu id=") + 1)] + "</nvidia_smi_log>\n"
    stderr = "Unable to determine the device handle for GPU 0000:C1:00.0: Unknown Error\n"
    facts = smi_facts(first_gpu_only, stderr=stderr)
    assert facts["lost_gpus"] == [{"pci_address": "0000:c1:00.0", "gpu_index": None, "source": "nvidia_smi",
                                   "message": "nvidia-smi: Unknown Error"}]
    assert facts["message"] == "1 of 2 GPUs lost: 0000:c1:00.0 (nvidia-smi: Unknown Error)"


def lost_in_fields(xml, bus_id, elements=None):
    """The capture with 'GPU is lost' in place of the values of the GPU at ``bus_id`` (every leaf value, or
    only those of ``elements``): how nvidia-smi -q -x prints a GPU the driver still enumerates but can no
    longer read (NVML_ERROR_GPU_IS_LOST, whose text nvidia-smi prints where a value would be). No public
    capture of such a document was found; the real capture is kept and only the values are replaced."""
    start = xml.index('<gpu id="%s">' % bus_id)
    end = xml.index("</gpu>", start)
    names = "|".join(re.escape(name) for name in elements) if elements else r"[A-Za-z_0-9]+"
    block = re.sub(r"<(%s)>[^<>]*</\1>" % names, lambda match: "<%s>GPU is lost</%s>" % (match.group(1), match.group(1)),
                   xml[start:end])
    return xml[:start] + block + xml[end:]


@pytest.mark.parametrize("elements", [
    None,                                                        # every value of the GPU
    ("fb_memory_usage", "total", "gpu_temp", "gpu_util", "power_draw", "volatile"),  # a few of them
    ("uuid",),
])
def test_gpu_is_lost_in_a_gpus_fields_is_a_lost_gpu(elements):
    xml = lost_in_fields(fixture(A5000_PAIR_XML).decode("utf-8"), "00000000:C1:00.0", elements)
    assert "GPU is lost" in xml
    facts = smi_facts(xml)
    assert facts["state"] == "gpu_lost"
    assert facts["lost_gpus"] == [{"pci_address": "0000:c1:00.0", "gpu_index": 1, "source": "nvidia_smi",
                                   "message": "nvidia-smi: GPU is lost"}]
    assert facts["message"] == "1 of 2 GPUs lost: 0000:c1:00.0 (nvidia-smi: GPU is lost)"
    assert facts["gpus"][1]["error"] == "GPU is lost"
    assert facts["gpus"][0]["error"] is None
    assert [(p["code"], p["pci_address"], p["gpu_index"]) for p in facts["health"]["problems"]] == [
        ("gpu_lost", "0000:c1:00.0", 1)]
    assert facts["health"]["status"] == "unhealthy"
    # No 'GPU is lost' text reaches a value of the facts.
    assert not [text for text in walk_strings(facts["gpus"]) if "lost" in text.lower() and text != "GPU is lost"]


def test_gpu_is_lost_in_the_fields_of_a_run_that_failed_is_said_once():
    # nvidia-smi exits 15 after printing the GPUs, with the lost one's line on stderr as well.
    xml = lost_in_fields(fixture(A5000_PAIR_XML).decode("utf-8"), "00000000:C1:00.0")
    stderr = "Unable to determine the device handle for GPU 0000:C1:00.0: GPU is lost.  Reboot the system to recover this GPU\n"
    facts = smi_facts(xml, stderr=stderr, rc=15)
    assert facts["state"] == "gpu_lost"
    assert [(entry["pci_address"], entry["gpu_index"]) for entry in facts["lost_gpus"]] == [("0000:c1:00.0", 1)]


def test_the_other_absent_value_words_are_not_a_lost_gpu():
    xml = fixture(A5000_PAIR_XML).decode("utf-8")
    for word in ("N/A", "Unknown Error", "[Not Supported]"):
        facts = smi_facts(lost_in_fields(xml, "00000000:C1:00.0", ("gpu_temp",)).replace("GPU is lost", word))
        assert (facts["state"], facts["lost_gpus"]) == ("ok", []), word


def test_no_lost_gpu_without_an_answering_driver_or_without_a_pci_view():
    facts = nvml_facts(readings.DRIVER_NOT_LOADED_HOST, pci=[on_bus(bus) for bus in EIGHT])
    assert (facts["state"], facts["lost_gpus"]) == ("driver_not_loaded", [])
    # In a container the PCI bus is hidden: the driver's answer stands.
    facts = nvml_facts(hgx(EIGHT[:2]))
    assert (facts["state"], facts["lost_gpus"]) == ("ok", [])


# --------------------------------------------------------------------------
# XID events
# --------------------------------------------------------------------------

def test_xid_events_of_the_recorded_lines():
    events = inv.parse_xid_events(read(XID_LOG))
    assert [(e["pci_address"], e["xid"], e["count"], e["fatal"]) for e in events] == [
        ("0000:cb:00.0", 13, 3, False),
        ("0000:cb:00.0", 109, 1, False),
        ("0000:2b:00.0", 79, 1, True),
        ("0000:dc:00.0", 45, 2, False),
        ("0000:ed:00.0", 45, 2, False),
        ("0000:ba:00.0", 45, 2, False),
        ("0000:97:00.0", 45, 1, False),
        ("0000:08:00.0", 69, 1, False),
        ("0000:08:00.0", 31, 1, False),
        ("0000:01:00.0", 3, 1, False),
        ("0000:01:00.0", 62, 1, True),
        ("0000:01:00.0", 154, 1, True),
        ("0000:10:1c.0", 63, 1, False),
        ("0000:01:00.0", 144, 1, False),
        ("0000:03:00.0", 79, 1, True),
        ("0000:c6:00.0", 79, 1, True),
    ]
    first = events[0]
    assert first == {
        "pci_address": "0000:cb:00.0", "gpu_index": None, "xid": 13, "name": "graphics engine exception",
        "action": "restart application", "fatal": False, "count": 3,
        "last": "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, "
                "Graphics Exception: ESR 0x57c730=0xc04000b 0x57c734=0x24 0x57c728=0x1f81fb60 0x57c72c=0x1174"}
    assert [(e["name"], e["action"]) for e in events if e["xid"] == 3] == [(None, None)]


def test_xid_names_for_the_xids_operators_act_on():
    for xid in (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120):
        name, action = inv.XID_CATALOG[xid]
        assert name and action
    assert set(inv.DEFAULT_UNHEALTHY_XIDS) <= set(inv.XID_CATALOG)
    assert inv.XID_CATALOG[79] == ("GPU has fallen off the bus", "reboot")


def test_xid_events_are_matched_to_gpus_without_the_function_in_the_line():
    log = ({"source": "file", "read": True, "message": None}, read(XID_LOG))
    facts = nvml_facts(hgx([0x2B, 0xCB]), kernel_log=log)
    gpus = facts["gpus"]
    assert [(e["xid"], e["gpu_index"]) for e in gpus[0]["xids"]] == [(79, 0)]
    assert [(e["xid"], e["gpu_index"], e["count"]) for e in gpus[1]["xids"]] == [(13, 1, 3), (109, 1, 1)]
    assert len(facts["xid_events"]) == 16
    xid_problems = [p for p in facts["health"]["problems"] if p["code"] == "xid"]
    assert xid_problems[0] == {
        "code": "xid", "pci_address": "0000:2b:00.0", "gpu_index": 0,
        "message": "Xid 79 (GPU has fallen off the bus) on GPU 0 (0000:2b:00.0), 1 since boot; reboot"}
    # The other fatal XIDs are of GPUs this host does not have: still reported, by address.
    assert [(p["pci_address"], p["gpu_index"]) for p in xid_problems] == [
        ("0000:2b:00.0", 0), ("0000:01:00.0", None), ("0000:01:00.0", None), ("0000:03:00.0", None),
        ("0000:c6:00.0", None)]
    assert (facts["state"], facts["health"]["status"]) == ("ok", "unhealthy")


def test_journal_short_monotonic_prefix():
    # The prefix as `journalctl -b 0 -o short-monotonic` printed it in the Debian 12 container,
    # before line 6 of the recorded lines (fixtures/kernel-log/SOURCES.md).
    line = "[12284.203178] a98de3504213 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
    (event,) = inv.parse_xid_events(line + "\n")
    assert (event["pci_address"], event["xid"], event["last"]) == ("0000:2b:00.0", 79, line)


@pytest.mark.parametrize("where,address", [
    # A GPU in MIG mode: the driver names the GPU instance, and the compute instance
    # (NVIDIA's A100 memory error management guide, and the driver's own format).
    ("PCI:0000:01:00 GPU-I:05", "0000:01:00.0"),
    ("PCI:0000:3b:00 GPU-I:01 GPU-CI:02", "0000:3b:00.0"),
])
def test_xid_lines_of_mig_instances_name_their_gpu(where, address):
    line = "NVRM: Xid (%s): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No" % where
    (event,) = inv.parse_xid_events(line + "\n")
    assert (event["pci_address"], event["xid"], event["fatal"]) == (address, 94, False)


@pytest.mark.parametrize("latest,fatal", [
    ("from 0x0 (None) to 0x1 (GPU Reset Required)", True),
    ("from 0x1 (GPU Reset Required) to 0x0 (None)", False),
    ("from 0x0 (None) to 0x2 (Node Reboot Required)", True),
])
def test_xid_154_counts_while_the_latest_recovery_action_is_not_none(latest, fatal):
    first = "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    line = "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed " + latest
    (event,) = inv.parse_xid_events(first + "\n" + line + "\n")
    assert (event["count"], event["fatal"]) == (2, fatal)
    (event,) = inv.parse_xid_events(line + "\n", unhealthy_xids=[79])
    assert event["fatal"] is False


def test_unhealthy_xids_are_the_callers_choice():
    events = inv.parse_xid_events(read(XID_LOG), unhealthy_xids=[13])
    assert sorted(set((e["xid"], e["fatal"]) for e in events if e["xid"] in (13, 79))) == [(13, True), (79, False)]
    assert not [e for e in inv.parse_xid_events(read(XID_LOG), unhealthy_xids=[]) if e["fatal"]]


@pytest.mark.parametrize("text", ["", "-- No entries --\n", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n", None])
def test_no_xid_lines(text):
    assert inv.parse_xid_events(text) == []


# --------------------------------------------------------------------------
# Reading the kernel log: one command
# --------------------------------------------------------------------------

JOURNAL = ("-k", "-b", "0", "--no-pager", "-o", "short-monotonic", "--grep", "NVRM: Xid")
# What the tools answered in the project's Debian 12 systemd container (no kernel messages in
# its journal, dmesg restricted), and on a host without a journal.
NO_ENTRIES = (1, "-- No entries --\n", "")
NO_JOURNAL = (1, "", "No journal files were found.\n")
DMESG_DENIED = (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")


class LogProbe(Probe):
    def __init__(self, tools, runs, files=None):
        super(LogProbe, self).__init__(runs=runs)
        self._tools = tools
        self._files = files or {}

    def which(self, name):
        return "/usr/bin/%s" % name if name in self._tools else None

    def read_text(self, path):
        if path not in self._files:
            raise IOError(2, "No such file or directory")
        return self._files[path]


@pytest.mark.parametrize("params,tools,runs,fact,ran", [
    ({}, ("journalctl", "dmesg"), {JOURNAL: (0, read(XID_LOG), "")},
     {"source": "journal", "read": True, "message": None}, [JOURNAL]),
    ({}, ("journalctl", "dmesg"), {JOURNAL: NO_ENTRIES},
     {"source": "journal", "read": True, "message": None}, [JOURNAL]),
    ({}, ("journalctl", "dmesg"), {JOURNAL: NO_JOURNAL, (): DMESG_DENIED},
     {"source": "dmesg", "read": False, "message": "journalctl -k failed with rc=1: No journal files were found.; "
      "dmesg failed with rc=1: dmesg: read kernel buffer failed: Operation not permitted"}, [JOURNAL, ()]),
    ({}, ("dmesg",), {(): (0, read(XID_LOG), "")},
     {"source": "dmesg", "read": True, "message": None}, [()]),
    ({}, (), {}, {"source": None, "read": False, "message": "journalctl not found; dmesg not found"}, []),
    ({"kernel_log": "journal"}, ("journalctl", "dmesg"), {JOURNAL: NO_JOURNAL},
     {"source": "journal", "read": False, "message": "journalctl -k failed with rc=1: No journal files were found."},
     [JOURNAL]),
    ({"kernel_log": "dmesg"}, ("journalctl", "dmesg"), {(): DMESG_DENIED},
     {"source": "dmesg", "read": False,
      "message": "dmesg failed with rc=1: dmesg: read kernel buffer failed: Operation not permitted"}, [()]),
    ({"kernel_log": "none"}, ("journalctl", "dmesg"), {},
     {"source": None, "read": False, "message": "not read (kernel_log=none)"}, []),
])
def test_read_kernel_log(params, tools, runs, fact, ran):
    probe = LogProbe(tools, runs)
    got, text = inv.read_kernel_log(params, probe)
    assert got == fact
    assert [tuple(argv[1:]) for argv in probe.ran] == ran
    assert (text is not None) == fact["read"]


def test_kernel_log_path_is_read_instead_of_running_anything():
    probe = LogProbe(("journalctl", "dmesg"), {}, files={"/var/tmp/kern.log": read(XID_LOG)})
    fact, text = inv.read_kernel_log({"kernel_log_path": "/var/tmp/kern.log"}, probe)
    assert (fact, probe.ran) == ({"source": "file", "read": True, "message": None}, [])
    assert len(inv.parse_xid_events(text)) == 16
    fact, text = inv.read_kernel_log({"kernel_log_path": "/var/tmp/absent.log"}, probe)
    assert fact == {"source": "file", "read": False, "message": "/var/tmp/absent.log: No such file or directory"}
    assert text is None


def test_kernel_log_path_without_a_probe_reader(tmp_path):
    path = tmp_path / "kern.log"
    path.write_text(read(XID_LOG))
    fact, text = inv.read_kernel_log({"kernel_log_path": str(path)}, Probe())
    assert fact["read"] and text == read(XID_LOG)


def test_unknown_kernel_log_mode_is_refused():
    with pytest.raises(inv.InventoryError) as caught:
        inv.read_kernel_log({"kernel_log": "syslog"}, Probe())
    assert "'syslog'" in str(caught.value)


def test_gather_with_a_saved_kernel_log_and_its_own_unhealthy_xids():
    probe = LogProbe((), {}, files={"/srv/kern.log": read(XID_LOG)})
    probe._pynvml = FakePynvml(hgx([0x2B, 0xCB]))
    facts = inv.gather({"kernel_log_path": "/srv/kern.log", "unhealthy_xids": [13]}, probe)
    assert facts["kernel_log"] == {"source": "file", "read": True, "message": None}
    assert [(p["code"], p["pci_address"]) for p in facts["health"]["problems"]] == [("xid", "0000:cb:00.0")]
    assert facts["gpus"][1]["xids"][0]["fatal"] is True


def test_gather_refuses_unhealthy_xids_that_are_not_numbers():
    with pytest.raises(inv.InventoryError) as caught:
        inv.gather({"unhealthy_xids": ["seventy-nine"]}, Probe())
    assert "unhealthy_xids" in str(caught.value)


# --------------------------------------------------------------------------
# Health status
# --------------------------------------------------------------------------

def h100_with(**calls):
    reading = copy.deepcopy(readings.H100)
    reading["devices"][0].update(calls)
    return reading


@pytest.mark.parametrize("reading,pci,status,codes", [
    (readings.H100, [], "healthy", []),
    (readings.NO_DEVICES, [], "unknown", []),
    (readings.LIBRARY_MISSING_HOST, [H100_PCI], "unknown", []),
    (readings.DRIVER_NOT_LOADED_HOST, [H100_PCI], "unhealthy", ["driver"]),
    (readings.MISMATCH_HOST, [H100_PCI], "unhealthy", ["driver"]),
    (readings.GPU_LOST, [], "unhealthy", ["gpu_lost"]),
    (h100_with(nvmlDeviceGetRemappedRows=[0, 1, 1, 0]), [], "unhealthy", ["row_remap_pending"]),
    (h100_with(nvmlDeviceGetRemappedRows=[0, 0, 0, 1]), [], "unhealthy", ["row_remap_failed"]),
    (h100_with(nvmlDeviceGetRetiredPagesPendingStatus=1), [], "unhealthy", ["retired_pages_pending"]),
    (h100_with(**{"nvmlDeviceGetTotalEccErrors(1,0)": 2}), [], "unhealthy", ["ecc_uncorrectable"]),
    # Corrected errors and aggregate (lifetime) counts alone are no problem.
    (h100_with(**{"nvmlDeviceGetTotalEccErrors(0,0)": 40, "nvmlDeviceGetTotalEccErrors(1,1)": 1}), [], "healthy", []),
])
def test_health_status(reading, pci, status, codes):
    facts = nvml_facts(reading, pci=pci)
    assert facts["health"]["status"] == status
    assert [p["code"] for p in facts["health"]["problems"]] == codes
    assert facts["health"]["status"] in inv.HEALTH_STATUSES
    for problem in facts["health"]["problems"]:
        assert set(problem) == {"code", "pci_address", "gpu_index", "message"} and problem["message"]


def test_health_problem_messages_name_the_gpu_and_what_to_do():
    facts = nvml_facts(h100_with(nvmlDeviceGetRemappedRows=[0, 1, 1, 0], **{"nvmlDeviceGetTotalEccErrors(1,0)": 2}))
    assert [p["message"] for p in facts["health"]["problems"]] == [
        "GPU 0 (0000:00:09.0): a row remapping is pending, reset the GPU to apply it",
        "GPU 0 (0000:00:09.0): 2 uncorrectable ECC errors since the driver loaded"]


# --------------------------------------------------------------------------
# sysfs: NVSwitch and virtual functions
# --------------------------------------------------------------------------

def test_scan_pci_marks_nvswitches_and_virtual_functions(tmp_path):
    root = tmp_path / "devices"
    for address, pci_class in (("0000:18:00.0", "0x030200"), ("0000:18:00.4", "0x030200"),
                               ("0000:05:00.0", "0x068000"), ("0000:06:00.0", "0x068000")):
        path = root / address
        path.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("device", "0x22a3" if pci_class == "0x068000" else "0x2330"),
                            ("class", pci_class), ("numa_node", "0")):
            (path / name).write_text(value + "\n")
    (root / "0000:18:00.4" / "physfn").symlink_to(root / "0000:18:00.0")
    devices = inv.scan_pci(str(root))
    assert [(d["address"], d["is_gpu"], d["is_nvswitch"], d["is_virtual_function"]) for d in devices] == [
        ("0000:05:00.0", False, True, False),
        ("0000:06:00.0", False, True, False),
        ("0000:18:00.0", True, False, False),
        ("0000:18:00.4", True, False, True),
    ]
    facts = nvml_facts(hgx([0x18]), pci=devices)
    assert (facts["nvswitches"], facts["state"]) == (["0000:05:00.0", "0000:06:00.0"], "ok")
