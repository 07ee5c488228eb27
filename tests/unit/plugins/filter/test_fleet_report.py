# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleet_report over facts built by nvml_inventory from real captures and recorded NVML readings."""

from __future__ import annotations

import copy

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter import fleet_report as fr
from ansible_collections.gpufleet.nvidia.plugins.filter.node_labels import node_labels
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_nvml import H100_PCI
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_smi import fixture

A100_MIG_XML = "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"
T4_XML = "telegraf-tesla-t4-aws-driver-515.105.01-v11.xml"
A5000_PAIR_XML = "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"
A10G_XML = "telegraf-a10g-aws-passthrough-driver-515.105.01-v11.xml"
SSH_REFUSED = "Task failed: Failed to connect to the host via ssh: ssh: connect to host 10.0.0.9 port 22: Connection refused"


def nvml_facts(reading, pci=()):
    """ansible_facts['nvidia'] as nvml_facts builds it from a recorded NVML reading."""
    answer = inv.query_nvml(readings.RecordedNvml(reading))
    return inv.summarise(answer, list(pci), driver_installed=True, module_version=None)


def smi_facts(name):
    """ansible_facts['nvidia'] as nvml_facts builds it from nvidia-smi printing a real capture.

    ``nvidia-smi -L`` is refused, as by the molecule stand-in: no capture of these machines has it.
    """
    calls = []

    def run(argv):
        calls.append(argv[1:])
        if argv[1:] == ["-q", "-x"]:
            return 0, fixture(name).decode("utf-8"), ""
        return 2, "", "unsupported"

    facts = inv.summarise(inv.query_nvidia_smi(run, "nvidia-smi"), [], driver_installed=True, module_version=None)
    facts["calls"] = calls
    return facts


H100 = nvml_facts(readings.H100)
H100_MIG = nvml_facts(readings.H100_MIG)
A100_MIG = smi_facts(A100_MIG_XML)
T4 = smi_facts(T4_XML)
A5000_PAIR = smi_facts(A5000_PAIR_XML)
NOT_LOADED = nvml_facts(readings.DRIVER_NOT_LOADED_HOST, [H100_PCI])
GPU_LOST = nvml_facts(readings.GPU_LOST)


def rows_by_node(report):
    return dict((row["node"], row) for row in report["rows"])


def fleet():
    return fr.fleet_report({
        "gpu10": copy.deepcopy(H100),
        "gpu2": copy.deepcopy(H100_MIG),
        "gpu1": copy.deepcopy(A100_MIG),
        "gpu3": copy.deepcopy(T4),
        "gpu20": copy.deepcopy(A5000_PAIR),
        "gpu4": copy.deepcopy(NOT_LOADED),
        "gpu5": {"unreachable": True, "msg": SSH_REFUSED, "changed": False},
    })


# ---- rows -----------------------------------------------------------------------

def test_nodes_are_in_natural_order():
    report = fr.fleet_report(dict((name, None) for name in ("node10", "node2", "Node3", "node1", "node2a", "gpu")))
    assert [row["node"] for row in report["rows"]] == ["gpu", "node1", "node2", "node2a", "Node3", "node10"]
    assert [row["node"] for row in fleet()["rows"]] == ["gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu10", "gpu20"]


def test_h100_row_from_the_nvml_reading():
    row = rows_by_node(fleet())["gpu10"]
    assert (row["state"], row["severity"], row["reached"]) == ("ok", "ok", True)
    assert row["gpus"] == [{
        "model": "NVIDIA H100 80GB HBM3", "count": 1, "memory_gib": 79.6,
        "text": "1 \u00d7 NVIDIA H100 80GB HBM3", "memory_text": "79.6 GiB",
    }]
    assert (row["gpu_count"], row["driver_version"], row["cuda_version"]) == (1, "590.48.01", "13.1")
    assert row["mig"]["text"] == "disabled"
    assert (row["mig"]["capable_gpus"], row["mig"]["enabled_gpus"], row["mig"]["device_count"]) == (1, 0, 0)
    assert row["health"] == []
    assert row["labels"] == node_labels(H100)
    assert row["labels_brief"] == [
        "gpu.product=NVIDIA-H100-80GB-HBM3", "gpu.count=1", "gpu.memory=81559", "gpu.family=hopper",
        "gpu.compute.major=9", "gpu.compute.minor=0", "mig.capable=true", "gpu.present=true",
        "cuda.driver-version.full=590.48.01", "cuda.runtime-version.full=13.1",
    ]


