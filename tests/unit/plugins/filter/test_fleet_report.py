# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleet_report over facts built by nvml_inventory from real captures and recorded NVML readings."""

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter import fleet_report as public
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import device_plugin as dp
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import dra
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import fleet_report as fr
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import smoke_test as st
from ansible_collections.gpufleet.nvidia.plugins.filter.internal.node_labels import node_labels
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.filter.test_dra import published
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_nvml import H100_PCI
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_health import lost_in_fields
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_smi import fixture

A100_MIG_XML = "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"
T4_XML = "telegraf-tesla-t4-aws-driver-515.105.01-v11.xml"
A5000_PAIR_XML = "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"
A10G_XML = "telegraf-a10g-aws-passthrough-driver-515.105.01-v11.xml"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
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


def test_gpu_lost_is_a_bad_row_naming_the_lost_gpu():
    row = fr.fleet_report({"n": GPU_LOST})["rows"][0]
    assert (row["state"], row["severity"]) == ("gpu_lost", "bad")
    assert fr.SEVERITY["gpu_lost"] == "bad"
    assert "GPU 3" in row["message"]
    assert row["gpu_count"] == 4
    assert row["gpus"][0]["text"] == "3 \u00d7 NVIDIA H100 80GB HBM3"
    assert row["gpus"][1]["text"] == "1 \u00d7 unknown GPU"
    assert (row["health_status"], row["health_severity"], row["health_problems"]) == ("unhealthy", "bad", "gpu_lost GPU 3")
    # The facts' problem, said once: not again as the GPU's fault.
    assert row["health"] == ["GPU lost: NVML: GPU is lost"]
    assert [(g["index"], g["status"], g["severity"]) for g in row["gpu_health"]] == [
        (0, "healthy", "ok"), (1, "healthy", "ok"), (2, "healthy", "ok"), (3, "lost", "bad")]
    assert row["gpu_health"][0]["fabric"] == "completed, success"


def test_a_gpu_nvidia_smi_prints_as_lost_is_a_lost_gpu_of_the_row():
    """The A5000 pair's capture with 'GPU is lost' where the second GPU's values were: the driver still lists it."""
    xml = lost_in_fields(fixture(A5000_PAIR_XML).decode("utf-8"), "00000000:C1:00.0")
    facts = inv.summarise(inv.query_nvidia_smi(lambda argv: (0, xml, "") if argv[1:] == ["-q", "-x"] else (2, "", ""),
                                               "nvidia-smi"), [], driver_installed=True, module_version=None)
    row = fr.fleet_report({"n": facts})["rows"][0]
    assert (row["state"], row["severity"], row["health_status"]) == ("gpu_lost", "bad", "unhealthy")
    assert row["message"] == "1 of 2 GPUs lost: 0000:c1:00.0 (nvidia-smi: GPU is lost)"
    assert row["health"] == ["GPU lost: nvidia-smi: GPU is lost"]
    assert row["health_problems"] == "gpu_lost 0000:c1:00.0"
    assert [(g["index"], g["pci_address"], g["status"], g["severity"]) for g in row["gpu_health"]] == [
        (0, "0000:81:00.0", "healthy", "ok"), (1, "0000:c1:00.0", "lost", "bad")]


def test_gpus_nvidia_smi_cannot_read_are_lost_rows_of_unknown_address():
    # The real A100 capture: <attached_gpus> 4, one <gpu> printed.
    row = rows_by_node(fleet())["gpu1"]
    assert (row["state"], row["severity"], row["health_status"]) == ("gpu_lost", "bad", "unhealthy")
    assert row["health"] == ["3 x GPU lost: nvidia-smi reports 4 attached GPUs but prints 1"]
    assert row["health_problems"] == "3 x gpu_lost"
    assert [(g["name"], g["pci_address"], g["status"]) for g in row["gpu_health"]] == [
        ("NVIDIA A100-SXM4-80GB", "0000:01:00.0", "healthy")] + [("lost", None, "lost")] * 3


def with_xid(facts):
    """An XID 79 on the first GPU, as nvml_facts reads it from a kernel log line of that GPU."""
    sick = copy.deepcopy(facts)
    gpu = sick["gpus"][0]
    event = {"pci_address": gpu["pci_address"], "gpu_index": 0, "xid": 79, "name": "GPU has fallen off the bus",
             "action": "reset the GPU or reboot the node", "fatal": True, "count": 2,
             "last": "NVRM: Xid (PCI:%s): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
             % gpu["pci_address"][:-2]}
    gpu["xids"] = [event]
    sick["xid_events"] = [event]
    sick["health"] = {"status": "unhealthy", "problems": [{
        "code": "xid", "pci_address": gpu["pci_address"], "gpu_index": 0,
        "message": "Xid 79 (GPU has fallen off the bus) on GPU 0 (%s), 2 since boot" % gpu["pci_address"]}]}
    return sick


def test_xids_with_their_names_and_fabric_per_gpu():
    report = fr.fleet_report({"sick": with_xid(H100), "well": copy.deepcopy(H100)})
    rows = rows_by_node(report)
    (gpu,) = rows["sick"]["gpu_health"]
    assert gpu["xids"] == ["Xid 79 (GPU has fallen off the bus) x2, fatal"]
    assert (gpu["status"], gpu["fabric"]) == ("unhealthy", "completed, success")
    assert gpu["problems"] == ["Xid 79 (GPU has fallen off the bus) on GPU 0 (%s), 2 since boot" % gpu["pci_address"]]
    assert rows["sick"]["health"] == gpu["problems"]
    assert (rows["well"]["health_status"], rows["well"]["gpu_health"][0]["status"]) == ("healthy", "healthy")
    summary = report["summary"]
    assert summary["nodes_by_health"] == [{"status": "healthy", "count": 1, "severity": "ok"},
                                          {"status": "unhealthy", "count": 1, "severity": "bad"}]
    assert (summary["unhealthy_nodes"], summary["lost_gpus"]) == (["sick"], 0)
    assert fr.xid_text({"xid": 13, "name": None, "count": 1, "fatal": False}) == "Xid 13 (not in the catalog)"


@pytest.mark.parametrize("fabric, text", [
    ({"state": "completed", "status": "success"}, "completed, success"),
    ({"state": "in_progress", "status": None}, "in progress"),
    ({"state": "not_supported", "status": None}, "not supported"),
    ({"state": "completed", "status": "NVML: Unknown Error", "health": "Unhealthy"},
     "completed, NVML: Unknown Error, health Unhealthy"),
    ({"state": None, "status": None}, None),
    (None, None),
])
def test_fabric_text(fabric, text):
    assert fr.fabric_text(fabric) == text


def test_facts_without_health_are_of_unknown_health_with_the_flags_as_before():
    older = copy.deepcopy(A5000_PAIR)
    older.pop("health")
    older["gpus"][0]["health"]["retired_pages_pending"] = True
    row = fr.fleet_report({"n": older})["rows"][0]
    assert (row["health_status"], row["health_severity"]) == ("unknown", "info")
    assert row["health"] == ["GPU 0: retired pages pending"]
    assert [g["status"] for g in row["gpu_health"]] == ["unknown", "unknown"]


