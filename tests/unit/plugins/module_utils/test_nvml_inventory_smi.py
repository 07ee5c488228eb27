# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-smi parsing over real captures; expectations were written by reading the files."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.nvidia_smi_expected import (
    LIST_EXPECTED,
    LIST_SECTION_MARKER,
    SUMMARY_EXPECTED,
    XML_EXPECTED,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "nvidia-smi")
XML_FILES = sorted(name for name in os.listdir(FIXTURES) if name.endswith(".xml"))


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        return handle.read()


def list_section(name):
    """The ``nvidia-smi -L`` output inside a multi-command capture."""
    lines = fixture(name).decode("utf-8").splitlines()
    start = lines.index(LIST_SECTION_MARKER) + 2  # skip the marker and the banner under it
    body = []
    for line in lines[start:]:
        if line.startswith("####"):
            break
        body.append(line)
    return "\n".join(body)


def test_every_xml_fixture_has_expectations():
    assert sorted(XML_EXPECTED) == XML_FILES


@pytest.mark.parametrize("name", XML_FILES)
def test_every_xml_fixture_parses(name):
    parsed = inv.parse_smi_xml(fixture(name))
    assert parsed["gpus"], name
    for gpu in parsed["gpus"]:
        assert gpu["name"]
        assert set(gpu) == set(inv.empty_gpu(0))


@pytest.mark.parametrize("name", sorted(XML_EXPECTED))
def test_xml_header(name):
    expected = XML_EXPECTED[name]
    parsed = inv.parse_smi_xml(fixture(name))
    assert parsed["driver_version"] == expected["driver_version"]
    assert parsed["cuda_driver_version"] == expected["cuda_driver_version"]
    assert parsed["attached_gpus"] == expected["attached_gpus"]
    assert len(parsed["gpus"]) == len(expected["gpus"])


def _observed(gpu):
    return {
        "pci_bus_id": gpu["pci_bus_id"],
        "uuid": gpu["uuid"],
        "name": gpu["name"],
        "serial": gpu["serial"],
        "memory_total_mib": gpu["memory_total_mib"],
        "architecture": gpu["architecture"],
        "persistence_mode": gpu["persistence_mode"],
        "minor_number": gpu["minor_number"],
        "power_limit_w": gpu["power_limit_w"],
        "ecc_mode_current": gpu["ecc"]["current_mode"],
        "mig_current_mode": gpu["mig"]["current_mode"],
        "mig_pending_mode": gpu["mig"]["pending_mode"],
        "mig_devices": [
            dict((key, device[key]) for key in (
                "index", "gpu_instance_id", "compute_instance_id", "memory_total_mib", "multiprocessor_count"))
            for device in gpu["mig"]["devices"]
        ],
        "retired_pages_pending": gpu["health"]["retired_pages_pending"],
        "remapped_rows_pending": gpu["health"]["remapped_rows_pending"],
        "remapped_rows_failure": gpu["health"]["remapped_rows_failure"],
    }


@pytest.mark.parametrize("name", sorted(XML_EXPECTED))
def test_xml_gpus(name):
    parsed = inv.parse_smi_xml(fixture(name))
    for gpu, expected in zip(parsed["gpus"], XML_EXPECTED[name]["gpus"]):
        assert _observed(gpu) == expected


@pytest.mark.parametrize("name", XML_FILES)
def test_no_marker_string_survives(name):
    """N/A, [N/A], deprecated and masked values become None, never the marker."""
    markers = ("N/A", "Requested functionality has been deprecated", "REDACTED", "Not Supported")

    def walk(value):
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            assert not any(marker in value for marker in markers), value

    walk(inv.parse_smi_xml(fixture(name)))


def test_index_follows_document_order_not_minor_number():
    # The A5000 pair: minor 1 for bus 81:00.0, minor 0 for C1:00.0.
    gpus = inv.parse_smi_xml(fixture("telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"))["gpus"]
    assert [(gpu["index"], gpu["minor_number"], gpu["pci_address"]) for gpu in gpus] == [
        (0, 1, "0000:81:00.0"),
        (1, 0, "0000:c1:00.0"),
    ]