def test_mig_devices_counted_by_profile():
    mig = rows_by_node(fleet())["gpu2"]["mig"]
    assert mig["devices"] == [
        {"profile": "3g.40gb", "count": 1}, {"profile": "2g.20gb", "count": 1}, {"profile": "1g.10gb", "count": 2}]
    assert mig["text"] == "enabled: 1 \u00d7 3g.40gb, 1 \u00d7 2g.20gb, 2 \u00d7 1g.10gb"
    assert (mig["mode"], mig["device_count"], mig["pending"]) == ("enabled", 4, [])


def test_mig_devices_without_profile_names_through_nvidia_smi():
    # The XML has no profile names and -L was refused: the devices are counted by memory.
    assert A100_MIG["calls"] == [["-q", "-x"], ["-L"]]
    row = rows_by_node(fleet())["gpu1"]
    assert row["gpus"][0]["text"] == "1 \u00d7 NVIDIA A100-SXM4-80GB"
    assert row["gpus"][0]["memory_text"] == "80 GiB"
    assert (row["driver_version"], row["cuda_version"]) == ("535.54.03", "12.2")
    assert row["mig"]["text"] == "enabled: 4 \u00d7 19.5 GiB (profile not reported)"
    assert row["mig"]["device_count"] == 4


def test_gpus_grouped_by_model_and_memory():
    row = rows_by_node(fleet())["gpu20"]
    assert [(g["text"], g["memory_text"]) for g in row["gpus"]] == [("2 \u00d7 NVIDIA RTX A5000", "24 GiB")]
    assert row["mig"]["text"] == "not capable"
    # Two different boards in one node (a T4 and an A10G from real captures): two groups, in bus order.
    mixed = copy.deepcopy(T4)
    mixed["gpus"].append(dict(copy.deepcopy(smi_facts(A10G_XML)["gpus"][0]), index=1))
    row = fr.fleet_report({"mixed": mixed})["rows"][0]
    assert [(g["model"], g["count"], g["memory_gib"]) for g in row["gpus"]] == [
        ("Tesla T4", 1, 15.0), ("NVIDIA A10G", 1, 22.5)]
    assert row["gpu_count"] == 2


def test_pending_mig_change_is_shown():
    facts = copy.deepcopy(H100)
    facts["gpus"][0]["mig"]["pending_mode"] = "enabled"
    mig = fr.fleet_report({"n": facts})["rows"][0]["mig"]
    assert (mig["text"], mig["pending"]) == ("disabled", ["GPU 0: MIG enabled after reset"])


# ---- state-only hosts -------------------------------------------------------------

def test_driver_not_loaded_keeps_the_host_message():
    row = rows_by_node(fleet())["gpu4"]
    assert (row["state"], row["severity"], row["reached"]) == ("driver_not_loaded", "warn", True)
    assert row["message"] == "1 NVIDIA GPU on the PCI bus but the driver is not loaded; NVML: Driver Not Loaded"
    assert (row["gpu_count"], row["gpus"], row["driver_version"], row["labels"], row["labels_brief"]) == (
        0, [], None, {}, [])
    assert row["mig"]["text"] == "not capable"