def test_a_finding_the_health_problems_say_is_not_said_twice():
    facts = copy.deepcopy(A5000_PAIR)
    facts["gpus"][1]["health"]["remapped_rows_pending"] = True
    facts["gpus"][1]["ecc"]["aggregate_uncorrectable"] = 1
    facts["health"] = {"status": "unhealthy", "problems": [{
        "code": "row_remap_pending", "pci_address": facts["gpus"][1]["pci_address"], "gpu_index": 1,
        "message": "GPU 1: a row remapping is pending, reset the GPU to apply it"}]}
    row = fr.fleet_report({"n": facts})["rows"][0]
    assert row["health"] == ["GPU 1: a row remapping is pending, reset the GPU to apply it",
                             "GPU 1: 1 uncorrectable ECC error (aggregate)"]


# ---- health flags -------------------------------------------------------------------

def test_health_flags_name_the_gpu_and_the_finding():
    facts = copy.deepcopy(A5000_PAIR)
    facts.pop("health")  # the flags as read from the GPUs' counters alone
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
    assert (summary["nodes"], summary["gpus"], summary["mig_devices"], summary["nodes_ok"]) == (7, 6, 8, 4)
    assert summary["nodes_by_state"] == [
        {"state": "ok", "count": 4, "severity": "ok"},
        {"state": "driver_not_loaded", "count": 1, "severity": "warn"},
        {"state": "gpu_lost", "count": 1, "severity": "bad"},
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
    # The A100 with 3 GPUs nvidia-smi cannot read, the H100 host whose driver is not loaded.
    assert summary["nodes_with_health_flags"] == summary["unhealthy_nodes"] == ["gpu1", "gpu4"]
    assert summary["nodes_by_health"] == [{"status": "healthy", "count": 4, "severity": "ok"},
                                          {"status": "unhealthy", "count": 2, "severity": "bad"},
                                          {"status": "unknown", "count": 1, "severity": "info"}]
    assert summary["lost_gpus"] == 3


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


def test_filters_are_exported():
    assert fr.FilterModule().filters() == {"cluster_results": fr.cluster_results}
    assert public.FilterModule().filters() == {"fleet_report": fr.fleet_report}


# ---- the cluster: results site.yml keeps, Nodes the API answers ----------------------------

RTX_4000_ADA = smi_facts("telegraf-rtx-4000-sff-ada-driver-595.84-v13.xml")
TIME = "2026-11-23T15:57:34Z"
LATER = "2026-11-24T08:02:11Z"
K8S_INFO_NO_LIBRARY = ("Failed to import the required Python library (kubernetes) on cp-01's Python /usr/bin/python3. "
                       "Please read the module documentation and install it in the appropriate location.")


def api_node(name, gpus=None, ready="True", unschedulable=False):
    """A Node as kubernetes.core.k8s_info returns it (shape of `kubectl get node -o json` of the simulated
    cluster's gpufleet-demo-1), with nvidia.com/gpu in its allocatable once the device plugin registered."""
    resources = {"cpu": "64", "ephemeral-storage": "959786032Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                 "memory": "527957648Ki", "pods": "110"}
    if gpus is not None:
        resources["nvidia.com/gpu"] = str(gpus)
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              "nvidia.com/gpu.present": "true"}},
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
        "status": {
            "allocatable": dict(resources), "capacity": dict(resources),
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available"},
                {"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown",
                 "message": "kubelet is posting ready status" if ready == "True" else
                 "Kubelet stopped posting node status."}],
            "nodeInfo": {"kubeletVersion": "v1.33.5", "containerRuntimeVersion": "containerd://1.6.20",
                         "osImage": "Debian GNU/Linux 12 (bookworm)"},
        },
    }
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def k8s_info(*nodes):
    return {"changed": False, "failed": False, "api_found": True, "resources": list(nodes)}


def fleet_hosts():
    return [{"host": "gpu-a.example", "node": "gpu-a", "facts": A5000_PAIR},
            {"host": "gpu-b.example", "node": "gpu-b", "facts": RTX_4000_ADA}]


def device_plugin_rows(a_gpus=2, b_gpus=1):
    """gpu_device_plugin_report as the role keeps it, from the real check over the Nodes."""
    return dp.device_plugin_check([api_node("gpu-a", a_gpus), api_node("gpu-b", b_gpus)], fleet_hosts(),
                                  {"default": {}})