def test_same_uuid_stays_two_gpus():
    name = "telegraf-2x-rtx-2070-driver-590.44.01-v13.xml"
    uuids = [gpu["uuid"] for gpu in inv.parse_smi_xml(fixture(name))["gpus"]]
    assert len(uuids) == 2
    masked = fixture(name).replace(b"0123456789cd", b"0123456789ab")
    twins = inv.parse_smi_xml(masked)["gpus"]
    assert [gpu["uuid"] for gpu in twins] == ["GPU-12345678-aaaa-bbbb-cccc-0123456789ab"] * 2
    assert [gpu["pci_bus_id"] for gpu in twins] == [gpu["pci_bus_id"] for gpu in inv.parse_smi_xml(fixture(name))["gpus"]]


@pytest.mark.parametrize("name", sorted(SUMMARY_EXPECTED))
def test_xml_state_and_lost_gpus(name):
    runs = Runs({("-q", "-x"): (0, fixture(name).decode("utf-8"), ""), ("-L",): (2, "", "unsupported")})
    facts = inv.summarise(inv.query_nvidia_smi(runs, "nvidia-smi"), [], driver_installed=True, module_version=None)
    assert (facts["state"], len(facts["lost_gpus"])) == SUMMARY_EXPECTED[name]
    assert facts["health"]["status"] == ("healthy" if facts["state"] == "ok" else "unhealthy")


def test_every_xml_fixture_has_a_summary_expectation():
    assert sorted(SUMMARY_EXPECTED) == XML_FILES


def test_attached_gpus_is_not_the_gpu_count():
    parsed = inv.parse_smi_xml(fixture("telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"))
    assert parsed["attached_gpus"] == 4
    assert len(parsed["gpus"]) == 1


def test_gpu_memory_is_not_taken_from_a_mig_device():
    gpu = inv.parse_smi_xml(fixture("telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"))["gpus"][0]
    assert gpu["memory_total_mib"] == 81920
    assert gpu["mig"]["capable"] is True
    assert gpu["pci_device_id"] == "0x20b2"


@pytest.mark.parametrize("name,values", [
    # Pascal layout: <single_bit>/<double_bit> totals; the P100 has ECC on.
    ("netdata-tesla-p100-pcie-16gb-passthrough-driver-510.47.03-v11.xml", ("enabled", 0, 0)),
    # Volta+ layout: sram/dram counters.
    ("telegraf-a10g-aws-passthrough-driver-515.105.01-v11.xml", ("enabled", 0, 0)),
    # 570+: SRAM uncorrectable split into parity/secded, ECC off on a GeForce.
    ("telegraf-rtx-3060-driver-570.124.04-v12.xml", (None, None, None)),
    # ECC-capable pro card with ECC disabled.
    ("telegraf-rtx-4000-sff-ada-driver-595.84-v13.xml", ("disabled", None, None)),
])
def test_ecc_layouts(name, values):
    ecc = inv.parse_smi_xml(fixture(name))["gpus"][0]["ecc"]
    assert (ecc["current_mode"], ecc["volatile_uncorrectable"], ecc["aggregate_uncorrectable"]) == values


def test_xml_without_doctype_or_header():
    parsed = inv.parse_smi_xml(fixture("telegraf-gtx-1070-ti-trimmed-v10.xml"))
    assert parsed["driver_version"] is None
    assert parsed["gpus"][0]["name"] == "GeForce GTX 1070 Ti"


@pytest.mark.parametrize("text", [
    b"",
    b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    b"<nvidia_smi_log><gpu>",
    b"<?xml version='1.0'?><html><body>proxy error</body></html>",
])
def test_garbage_is_an_inventory_error(text):
    with pytest.raises(inv.InventoryError):
        inv.parse_smi_xml(text)


@pytest.mark.parametrize("name", sorted(LIST_EXPECTED))
def test_list_output(name):
    assert inv.parse_smi_list(list_section(name)) == LIST_EXPECTED[name]


def test_list_output_of_an_older_driver():
    # R450-R470 print the MIG UUID in the MIG-GPU-<uuid>/<gi>/<ci> form.
    text = (
        "GPU 0: A100-SXM4-40GB (UUID: GPU-5fd3e2a4-6b4a-46a4-8a5c-4fd02f4fd0fb)\n"
        "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5fd3e2a4-6b4a-46a4-8a5c-4fd02f4fd0fb/7/0)\n"
    )
    assert inv.parse_smi_list(text)[0]["mig_devices"] == [
        {"index": 0, "profile": "1g.5gb", "uuid": "MIG-GPU-5fd3e2a4-6b4a-46a4-8a5c-4fd02f4fd0fb/7/0"}]