@pytest.mark.parametrize("value, state, message", [
    ({"unreachable": True, "msg": SSH_REFUSED, "changed": False}, "unreachable", SSH_REFUSED),
    ({"unreachable": "no route to host"}, "unreachable", "no route to host"),
    (None, "unreachable", "no NVIDIA facts were gathered from this host"),
    ({"skipped": True, "changed": False}, "unreachable", "the NVIDIA facts task was skipped on this host"),
    ({"failed": True, "msg": "nvidia-smi -q -x did not print XML: syntax error"}, "error",
     "gpufleet.nvidia.nvml_facts failed: nvidia-smi -q -x did not print XML: syntax error"),
    ({"changed": False, "ansible_facts": {}}, "error", "gpufleet.nvidia.nvml_facts returned no ansible_facts['nvidia']"),
])
def test_hosts_without_facts(value, state, message):
    row = fr.fleet_report({"n1": value})["rows"][0]
    assert (row["state"], row["message"], row["severity"], row["reached"]) == (state, message, "bad", False)
    assert (row["gpu_count"], row["health"], row["labels"], row["driver_drift"]) == (0, [], {}, False)


def test_a_registered_result_reads_as_its_facts():
    registered = {"changed": False, "failed": False, "ansible_facts": {"nvidia": copy.deepcopy(A5000_PAIR)}}
    assert fr.fleet_report({"n": registered}) == fr.fleet_report({"n": copy.deepcopy(A5000_PAIR)})


def test_gpu_lost_is_an_error_row_with_a_health_flag():
    row = fr.fleet_report({"n": GPU_LOST})["rows"][0]
    assert (row["state"], row["severity"]) == ("error", "bad")
    assert "GPU 3 (unknown bus id): GPU is lost" in row["message"]
    assert row["gpu_count"] == 4
    assert row["gpus"][0]["text"] == "3 \u00d7 NVIDIA H100 80GB HBM3"
    assert row["gpus"][1]["text"] == "1 \u00d7 unknown GPU"
    assert row["health"] == ["GPU 3: GPU is lost"]


# ---- health flags -------------------------------------------------------------------

def test_health_flags_name_the_gpu_and_the_finding():
    facts = copy.deepcopy(A5000_PAIR)
    facts["gpus"][0]["health"]["retired_pages_pending"] = True
    facts["gpus"][1]["ecc"].update(volatile_uncorrectable=2, aggregate_uncorrectable=1)
    facts["gpus"][1]["health"].update(remapped_rows_pending=True, remapped_rows_failure=True)
    report = fr.fleet_report({"sick": facts, "well": copy.deepcopy(A5000_PAIR)})
    rows = rows_by_node(report)
    assert rows["sick"]["health"] == [
        "GPU 0: retired pages pending",
        "GPU 1: 2 uncorrectable ECC errors (volatile)",
        "GPU 1: 1 uncorrectable ECC error (aggregate)",
        "GPU 1: remapped rows pending",
        "GPU 1: row remapping failed",
    ]
    assert rows["well"]["health"] == []
    assert (report["summary"]["nodes_with_health_flags"], report["summary"]["health_flags"]) == (["sick"], 5)


def test_zero_and_unknown_counters_raise_no_flag():
    # The real captures report 0 or N/A everywhere: nothing to flag.
    for facts in (H100, H100_MIG, A100_MIG, T4, A5000_PAIR):
        assert fr.health_flags(facts["gpus"]) == []


# ---- summary ------------------------------------------------------------------------

def test_fleet_summary():
    summary = fleet()["summary"]
    assert (summary["nodes"], summary["gpus"], summary["mig_devices"], summary["nodes_ok"]) == (7, 6, 8, 5)
    assert summary["nodes_by_state"] == [
        {"state": "ok", "count": 5, "severity": "ok"},
        {"state": "driver_not_loaded", "count": 1, "severity": "warn"},
        {"state": "unreachable", "count": 1, "severity": "bad"},
    ]
    assert summary["gpus_by_model"] == [
        {"model": "NVIDIA H100 80GB HBM3", "count": 2},
        {"model": "NVIDIA RTX A5000", "count": 2},
        {"model": "NVIDIA A100-SXM4-80GB", "count": 1},
        {"model": "Tesla T4", "count": 1},
    ]
    assert summary["cuda_versions"] == [
        {"version": "13.1", "count": 3}, {"version": "12.2", "count": 1}, {"version": "11.7", "count": 1}]
    assert summary["nodes_with_health_flags"] == []