def smoke_rows(b_events=None):
    """gpu_smoke_test_report as the role keeps it: gpu-a's pod printed its first GPU, gpu-b's never started."""
    plan = st.smoke_plan(fleet_hosts(), [api_node("gpu-a", 2), api_node("gpu-b", 1)], "nvidia.com/gpu", "one")["plan"]
    seen = "GPU 0: NVIDIA RTX A5000 (UUID: %s)\n" % A5000_PAIR["gpus"][0]["uuid"]
    pods = [
        {"metadata": {"name": plan[0]["pods"]["nvidia-smi"]}, "status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "smoke", "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": seen}}}]}},
        {"metadata": {"name": plan[1]["pods"]["nvidia-smi"]}, "status": {"phase": "Pending", "containerStatuses": [
            {"name": "smoke", "state": {"waiting": {"reason": "ContainerCreating"}}}]}},
    ]
    verdicts = st.smoke_stage_verdicts(plan, pods, logs={}, stage="nvidia-smi")
    verdicts = st.smoke_add_events(verdicts, b_events or {plan[1]["pods"]["nvidia-smi"]: [
        {"reason": "FailedCreatePodSandBox", "message": "no runtime for \"nvidia\" is configured",
         "lastTimestamp": "2026-11-23T15:57:20Z"}]})
    return st.smoke_rows(plan, {"nvidia-smi": verdicts}, ["nvidia-smi"])


def test_cluster_results_keep_each_hosts_rows_with_their_time():
    results = fr.cluster_results("", device_plugin=device_plugin_rows(), smoke_test=smoke_rows(), time=TIME)
    assert (results["format"], results["written_by"]) == (1, "gpufleet.nvidia.site")
    assert list(results["hosts"]) == ["gpu-a.example", "gpu-b.example"]
    a = results["hosts"]["gpu-a.example"]
    assert a["node"] == "gpu-a"
    assert a["device_plugin"] == {"node": "gpu-a", "config": "default", "expected": {"nvidia.com/gpu": 2},
                                  "advertised": {"nvidia.com/gpu": 2}, "basis": "2 GPUs", "ok": True,
                                  "unhealthy": False, "message": "advertises nvidia.com/gpu=2", "time": TIME}
    assert (a["smoke_test"]["ok"], a["smoke_test"]["verdict"], a["smoke_test"]["time"]) == (
        True, "passed nvidia-smi", TIME)
    assert "host" not in a["smoke_test"] and "host" not in a["device_plugin"]
    b = results["hosts"]["gpu-b.example"]["smoke_test"]
    assert (b["ok"], b["verdict"]) == (False, "FAILED nvidia-smi")
    assert "no runtime for \"nvidia\" is configured" in b["detail"][-1]


def test_a_later_run_replaces_only_what_it_ran():
    first = json.dumps(fr.cluster_results(None, device_plugin_rows(), smoke_rows(), time=TIME))
    # --tags smoke_test --limit gpu-b.example: only gpu-b's smoke row is new; it passed this time.
    passed = [dict(row, ok=True, verdict="passed nvidia-smi", detail=["nvidia-smi: saw GPU-x"])
              for row in smoke_rows() if row["host"] == "gpu-b.example"]
    later = fr.cluster_results(first, smoke_test=passed, time=LATER)
    assert later["hosts"]["gpu-a.example"] == json.loads(first)["hosts"]["gpu-a.example"]
    assert later["hosts"]["gpu-b.example"]["device_plugin"]["time"] == TIME
    assert (later["hosts"]["gpu-b.example"]["smoke_test"]["ok"], later["hosts"]["gpu-b.example"]["smoke_test"]["time"]) == (
        True, LATER)


def test_rows_without_a_verdict_change_nothing():
    first = fr.cluster_results(None, device_plugin_rows(), smoke_rows(), time=TIME)
    # Check mode: smoke_rows of a plan whose pods were never created.
    plan = st.smoke_plan(fleet_hosts(), [api_node("gpu-a", 2), api_node("gpu-b", 1)], "nvidia.com/gpu", "one")["plan"]
    not_run = st.smoke_rows(plan, {}, ["nvidia-smi"])
    assert [row["verdict"] for row in not_run] == ["not run", "not run"]
    assert fr.cluster_results(first, smoke_test=not_run, time=LATER) == first
    assert fr.cluster_results(first) == first
    # A node left alone because its GPUs are busy is a verdict of its own.
    busy = [dict(not_run[0], tested=False, verdict="not tested: nvidia.com/gpu all requested by running pods: ml/trainer-0")]
    kept = fr.cluster_results(first, smoke_test=busy, time=LATER)["hosts"]["gpu-a.example"]["smoke_test"]
    assert (kept["tested"], kept["ok"], kept["time"]) == (False, None, LATER)


def test_rows_of_hosts_the_run_left_out_change_nothing():
    first = fr.cluster_results(None, device_plugin_rows(), smoke_rows(), time=TIME)
    # --limit kube_control_plane,gpu-b.example: gpu-a is named as left out, its earlier rows stay.
    out_dp = [{"host": "gpu-a.example", "node": "gpu-a", "ok": False, "excluded": "outside --limit, not contacted",
               "message": "not checked: outside --limit, not contacted"}]
    out_smoke = [{"host": "gpu-a.example", "node": "gpu-a", "ok": None, "tested": False, "why": "excluded",
                  "verdict": "not tested: outside --limit, not contacted", "detail": []}]
    later = fr.cluster_results(first, device_plugin=out_dp, smoke_test=out_smoke, time=LATER)
    assert later["hosts"]["gpu-a.example"] == first["hosts"]["gpu-a.example"]


@pytest.mark.parametrize("previous", ["{not json", "[]", json.dumps({"hosts": []}), json.dumps({"format": 2, "hosts": {}})])
def test_a_file_that_is_not_ours_is_replaced(previous):
    results = fr.cluster_results(previous, device_plugin_rows(), time=TIME)
    assert list(results["hosts"]) == ["gpu-a.example", "gpu-b.example"]


@pytest.mark.parametrize("kwargs, words", [
    ({"device_plugin": device_plugin_rows()}, "give the time of the rows"),
    ({"smoke_test": [{"node": "gpu-a", "ok": True}], "time": TIME}, "smoke_test must be a list of rows with a 'host' "
                                                                    r"\(gpu_smoke_test_report\)"),
    ({"device_plugin": {"host": "a"}, "time": TIME}, r"device_plugin must be .* \(gpu_device_plugin_report\)"),
])
def test_cluster_results_refuse_bad_rows(kwargs, words):
    with pytest.raises(AnsibleFilterError, match=words):
        fr.cluster_results(None, **kwargs)


def cluster(nodes, results=None, **extra):
    value = {"api_host": "cp-01", "nodes": nodes,
             "node_names": {"gpu-a.example": "gpu-a", "gpu-b.example": "gpu-b"},
             "results": json.dumps(results) if isinstance(results, dict) else results,
             "results_file": "/srv/reports/cluster-results.json"}
    value.update(extra)
    return value


def facts_by_host():
    return {"gpu-a.example": copy.deepcopy(A5000_PAIR), "gpu-b.example": copy.deepcopy(RTX_4000_ADA)}


def test_rows_say_what_each_node_advertises_now_and_its_last_smoke_verdict():
    results = fr.cluster_results(None, device_plugin_rows(), smoke_rows(), time=TIME)
    nodes = k8s_info(api_node("gpu-a", 2), api_node("gpu-b", 1), api_node("control-plane-1"))
    report = fr.fleet_report(facts_by_host(), cluster(nodes, results))
    a, b = [row["cluster"] for row in report["rows"]]
    assert (a["node"], a["advertised"], a["advertised_source"], a["advertises"], a["advertises_severity"]) == (
        "gpu-a", {"nvidia.com/gpu": 2}, "api", "nvidia.com/gpu: 2", "ok")
    assert (a["node_status"], a["smoke"], a["smoke_ok"], a["smoke_severity"], a["smoke_time"]) == (
        "Ready", "passed nvidia-smi", True, "ok", "2026-11-23 15:57 UTC")
    assert a["smoke_detail"] == "nvidia-smi: saw %s" % A5000_PAIR["gpus"][0]["uuid"]
    assert (b["smoke"], b["smoke_ok"], b["smoke_severity"]) == ("FAILED nvidia-smi", False, "bad")
    assert b["smoke_detail"].startswith("nvidia-smi: ") and "FailedCreatePodSandBox" in b["smoke_detail"]
    summary = report["summary"]["cluster"]
    assert (summary["state"], summary["message"], summary["api_host"]) == ("read", "3 Nodes read through cp-01", "cp-01")
    assert summary["advertised"] == [{"resource": "nvidia.com/gpu", "count": 3, "nodes": 2}]
    assert summary["smoke"] == {"passed": 1, "failed": 1, "not_tested": 0, "no_verdict": 0}
    assert summary["results_problem"] is None


@pytest.mark.parametrize("node, advertises, severity, status", [
    (api_node("gpu-a", 2, unschedulable=True), "nvidia.com/gpu: 2", "warn", "Ready, cordoned"),
    (api_node("gpu-a", 2, ready="Unknown"), "nvidia.com/gpu: 2", "warn", "NotReady (NodeStatusUnknown)"),
    # The device plugin is not running there (or its pods crash): nothing advertised, while the GPUs answer.
    (api_node("gpu-a"), "no nvidia.com/ resource, though nvml_facts sees 2 GPUs", "bad", "Ready"),
    (api_node("gpu-a", 0), "no nvidia.com/ resource, though nvml_facts sees 2 GPUs", "bad", "Ready"),
    (api_node("gpu-z", 2), "no Node named gpu-a in the cluster", "warn", None),
])
def test_what_a_node_advertises_and_its_status(node, advertises, severity, status):
    row = fr.fleet_report({"gpu-a.example": copy.deepcopy(A5000_PAIR)}, cluster(k8s_info(node)))["rows"][0]
    assert (row["cluster"]["advertises"], row["cluster"]["advertises_severity"], row["cluster"]["node_status"]) == (
        advertises, severity, status)


def test_a_node_advertising_less_than_site_yml_expected_is_flagged():
    # site.yml's check saw both GPUs; one fell off since (the kubelet took it out of allocatable).
    results = fr.cluster_results(None, device_plugin_rows(), time=TIME)
    report = fr.fleet_report(facts_by_host(), cluster(k8s_info(api_node("gpu-a", 1), api_node("gpu-b", 1)), results))
    a, b = [row["cluster"] for row in report["rows"]]
    assert (a["advertises"], a["advertises_severity"]) == (
        "nvidia.com/gpu: 1; its hardware gives nvidia.com/gpu=2 (2 GPUs, site.yml's check)", "bad")
    assert (b["advertises"], b["advertises_severity"]) == ("nvidia.com/gpu: 1", "ok")
    report = fr.fleet_report(facts_by_host(), cluster(k8s_info(api_node("gpu-a"), api_node("gpu-b", 1)), results))
    assert report["rows"][0]["cluster"]["advertises"] == (
        "no nvidia.com/ resource; its hardware gives nvidia.com/gpu=2 (2 GPUs, site.yml's check)")


def test_a_node_name_defaults_to_the_host():
    row = fr.fleet_report({"gpu-a": copy.deepcopy(A5000_PAIR)},
                          cluster(k8s_info(api_node("gpu-a", 2)), node_names={}))["rows"][0]
    assert (row["cluster"]["node"], row["cluster"]["advertises"]) == ("gpu-a", "nvidia.com/gpu: 2")


def test_a_host_without_working_gpus_advertising_nothing_is_not_flagged():
    row = fr.fleet_report({"gpu-a.example": copy.deepcopy(NOT_LOADED)}, cluster(k8s_info(api_node("gpu-a"))))["rows"][0]
    assert (row["cluster"]["advertises"], row["cluster"]["advertises_severity"]) == ("no nvidia.com/ resource", "info")


@pytest.mark.parametrize("answer, message", [
    ({"unreachable": True, "msg": "Failed to connect to the host via ssh: ssh: connect to host cp-01 port 22: "
      "Connection refused", "changed": False},
     "cp-01 could not be reached: Failed to connect to the host via ssh: ssh: connect to host cp-01 port 22: "
     "Connection refused"),
    ({"failed": True, "msg": K8S_INFO_NO_LIBRARY, "changed": False},
     "reading the Nodes through cp-01 failed: " + K8S_INFO_NO_LIBRARY),
    (None, "the Nodes were not read through cp-01"),
])
def test_without_the_api_the_rows_use_what_site_yml_recorded(answer, message):
    results = fr.cluster_results(None, device_plugin_rows(b_gpus=0), smoke_rows(), time=TIME)
    report = fr.fleet_report(facts_by_host(), cluster(answer, results))
    assert (report["summary"]["cluster"]["state"], report["summary"]["cluster"]["message"]) == ("not_read", message)
    a, b = [row["cluster"] for row in report["rows"]]
    assert (a["advertises"], a["advertised_source"], a["advertised_time"], a["advertises_severity"]) == (
        "nvidia.com/gpu: 2", "recorded", "2026-11-23 15:57 UTC", "ok")
    assert (b["advertises"], b["advertises_severity"]) == (
        "advertises nvidia.com/gpu=0, its hardware gives 1 (1 GPU)", "bad")
    assert a["node_status"] is None
    assert (a["smoke"], b["smoke"]) == ("passed nvidia-smi", "FAILED nvidia-smi")
    assert report["summary"]["cluster"]["advertised_source"] == "recorded"


def test_without_a_cluster_the_rows_say_so():
    for value in (None, {}, {"api_host": "", "results": None}):
        report = fr.fleet_report(facts_by_host(), value)
        row = report["rows"][0]["cluster"]
        assert (row["advertises"], row["advertised"], row["smoke"], row["smoke_time"], row["smoke_severity"]) == (
            "no cluster in the inventory", {}, "no verdict recorded", None, "info")
        summary = report["summary"]["cluster"]
        assert (summary["state"], summary["advertised"], summary["smoke"]["no_verdict"]) == ("none", [], 2)
        assert summary["message"] == "no Kubernetes API host in the inventory (kube_control_plane, or gpufleet_kube_api_host)"


def test_a_results_file_that_cannot_be_read_is_named_in_the_rows():
    report = fr.fleet_report(facts_by_host(), cluster(k8s_info(api_node("gpu-a", 2)), results="<html>proxy error"))
    row = report["rows"][0]["cluster"]
    assert row["smoke"] == "no verdict recorded"
    assert row["smoke_detail"].startswith("/srv/reports/cluster-results.json is not JSON (")
    assert report["summary"]["cluster"]["results_problem"] == row["smoke_detail"]


def test_a_busy_node_is_not_tested_and_not_a_failure():
    plan = st.smoke_plan(fleet_hosts()[:1], [api_node("gpu-a", 2)], "nvidia.com/gpu", "one")["plan"]
    busy = [dict(st.smoke_rows(plan, {}, ["nvidia-smi"])[0], tested=False,
                 verdict="not tested: nvidia.com/gpu all requested by running pods: ml/trainer-0")]
    results = fr.cluster_results(None, smoke_test=busy, time=TIME)
    report = fr.fleet_report({"gpu-a.example": copy.deepcopy(A5000_PAIR)}, cluster(k8s_info(api_node("gpu-a", 2)), results))
    row = report["rows"][0]["cluster"]
    assert (row["smoke"], row["smoke_tested"], row["smoke_severity"]) == (
        "not tested: nvidia.com/gpu all requested by running pods: ml/trainer-0", False, "warn")
    assert report["summary"]["cluster"]["smoke"] == {"passed": 0, "failed": 0, "not_tested": 1, "no_verdict": 0}


@pytest.mark.parametrize("value, words", [
    (["cp-01"], "cluster must be a dict"),
    ({"api_host": "cp-01", "nodes": {"changed": False, "resources": "none"}}, "cluster.nodes must be"),
])
def test_bad_cluster_input_is_refused(value, words):
    with pytest.raises(AnsibleFilterError, match=words):
        fr.fleet_report({}, value)


@pytest.mark.parametrize("stamp, text", [
    ("2026-11-23T15:57:34Z", "2026-11-23 15:57 UTC"),
    ("2026-11-23T15:57:34.120+00:00", "2026-11-23 15:57 UTC"),
    ("2026-11-23T16:57:34+01:00", "2026-11-23T16:57:34+01:00"),
    (None, None),
])
def test_times_read_in_utc(stamp, text):
    assert fr.when_text(stamp) == text


def test_rows_show_what_the_health_gating_left_on_each_node():
    sick = api_node("gpu-a", gpus=1)
    sick["metadata"]["labels"].update({"gpufleet.nvidia.com/gpu-health": "unhealthy",
                                       "gpufleet.nvidia.com/gpu-health-reason": "xid"})
    sick["spec"]["taints"] = [{"key": "gpufleet.nvidia.com/gpu-unhealthy", "value": "xid", "effect": "NoSchedule"}]
    well = api_node("gpu-b", gpus=1)
    well["metadata"]["labels"]["gpufleet.nvidia.com/gpu-health"] = "healthy"
    report = fr.fleet_report({"gpu-a.example": with_xid(H100), "gpu-b.example": copy.deepcopy(H100), "gpu-c": None},
                             cluster([sick, well, api_node("gpu-c", gpus=1)]))
    rows = rows_by_node(report)
    assert (rows["gpu-a.example"]["cluster"]["gating"], rows["gpu-a.example"]["cluster"]["gating_severity"]) == (
        "gpu-health=unhealthy (xid), tainted NoSchedule=xid", "bad")
    assert (rows["gpu-b.example"]["cluster"]["gating"], rows["gpu-b.example"]["cluster"]["gating_severity"]) == (
        "gpu-health=healthy", "ok")
    assert (rows["gpu-c"]["cluster"]["gating"], rows["gpu-c"]["health_status"]) == (None, "unknown")


# ---- the DRA path: what each DRA node publishes, as site.yml's gpu_dra_driver check recorded it ----------

A5000_LOST = copy.deepcopy(A5000_PAIR)
A5000_LOST["health"] = {"status": "unhealthy", "problems": [
    {"code": "gpu_lost", "severity": "critical", "pci_address": "0000:c1:00.0", "gpu_index": None,
     "message": "GPU lost: NVML: GPU is lost"}]}
# Host -> (node, facts) of the DRA nodes: all published (4 MIG devices), one GPU of two missing, the same on
# a node whose facts say it lost that GPU.
DRA_NODES = {"gpu-c.example": ("gpu-c", H100_MIG), "gpu-d.example": ("gpu-d", A5000_PAIR),
             "gpu-e.example": ("gpu-e", A5000_LOST)}
DRA_NAMES = {"gpu-a.example": "gpu-a", "gpu-b.example": "gpu-b", "gpu-c.example": "gpu-c", "gpu-d.example": "gpu-d",
             "gpu-e.example": "gpu-e"}
A5000_SECOND = A5000_PAIR["gpus"][1]["uuid"]


def dra_slices():
    """The slices NVIDIA's DRA driver publishes for the DRA nodes, gpu-d and gpu-e without their second GPU."""
    slices = [published(facts, node) for node, facts in DRA_NODES.values()]
    for item in slices[1:]:
        item["spec"]["devices"] = item["spec"]["devices"][:1]
    return slices


def dra_rows(excluded=()):
    """gpu_dra_driver_report as the role keeps it, from the real check over those slices."""
    hosts = [{"host": host, "node": node, "facts": facts, "excluded": "outside --limit, not contacted"
              if host in excluded else None} for host, (node, facts) in DRA_NODES.items()]
    return dra.dra_slices_check(dra_slices(), hosts)


def dra_api_node(name, gpus=None):
    node = api_node(name, gpus)
    node["metadata"]["labels"][fr.DRA_NODE_LABEL] = "true"
    return node


def dra_facts():
    facts = facts_by_host()
    facts.update((host, copy.deepcopy(value)) for host, (dummy, value) in DRA_NODES.items())
    return facts


def dra_results():
    return fr.cluster_results(None, device_plugin_rows(), smoke_rows(), dra=dra_rows(), time=TIME)


def test_cluster_results_keep_what_each_dra_node_publishes_counted():
    results = dra_results()
    assert results["format"] == 1
    assert list(results["hosts"]) == ["gpu-a.example", "gpu-b.example", "gpu-c.example", "gpu-d.example",
                                      "gpu-e.example"]
    assert "dra" not in results["hosts"]["gpu-a.example"]
    c = results["hosts"]["gpu-c.example"]
    assert c["node"] == "gpu-c"
    assert c["dra"] == {"node": "gpu-c", "expected": 4, "published": 4, "ok": True, "unhealthy": False,
                        "message": "publishes 2 x NVIDIA H100 80GB HBM3 MIG 1g.10gb, 1 x NVIDIA H100 80GB HBM3 MIG "
                                   "2g.20gb, 1 x NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                        "publishes": [
                            {"type": "mig", "product": "NVIDIA H100 80GB HBM3", "profile": "1g.10gb", "count": 2},
                            {"type": "mig", "product": "NVIDIA H100 80GB HBM3", "profile": "2g.20gb", "count": 1},
                            {"type": "mig", "product": "NVIDIA H100 80GB HBM3", "profile": "3g.40gb", "count": 1}],
                        "time": TIME}
    d = results["hosts"]["gpu-d.example"]["dra"]
    assert (d["ok"], d["unhealthy"], d["expected"], d["published"], d["message"]) == (
        False, False, 2, 1, "does not publish GPU %s" % A5000_SECOND)
    assert d["publishes"] == [{"type": "gpu", "product": "NVIDIA RTX A5000", "profile": None, "count": 1}]
    assert "devices" not in d and "host" not in d
    e = results["hosts"]["gpu-e.example"]["dra"]
    assert (e["ok"], e["unhealthy"], e["message"]) == (
        False, True, "unhealthy (gpu_lost), not checked: does not publish GPU %s" % A5000_SECOND)
    # The file is JSON as to_nice_json writes it, and reads back the same.
    assert fr.cluster_results(json.dumps(results)) == results