def test_list_adds_profiles_and_uuids_to_xml_mig_devices():
    name = "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"
    gpus = inv.parse_smi_xml(fixture(name))["gpus"]
    listed = [{
        "index": 0,
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": gpus[0]["uuid"],
        "mig_devices": [
            {"index": i, "profile": "1g.20gb", "uuid": "MIG-%d" % i} for i in range(4)],
    }]
    merged = inv.merge_smi_list(gpus, listed)
    assert [(d["profile"], d["uuid"]) for d in merged[0]["mig"]["devices"]] == [
        ("1g.20gb", "MIG-%d" % i) for i in range(4)]


def test_list_for_another_gpu_is_not_merged():
    name = "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"
    gpus = inv.parse_smi_xml(fixture(name))["gpus"]
    listed = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": None,
               "mig_devices": [{"index": 0, "profile": "1g.10gb", "uuid": "MIG-x"}]}]
    merged = inv.merge_smi_list(gpus, listed)
    assert merged[0]["mig"]["devices"][0]["profile"] is None


class Runs(object):
    """nvidia-smi answers by argv, recording what was asked."""

    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    def __call__(self, argv):
        self.asked.append(argv[1:])
        return self.answers[tuple(argv[1:])]


def test_query_runs_list_only_for_mig_devices():
    runs = Runs({("-q", "-x"): (0, fixture("telegraf-tesla-t4-aws-driver-515.105.01-v11.xml").decode(), "")})
    answer = inv.query_nvidia_smi(runs, "/usr/bin/nvidia-smi")
    assert answer["outcome"] == "ok"
    assert runs.asked == [["-q", "-x"]]


def test_query_merges_list_for_mig():
    xml = fixture("telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml").decode()
    listing = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-513536b6-7d19-9063-b049-1e69664bb298)\n" + "".join(
        "  MIG 1g.20gb     Device  %d: (UUID: MIG-%d)\n" % (i, i) for i in range(4))
    runs = Runs({("-q", "-x"): (0, xml, ""), ("-L",): (0, listing, "")})
    answer = inv.query_nvidia_smi(runs, "nvidia-smi")
    assert runs.asked == [["-q", "-x"], ["-L"]]
    assert [d["uuid"] for d in answer["gpus"][0]["mig"]["devices"]] == ["MIG-%d" % i for i in range(4)]


def test_query_keeps_xml_when_list_fails():
    xml = fixture("telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml").decode()
    runs = Runs({("-q", "-x"): (0, xml, ""), ("-L",): (15, "", "Unable to determine the device handle")})
    answer = inv.query_nvidia_smi(runs, "nvidia-smi")
    assert answer["outcome"] == "ok"
    assert [d["profile"] for d in answer["gpus"][0]["mig"]["devices"]] == [None] * 4