def test_driver_drift_is_flagged_against_the_version_most_nodes_run():
    report = fleet()
    summary = report["summary"]
    assert summary["driver_versions"] == [
        {"version": "590.48.01", "count": 2, "nodes": ["gpu2", "gpu10"], "baseline": True},
        {"version": "590.44.01", "count": 1, "nodes": ["gpu20"], "baseline": False},
        {"version": "535.54.03", "count": 1, "nodes": ["gpu1"], "baseline": False},
        {"version": "515.105.01", "count": 1, "nodes": ["gpu3"], "baseline": False},
    ]
    assert (summary["driver_drift"], summary["driver_baseline"], summary["driver_baseline_reason"]) == (
        True, "590.48.01", "most nodes")
    drifting = [row["node"] for row in report["rows"] if row["driver_drift"]]
    assert drifting == ["gpu1", "gpu3", "gpu20"]


def test_on_a_tie_the_newest_version_is_the_baseline():
    # 515.105.01 sorts after 590.48.01 as text; versions compare by number.
    summary = fr.fleet_report({"a": copy.deepcopy(T4), "b": copy.deepcopy(H100)})["summary"]
    assert [v["version"] for v in summary["driver_versions"]] == ["590.48.01", "515.105.01"]
    assert (summary["driver_baseline"], summary["driver_baseline_reason"], summary["driver_drift"]) == (
        "590.48.01", "newest", True)


def test_one_driver_version_is_no_drift():
    report = fr.fleet_report({"a": copy.deepcopy(H100), "b": copy.deepcopy(H100_MIG), "c": copy.deepcopy(NOT_LOADED),
                              "d": None})
    summary = report["summary"]
    assert summary["driver_drift"] is False
    assert summary["driver_versions"] == [{"version": "590.48.01", "count": 2, "nodes": ["a", "b"], "baseline": True}]
    assert not any(row["driver_drift"] for row in report["rows"])


def test_empty_fleet():
    report = fr.fleet_report({})
    assert report["rows"] == []
    assert report["summary"]["driver_baseline"] is None
    assert (report["summary"]["nodes"], report["summary"]["driver_drift"], report["summary"]["driver_versions"]) == (
        0, False, [])


# ---- input checks and helpers ---------------------------------------------------------

@pytest.mark.parametrize("nodes, words", [
    ([H100], "expects a dict of node name"),
    ({"n7": ["ok"]}, "the value for n7 must be"),
    ({"n8": {"gpus": []}}, "the value for n8 has no 'state'"),
])
def test_bad_input_is_refused_with_its_node(nodes, words):
    with pytest.raises(AnsibleFilterError, match=words):
        fr.fleet_report(nodes)


def test_the_input_is_left_alone():
    before = copy.deepcopy(H100_MIG)
    nodes = {"n": H100_MIG}
    fr.fleet_report(nodes)
    assert nodes == {"n": before}


@pytest.mark.parametrize("mib, gib, text", [
    (81920, 80.0, "80 GiB"), (81559, 79.6, "79.6 GiB"), (24564, 24.0, "24 GiB"), (15360, 15.0, "15 GiB"),
    (None, None, "unknown memory"),
])
def test_memory_in_gib(mib, gib, text):
    assert fr.gib(mib) == gib
    assert fr.gib_text(fr.gib(mib)) == text


def test_filter_is_exported():
    assert fr.FilterModule().filters() == {"fleet_report": fr.fleet_report}