def test_a_dra_row_of_a_host_the_run_left_out_changes_nothing():
    first = dra_results()
    later = fr.cluster_results(first, dra=dra_rows(excluded=("gpu-c.example",)), time=LATER)
    assert later["hosts"]["gpu-c.example"] == first["hosts"]["gpu-c.example"]
    assert later["hosts"]["gpu-d.example"]["dra"]["time"] == LATER
    # A host of no earlier run that the run left out is not added.
    only = fr.cluster_results(None, dra=dra_rows(excluded=("gpu-c.example",)), time=LATER)
    assert list(only["hosts"]) == ["gpu-d.example", "gpu-e.example"]


def test_rows_say_on_which_path_each_node_is_and_what_each_dra_node_publishes():
    nodes = k8s_info(api_node("gpu-a", 2), api_node("gpu-b", 1), dra_api_node("gpu-c"), dra_api_node("gpu-d"),
                     dra_api_node("gpu-e"))
    report = fr.fleet_report(dra_facts(), cluster(nodes, dra_results(), node_names=DRA_NAMES))
    rows = dict((row["node"], row["cluster"]) for row in report["rows"])
    # A node on the device plugin path: as before, and no DRA sentence.
    a = rows["gpu-a.example"]
    assert (a["path"], a["path_source"], a["path_text"], a["dra"], a["dra_severity"]) == (
        "device_plugin", "api", "device plugin", None, "info")
    assert (a["advertises"], a["advertises_severity"]) == ("nvidia.com/gpu: 2", "ok")
    # A DRA node that publishes what its hardware has.
    c = rows["gpu-c.example"]
    assert (c["path"], c["path_source"], c["path_text"]) == ("dra", "api", "DRA")
    assert (c["dra"], c["dra_severity"], c["dra_ok"], c["dra_time"]) == (
        "publishes 4 MIG devices (NVIDIA H100 80GB HBM3 MIG: 2 \u00d7 1g.10gb, 1 \u00d7 2g.20gb, 1 \u00d7 3g.40gb)",
        "ok", True, "2026-11-23 15:57 UTC")
    # No nvidia.com/ resource there is right, not a device plugin failure.
    assert (c["advertises"], c["advertises_severity"]) == ("no nvidia.com/ resource (DRA path)", "info")
    # A DRA node missing a GPU is a problem, named like a device plugin shortfall.
    d = rows["gpu-d.example"]
    assert (d["dra"], d["dra_severity"], d["dra_ok"], d["dra_published"], d["dra_expected"]) == (
        "publishes 1 of 2 devices: does not publish GPU %s" % A5000_SECOND, "bad", False, 1, 2)
    # So is one whose facts say it lost that GPU: the check names its health.
    e = rows["gpu-e.example"]
    assert (e["dra"], e["dra_severity"]) == (
        "publishes 1 of 2 devices: unhealthy (gpu_lost), not checked: does not publish GPU %s" % A5000_SECOND, "bad")
    assert rows_by_node(report)["gpu-e.example"]["health_status"] == "unhealthy"
    summary = report["summary"]["cluster"]
    assert summary["paths"] == [{"path": "device_plugin", "text": "device plugin", "count": 2},
                                {"path": "dra", "text": "DRA", "count": 3}]
    assert summary["dra"] == {
        "nodes": 3, "ok": 1, "failed": 2, "problems": ["gpu-d.example", "gpu-e.example"],
        "publishes": [{"type": "gpu", "count": 2}, {"type": "mig", "count": 4}],
        "text": "3 nodes on the DRA path, 1 publishing what their hardware has; 2 GPUs, 4 MIG devices published; "
                "to look at: gpu-d.example, gpu-e.example"}
    assert summary["advertised"] == [{"resource": "nvidia.com/gpu", "count": 3, "nodes": 2}]