# What nvidia-smi prints in the states the inventory reports; the first is
# the real output seen in the nvml_facts molecule scenario (Debian packages).
@pytest.mark.parametrize("rc,stdout,outcome", [
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n", "not_loaded"),
    (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.163\n", "mismatch"),
    (6, "No devices were found\n", "no_devices"),
    (12, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the "
         "NVIDIA Display Driver is properly installed and present in your system.\n", "not_installed"),
    (15, "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system "
         "to recover this GPU\n", "gpu_lost"),
])
def test_query_reports_known_failures(rc, stdout, outcome):
    answer = inv.query_nvidia_smi(Runs({("-q", "-x"): (rc, stdout, "")}), "nvidia-smi")
    assert answer["outcome"] == outcome
    assert stdout.splitlines()[0] in answer["message"]


def test_query_fails_on_unknown_failure_with_output_attached():
    with pytest.raises(inv.InventoryError) as caught:
        inv.query_nvidia_smi(Runs({("-q", "-x"): (255, "", "Segmentation fault")}), "nvidia-smi")
    assert caught.value.details["rc"] == 255
    assert caught.value.details["stderr"] == "Segmentation fault"
    assert "Segmentation fault" in str(caught.value)


def test_query_fails_on_garbage_with_output_attached():
    with pytest.raises(inv.InventoryError) as caught:
        inv.query_nvidia_smi(Runs({("-q", "-x"): (0, "Wed Nov 19 12:00:00 2026\n+----+", "")}), "nvidia-smi")
    assert caught.value.details["rc"] == 0
    assert caught.value.details["stdout"].startswith("Wed Nov")


@pytest.mark.parametrize("value,expected", [
    ("N/A", None), ("[N/A]", None), ("[Not Supported]", None), ("REDACTED", None), ("[REDACTED]", None),
    ("Requested functionality has been deprecated", None), ("[Unknown Error]", None), ("  ", None),
    (" NVIDIA H100 ", "NVIDIA H100"), ("0000000000000", "0000000000000"), (b"535.54.03", "535.54.03"),
])
def test_clean(value, expected):
    assert inv.clean(value) == expected


@pytest.mark.parametrize("value,integer,expected", [
    ("81920 MiB", True, 81920), ("300.00 W", False, 300.0), ("-7 C", True, -7), ("16x", True, 16),
    ("N/A", True, None), ("[N/A]", False, None), ("Enabled", True, None), (" 40 % ", True, 40),
])
def test_to_number(value, integer, expected):
    assert inv.to_number(value, integer=integer) == expected


@pytest.mark.parametrize("bus_id,address", [
    ("00000000:01:00.0", "0000:01:00.0"),
    ("00000000:C1:00.0", "0000:c1:00.0"),
    ("0000:00:03.0", "0000:00:03.0"),
    ("00000001:3B:00.1", "0001:3b:00.1"),
    ("N/A", None),
    ("garbage", None),
])
def test_pci_address(bus_id, address):
    assert inv.pci_address(bus_id) == address


REAL_NO_DRIVER = os.path.join(os.path.dirname(__file__), "fixtures", "debian12-container-no-kernel-module")


def test_real_nvidia_smi_without_kernel_module():
    with open(os.path.join(REAL_NO_DRIVER, "nvidia-smi-q-x.stdout")) as handle:
        stdout = handle.read()
    with open(os.path.join(REAL_NO_DRIVER, "nvidia-smi-q-x.rc")) as handle:
        rc = int(handle.read())
    answer = inv.query_nvidia_smi(Runs({("-q", "-x"): (rc, stdout, "")}), "nvidia-smi")
    assert answer["outcome"] == "not_loaded"
    facts = inv.summarise(answer, [], driver_installed=True, module_version=None)
    assert (facts["state"], facts["driver_installed"], facts["driver_loaded"]) == ("no_gpu", True, False)
    assert stdout.strip() in facts["message"]


@pytest.mark.parametrize("name,mode", [
    ("telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml", "none"),
    ("telegraf-tesla-t4-aws-driver-515.105.01-v11.xml", "passthrough"),
    ("telegraf-grid-p4-1q-vgpu-guest-windows-driver-513.46-v11.xml", "vgpu"),
    ("rai-grid-k520-aws-driver-352.99-v7.xml", None),
])
def test_virtualization_mode_vocabulary_matches_nvml(name, mode):
    assert inv.parse_smi_xml(fixture(name))["gpus"][0]["virtualization_mode"] == mode


def test_gpu_lost_keeps_the_gpus_printed_before_the_failure():
    xml = fixture("telegraf-2x-rtx-2070-driver-590.44.01-v13.xml").decode()
    first_gpu_only = xml[:xml.index("<gpu id=", xml.index("<gpu id=") + 1)] + "</nvidia_smi_log>\n"
    failure = "Unable to determine the device handle for GPU0000:02:00.0: GPU is lost.\n"
    answer = inv.query_nvidia_smi(Runs({("-q", "-x"): (15, first_gpu_only, failure)}), "nvidia-smi")
    assert answer["outcome"] == "gpu_lost"
    assert [gpu["pci_bus_id"] for gpu in answer["gpus"]] == ["00000000:01:00.0"]
    facts = inv.summarise(answer, [], driver_installed=True, module_version=None)
    assert (facts["state"], facts["gpu_count"]) == ("gpu_lost", 1)
    # <attached_gpus> says 2, one is printed, the line names the other.
    assert facts["lost_gpus"] == [{"pci_address": "0000:02:00.0", "gpu_index": None, "source": "nvidia_smi",
                                   "message": "nvidia-smi: GPU is lost."}]
    assert facts["message"] == "1 of 2 GPUs lost: 0000:02:00.0 (nvidia-smi: GPU is lost.)"