def test_without_the_api_the_dra_rows_use_what_site_yml_recorded():
    # gpu-c was on the device plugin path before: its older row there does not count against the DRA path.
    older = fr.cluster_results(None, dp.device_plugin_check([api_node("gpu-c")], [
        {"host": "gpu-c.example", "node": "gpu-c", "facts": H100_MIG}], {"default": {}}), time="2026-11-20T09:00:00Z")
    assert older["hosts"]["gpu-c.example"]["device_plugin"]["ok"] is False
    results = fr.cluster_results(older, device_plugin_rows(), dra=dra_rows(), time=TIME)
    report = fr.fleet_report(dra_facts(), cluster(None, results, node_names=DRA_NAMES))
    rows = dict((row["node"], row["cluster"]) for row in report["rows"])
    c = rows["gpu-c.example"]
    assert (c["path"], c["path_source"], c["dra_severity"], c["advertises"], c["advertises_severity"]) == (
        "dra", "recorded", "ok", "none expected (DRA path)", "info")
    assert (c["advertised"], c["advertised_source"]) == ({}, None)
    assert (rows["gpu-d.example"]["path"], rows["gpu-d.example"]["dra_severity"]) == ("dra", "bad")
    assert (rows["gpu-a.example"]["path"], rows["gpu-a.example"]["path_source"]) == ("device_plugin", "recorded")
    # Moved back: a device plugin row newer than the DRA row puts the node on the device plugin path.
    back = fr.cluster_results(results, dp.device_plugin_check([api_node("gpu-c", 1)], [
        {"host": "gpu-c.example", "node": "gpu-c", "facts": H100_MIG}], {"default": {}}), time=LATER)
    c = fr.fleet_report(dra_facts(), cluster(None, back, node_names=DRA_NAMES))["rows"][2]["cluster"]
    assert (c["node"], c["path"], c["dra"], c["advertises"], c["advertises_severity"]) == (
        "gpu-c", "device_plugin", None, "nvidia.com/gpu: 1", "ok")


def test_an_old_results_file_without_dra_reads_as_before():
    # A file cluster_results wrote before it kept DRA rows: format 1, no 'dra' anywhere.
    old = {"format": 1, "written_by": "gpufleet.nvidia.site", "hosts": {
        "gpu-a.example": {"node": "gpu-a", "device_plugin": {
            "node": "gpu-a", "config": "default", "expected": {"nvidia.com/gpu": 2}, "advertised": {"nvidia.com/gpu": 2},
            "basis": "2 GPUs", "ok": True, "unhealthy": False, "message": "advertises nvidia.com/gpu=2", "time": TIME}}}}
    report = fr.fleet_report(facts_by_host(), cluster(k8s_info(api_node("gpu-a", 2), api_node("gpu-b", 1)), old))
    a, b = [row["cluster"] for row in report["rows"]]
    assert report["summary"]["cluster"]["results_problem"] is None
    assert (a["advertises"], a["advertises_severity"], a["path"], a["dra"]) == (
        "nvidia.com/gpu: 2", "ok", "device_plugin", None)
    assert (b["path"], b["dra"], b["smoke"]) == ("device_plugin", None, "no verdict recorded")
    assert report["summary"]["cluster"]["dra"] == {"nodes": 0, "ok": 0, "failed": 0, "problems": [], "publishes": [],
                                                   "text": "no node on the DRA path"}
    # Without the API it is read as site.yml recorded it; this run's DRA rows are added beside.
    report = fr.fleet_report(facts_by_host(), cluster(None, old))
    assert (report["rows"][0]["cluster"]["path"], report["rows"][0]["cluster"]["advertises"]) == (
        "device_plugin", "nvidia.com/gpu: 2")
    assert report["rows"][1]["cluster"]["path"] is None and report["rows"][1]["cluster"]["path_text"] == "unknown"
    merged = fr.cluster_results(json.dumps(old), dra=dra_rows(), time=LATER)
    assert merged["hosts"]["gpu-a.example"] == old["hosts"]["gpu-a.example"]
    assert merged["hosts"]["gpu-c.example"]["dra"]["ok"] is True


def test_a_node_labelled_for_dra_with_nothing_recorded_or_advertising_gpus_is_flagged():
    nodes = k8s_info(api_node("gpu-a", 2), dra_api_node("gpu-b", 1))
    rows = [row["cluster"] for row in fr.fleet_report(facts_by_host(), cluster(nodes, None))["rows"]]
    b = rows[1]
    assert (b["path"], b["dra_severity"]) == ("dra", "warn")
    assert b["dra"] == "nothing recorded of what it publishes (site.yml's DRA check did not run or failed)"
    # The device plugin advertising a DRA node's GPU: two claims on one GPU.
    assert (b["advertises"], b["advertises_severity"]) == (
        "nvidia.com/gpu: 1, though the node is on the DRA path (nvidia.com/dra-kubelet-plugin=true)", "bad")
    # The label the inventory gives gpu_dra_driver counts.
    other = api_node("gpu-b", 1)
    other["metadata"]["labels"]["example.com/dra"] = "true"
    row = fr.fleet_report(facts_by_host(), cluster(k8s_info(api_node("gpu-a", 2), other), None,
                                                   dra_label="example.com/dra"))["rows"][1]["cluster"]
    assert (row["path"], row["advertises"]) == (
        "dra", "nvidia.com/gpu: 1, though the node is on the DRA path (example.com/dra=true)")
    # A NIC's nvidia.com/ resource on a DRA node is no second claim on its GPUs.
    nic = dra_api_node("gpu-b")
    nic["status"]["allocatable"]["nvidia.com/rdma_shared_device_a"] = "1k"
    row = fr.fleet_report(facts_by_host(), cluster(k8s_info(api_node("gpu-a", 2), nic), None))["rows"][1]["cluster"]
    assert (row["path"], row["advertises_severity"]) == ("dra", "info")
    assert row["advertises"] == "nvidia.com/rdma_shared_device_a: 1k (no GPU resource: DRA path)"


def test_a_dra_node_whose_node_lost_the_label_is_named():
    results = fr.cluster_results(None, dra=dra_rows(), time=TIME)
    nodes = k8s_info(api_node("gpu-c"), dra_api_node("gpu-d"), dra_api_node("gpu-e"))
    report = fr.fleet_report(dra_facts(), cluster(nodes, results, node_names=DRA_NAMES))
    c = rows_by_node(report)["gpu-c.example"]["cluster"]
    assert (c["path"], c["dra_severity"], c["dra_time"]) == ("device_plugin", "warn", "2026-11-23 15:57 UTC")
    assert c["dra"] == ("its Node has no nvidia.com/dra-kubelet-plugin=true, though site.yml's DRA check saw it on "
                        "the DRA path")
    assert (c["advertises"], c["advertises_severity"]) == ("no nvidia.com/ resource, though nvml_facts sees 1 GPU", "bad")
    assert report["summary"]["cluster"]["dra"]["problems"] == ["gpu-c.example", "gpu-d.example", "gpu-e.example"]


def test_cluster_results_refuse_bad_dra_rows():
    with pytest.raises(AnsibleFilterError, match=r"dra must be a list of rows with a 'host' \(gpu_dra_driver_report\)"):
        fr.cluster_results(None, dra=[{"node": "gpu-c", "ok": True}], time=TIME)
    with pytest.raises(AnsibleFilterError, match="give the time of the rows"):
        fr.cluster_results(None, dra=dra_rows())


@pytest.mark.parametrize("publishes, said", [
    ([{"type": "gpu", "product": "NVIDIA RTX A5000", "profile": None, "count": 2}],
     "publishes 2 GPUs (2 \u00d7 NVIDIA RTX A5000)"),
    ([{"type": "gpu", "product": "NVIDIA A100-SXM4-80GB", "profile": None, "count": 7},
      {"type": "mig", "product": "NVIDIA A100-SXM4-80GB", "profile": "1g.10gb", "count": 7}],
     "publishes 7 GPUs, 7 MIG devices (7 \u00d7 NVIDIA A100-SXM4-80GB; NVIDIA A100-SXM4-80GB MIG: 7 \u00d7 1g.10gb)"),
    ([], "publishes no devices"),
])
def test_what_an_ok_dra_node_publishes_is_counted_by_kind_and_model(publishes, said):
    results = {"format": 1, "written_by": "gpufleet.nvidia.site", "hosts": {"gpu-a.example": {"node": "gpu-a", "dra": {
        "node": "gpu-a", "expected": len(publishes), "published": len(publishes), "ok": True, "unhealthy": False,
        "message": "publishes ...", "publishes": publishes, "time": TIME}}}}
    row = fr.fleet_report({"gpu-a.example": copy.deepcopy(A5000_PAIR)}, cluster(None, results))["rows"][0]["cluster"]
    assert (row["path"], row["dra"], row["dra_severity"]) == ("dra", said, "ok")


# ---- drift against the inventory's pins, end of life, CUDA, time of writing, troubleshooting -----------

NOW = "2026-12-07T18:15:49Z"


def lifecycle():
    """The gpu_driver role's lifecycle table, as the report reads it."""
    with open(os.path.join(REPO, "roles", "gpu_driver", "vars", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["__gpu_driver_branch_lifecycle"]


def rollout():
    """A half-done rollout to 590.48.01: one node upgraded, two still on 515.105.01."""
    return {"a": copy.deepcopy(H100), "b": copy.deepcopy(T4), "c": copy.deepcopy(T4)}


def test_drift_is_measured_against_each_hosts_pin_not_the_majority():
    pins = dict((host, {"version": "590.48.01", "branch": "590"}) for host in ("a", "b", "c"))
    report = fr.fleet_report(rollout(), pins=pins)
    rows = rows_by_node(report)
    # The upgraded node is where the inventory wants it; the two the rollout has not reached drift.
    assert [row["node"] for row in report["rows"] if row["driver_drift"]] == ["b", "c"]
    assert (rows["b"]["driver_basis"], rows["b"]["driver_expected"], rows["b"]["driver_drift_text"]) == (
        "version", "590.48.01", "pinned 590.48.01 (gpu_driver_version)")
    summary = report["summary"]
    assert (summary["driver_drift"], summary["driver_drift_nodes"], summary["driver_drift_basis"]) == (
        True, ["b", "c"], "pinned")
    assert summary["driver_drift_basis_text"] == (
        "each node's pin in the inventory (gpu_driver_version, else gpu_driver_branch)")


def test_without_pins_drift_is_measured_against_the_majority_and_says_so():
    report = fr.fleet_report(rollout(), pins={"a": {"version": "", "branch": ""}})
    assert [row["node"] for row in report["rows"] if row["driver_drift"]] == ["a"]
    assert rows_by_node(report)["a"]["driver_drift_text"] == "515.105.01, the version most nodes run (nothing pinned)"
    assert report["summary"]["driver_drift_basis"] == "majority"
    assert report["summary"]["driver_drift_basis_text"] == (
        "the version most nodes run (515.105.01, most nodes), nothing being pinned in the inventory")


@pytest.mark.parametrize("pin, drift", [
    ({"branch": "515"}, False),
    ({"branch": "590"}, True),
    # A Debian version, as the role also takes it, is compared by its upstream part.
    ({"version": "515.105.01"}, False),
    ({"version": "1:515.105.01-1"}, False),
    ({"version": "515.105.02", "branch": "515"}, True),
])
@pytest.mark.parametrize("shape", ["dict", "triples"])
def test_a_host_pinned_by_branch_or_version(pin, drift, shape):
    # As report.yml gives them: host, gpu_driver_version, gpu_driver_branch zipped, empty where not set.
    pins = {"b": pin} if shape == "dict" else [["a", "", ""], ["b", pin.get("version", ""), pin.get("branch", "")]]
    report = fr.fleet_report(rollout(), pins=pins)
    rows = rows_by_node(report)
    assert rows["b"]["driver_drift"] is drift
    # a and c have no pin: measured against the version most nodes run.
    assert (rows["a"]["driver_drift"], rows["c"]["driver_drift"]) == (True, False)
    assert report["summary"]["driver_drift_basis"] == "mixed"
    assert report["summary"]["driver_drift_basis_text"] == (
        "the inventory's pin on 1 node, the version most nodes run (515.105.01) on 2 nodes with nothing pinned")


def test_a_branch_past_its_end_of_life_is_flagged_with_the_roles_table():
    report = fr.fleet_report({"a100": copy.deepcopy(A100_MIG), "ada": copy.deepcopy(RTX_4000_ADA),
                              "t4": copy.deepcopy(T4), "off": copy.deepcopy(NOT_LOADED)},
                             lifecycle=lifecycle(), time=NOW)
    rows = rows_by_node(report)
    assert rows["a100"]["driver_end_of_life"].startswith(
        "Driver branch 535 (long-term support branch) reached its end of life in June 2026")
    assert rows["t4"]["driver_end_of_life"].startswith("Driver branch 515 is past its end of life")
    # 595 is supported to March 2027; a node without a driver has no branch to judge.
    assert rows["ada"]["driver_end_of_life"] is None
    assert rows["off"]["driver_end_of_life"] is None
    summary = report["summary"]
    assert summary["end_of_life_nodes"] == ["a100", "t4"]
    assert summary["end_of_life_branches"] == [{"branch": "515", "nodes": ["t4"]}, {"branch": "535", "nodes": ["a100"]}]
    assert [line.split(":")[0] for line in summary["end_of_life"]] == ["1 node (t4)", "1 node (a100)"]
    assert summary["end_of_life_judged"] == "2026-12-07"
    # Judged on the day of writing: in May 2026, 535 was still supported.
    earlier = fr.fleet_report({"a100": copy.deepcopy(A100_MIG)}, lifecycle=lifecycle(), time="2026-05-04T08:00:00Z")
    assert earlier["rows"][0]["driver_end_of_life"] is None


def test_a_cuda_version_the_driver_cannot_serve_is_flagged():
    cuda = [{"name": "nvidia-smi", "image": "nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04", "require_cuda": "auto"},
            {"name": "vector-add", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
             "require_cuda": "auto"},
            {"name": "trainer", "image": "registry.example/ml/trainer:2.3", "require_cuda": ""}]
    report = fr.fleet_report({"a100": copy.deepcopy(A100_MIG), "h100": copy.deepcopy(H100), "t4": copy.deepcopy(T4),
                              "off": copy.deepcopy(NOT_LOADED)}, cuda=cuda)
    rows = rows_by_node(report)
    assert rows["a100"]["cuda_shortfalls"] == [
        "vector-add nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0 needs CUDA 12.5, driver 535.54.03 supports "
        "CUDA 12.2"]
    assert len(rows["t4"]["cuda_shortfalls"]) == 2
    # The H100's driver serves CUDA 13.1; the node whose driver is not loaded says so in its state.
    assert rows["h100"]["cuda_shortfalls"] == rows["off"]["cuda_shortfalls"] == []
    summary = report["summary"]
    assert summary["cuda_shortfall_nodes"] == ["a100", "t4"]
    assert summary["cuda_required"] == [
        {"what": "nvidia-smi nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04", "version": "12.2"},
        {"what": "vector-add nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", "version": "12.5"}]


def test_the_time_of_writing_is_kept_while_the_report_stays_the_same():
    report = fr.fleet_report(rollout(), time=NOW)
    assert (report["summary"]["written"], report["summary"]["written_text"]) == (NOW, "2026-12-07 18:15:49 UTC")
    marker = "<!-- gpufleet.nvidia.report written=%s digest=%s -->" % (NOW, report["summary"]["digest"])
    later = fr.fleet_report(rollout(), time="2026-12-08T09:00:00Z", previous="# GPU fleet report\n" + marker)
    assert later["summary"]["written"] == NOW
    changed = rollout()
    del changed["c"]
    moved = fr.fleet_report(changed, time="2026-12-08T09:00:00Z", previous=marker)
    assert moved["summary"]["written"] == "2026-12-08T09:00:00Z"
    assert fr.fleet_report(rollout())["summary"]["written"] is None


@pytest.mark.parametrize("kwargs, words", [
    ({"time": "2026-12-07 18:15"}, "time must be the time of writing"),
    ({"lifecycle": {"535": {"designation": "long-term support branch", "end_of_life": "2026-06"}}},
     "time must be the time of writing"),
    ({"pins": ["a"]}, "pins must be a dict"),
    ({"pins": {"a": "590"}}, "the pin of a must be"),
    ({"cuda": "12.4"}, "cuda must be a list"),
])
def test_bad_report_options_are_refused(kwargs, words):
    with pytest.raises(AnsibleFilterError, match=words):
        fr.fleet_report(rollout(), **kwargs)


def test_each_flagged_problem_links_to_the_troubleshooting_guide():
    guide = "https://docs.example/gpufleet/troubleshooting.html"
    report = fr.fleet_report({"a100": copy.deepcopy(A100_MIG), "h100": copy.deepcopy(H100), "t4": copy.deepcopy(T4),
                              "gone": None}, pins={"t4": {"branch": "535"}}, guide=guide)
    rows = rows_by_node(report)
    states, roles = guide + "#troubleshooting-the-states-nvml-facts-reports", guide + "#troubleshooting-what-the-roles-say"
    assert rows["a100"]["links"]["state"] == rows["a100"]["links"]["health"] == states
    assert rows["gone"]["links"]["state"] == states
    assert rows["t4"]["links"]["driver"] == roles
    assert set(rows["h100"]["links"].values()) == {None}
    assert report["summary"]["troubleshooting"] == guide
    assert fr.fleet_report({})["summary"]["troubleshooting"] == fr.TROUBLESHOOTING_URL == (
        "https://github.com/gpufleet/nvidia/blob/main/docs/docsite/rst/troubleshooting.rst")


def test_the_report_reads_the_results_configmap_as_k8s_info_answers():
    """report.yml hands the filter kubernetes.core.k8s_info's answer for the ConfigMap site.yml keeps the results in
    (cluster_results_store): its JSON text, or gzip-compressed for a large fleet, none yet, or a refusal."""
    from ansible_collections.gpufleet.nvidia.plugins.module_utils import cluster_results as cr

    row = {"host": "gpu-a", "node": "gpu-a", "ok": True, "tested": True, "verdict": "passed nvidia-smi", "detail": []}
    results = cr.merged_results(None, smoke_test=[row], time=TIME)
    where = "ConfigMap kube-system/gpufleet-cluster-results"
    data, binary, dummy = cr.configmap_content(results)
    hosts, problem = fr._results_hosts({"changed": False, "resources": [{"kind": "ConfigMap", "data": data}]}, where)
    assert problem is None and hosts["gpu-a"]["smoke_test"]["time"] == TIME and binary is None
    # None yet (site.yml's cluster part has not kept any): no results, no problem.
    assert fr._results_hosts({"changed": False, "resources": []}, where) == ({}, None)
    assert fr._results_hosts({"failed": True, "msg": "Unauthorized"}, where) == (
        {}, "ConfigMap kube-system/gpufleet-cluster-results could not be read: Unauthorized")
    broken = {"resources": [{"kind": "ConfigMap", "binaryData": {"results.json.gz": "bm90IGd6aXA="}}]}
    assert fr._results_hosts(broken, where)[1].startswith(where + ": results.json.gz is not gzip-compressed text")
    # A file's data without 'hosts' is still named as not ours.
    assert "no 'hosts' mapping" in fr._results_hosts({"format": 1}, "/srv/r.json")[1]
