# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DRA filters: what each node's ResourceSlices should hold given its facts, and the nodes the device plugin holds."""

from __future__ import annotations

import copy
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import dra
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings


def facts_of(reading):
    answer = inv.query_nvml(readings.RecordedNvml(reading))
    return inv.summarise(answer, [], True, answer["driver_version"])


H100 = facts_of(readings.H100)
H100_MIG = facts_of(readings.H100_MIG)


def published(facts, node, generation=1, count=1):
    """A slice as NVIDIA's driver publishes it for these facts (names and attributes of
    cmd/gpu-kubelet-plugin: uuid, productName, profile, memory in bytes)."""
    devices = []
    for gpu in facts["gpus"]:
        if (gpu.get("mig") or {}).get("current_mode") == "enabled":
            for number, mig in enumerate(gpu["mig"]["devices"]):
                devices.append({"name": "gpu-%d-mig-%d" % (gpu["index"], number), "attributes": {
                    "type": {"string": "mig"}, "uuid": {"string": mig["uuid"]},
                    "productName": {"string": gpu["name"]}, "profile": {"string": mig["profile"]},
                    "parentUUID": {"string": gpu["uuid"]}},
                    "capacity": {"memory": {"value": "%dMi" % mig["memory_total_mib"]}}})
            continue
        devices.append({"name": "gpu-%d" % gpu["index"], "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": gpu["uuid"]}, "productName": {"string": gpu["name"]}},
            "capacity": {"memory": {"value": "%dMi" % gpu["memory_total_mib"]}}})
    return {"metadata": {"name": "00000-gpu.nvidia.com-%s-abcde" % node},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
                     "devices": devices}}


def hosts(*entries):
    return [{"host": node, "node": node, "facts": facts, "excluded": None} for node, facts in entries]


def test_a_node_that_publishes_its_gpus_is_ok():
    rows = dra.dra_slices_check([published(H100, "h100"), published(H100_MIG, "mig")],
                                hosts(("h100", H100), ("mig", H100_MIG)))
    assert [row["ok"] for row in rows] == [True, True]
    assert rows[0]["message"] == "publishes %d x %s GPU" % (len(H100["gpus"]), H100["gpus"][0]["name"])
    # A GPU in MIG mode is published as its MIG devices only.
    assert rows[1]["expected"] == rows[1]["published"] == len(H100_MIG["gpus"][0]["mig"]["devices"])
    assert {d["type"] for d in rows[1]["devices"]} == {"mig"}


def test_a_missing_device_is_named_by_uuid():
    item = published(H100, "h100")
    gone = item["spec"]["devices"].pop()
    rows = dra.dra_slices_check([item], hosts(("h100", H100)))
    assert not rows[0]["ok"]
    assert rows[0]["message"] == "does not publish GPU %s" % gone["attributes"]["uuid"]["string"]


@pytest.mark.parametrize("change, words", [
    (lambda d: d["attributes"].update(productName={"string": "NVIDIA A100"}), "is published as 'NVIDIA A100'"),
    (lambda d: d["capacity"].update(memory={"value": "40Gi"}), "is published with 40960 MiB of memory"),
    (lambda d: d["attributes"].update(type={"string": "mig"}), "is published as type mig, the facts say gpu"),
])
def test_a_device_unlike_its_facts_is_named(change, words):
    item = published(H100, "h100")
    change(item["spec"]["devices"][0])
    rows = dra.dra_slices_check([item], hosts(("h100", H100)))
    assert not rows[0]["ok"] and words in rows[0]["message"]


def test_memory_within_one_percent_is_the_same():
    item = published(H100, "h100")
    mib = H100["gpus"][0]["memory_total_mib"]
    item["spec"]["devices"][0]["capacity"]["memory"]["value"] = "%dMi" % (mib - mib // 200)
    assert dra.dra_slices_check([item], hosts(("h100", H100)))[0]["ok"]


def test_a_mig_profile_unlike_the_facts_is_named():
    item = published(H100_MIG, "mig")
    item["spec"]["devices"][0]["attributes"]["profile"] = {"string": "7g.80gb"}
    rows = dra.dra_slices_check([item], hosts(("mig", H100_MIG)))
    assert "with profile '7g.80gb', the facts say" in rows[0]["message"]


def test_no_slice_an_incomplete_pool_and_an_older_generation():
    rows = dra.dra_slices_check([], hosts(("h100", H100)))
    assert rows[0]["message"] == "publishes no ResourceSlice of driver gpu.nvidia.com (expected %d device%s)" % (
        len(H100["gpus"]), "" if len(H100["gpus"]) == 1 else "s")
    rows = dra.dra_slices_check([published(H100, "h100", count=2)], hosts(("h100", H100)))
    assert rows[0]["message"] == "its pool of driver gpu.nvidia.com is incomplete (being updated)"
    # Only the newest generation counts: an old, complete slice beside a newer short one is not enough.
    newer = published(H100, "h100", generation=2)
    newer["spec"]["devices"] = []
    rows = dra.dra_slices_check([published(H100, "h100"), newer], hosts(("h100", H100)))
    assert rows[0]["published"] == 0 and not rows[0]["ok"]
    # Another driver's slice on the node is not this driver's.
    other = published(H100, "h100")
    other["spec"]["driver"] = "compute-domain.nvidia.com"
    assert not dra.dra_slices_check([other], hosts(("h100", H100)))[0]["ok"]


def test_a_node_that_lost_a_gpu_is_named_unhealthy_and_an_excluded_one_is_not_checked():
    lost = copy.deepcopy(H100)
    lost["health"] = {"status": "unhealthy", "problems": [{"code": "gpu_lost"}]}
    item = published(H100, "h100")
    item["spec"]["devices"] = item["spec"]["devices"][:-1]
    row = dra.dra_slices_check([item], hosts(("h100", lost)))[0]
    assert row["unhealthy"] and row["message"].startswith("unhealthy (gpu_lost), not checked: does not publish GPU")
    row = dra.dra_slices_check([], [{"host": "x", "node": "x", "facts": None, "excluded": "outside --limit"}])[0]
    assert row["excluded"] == "outside --limit" and row["message"] == "not checked: outside --limit"
    row = dra.dra_slices_check([], hosts(("h100", {"state": "no_driver", "message": "no module"})))[0]
    assert row["message"] == "cannot say what it should publish: NVIDIA state no_driver: no module"
    with pytest.raises(AnsibleFilterError):
        dra.dra_slices_check([], "h100")


def test_nodes_whose_gpus_a_device_plugin_advertises():
    nodes = [{"metadata": {"name": "a"}, "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64"}}},
             {"metadata": {"name": "b"}, "status": {"allocatable": {"nvidia.com/gpu": "0"}}},
             {"metadata": {"name": "c"}, "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7"}}},
             {"metadata": {"name": "d"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}]
    held = dra.dra_device_plugin_nodes(nodes, ["a", "b", "c"])
    assert held == [{"node": "a", "resources": {"nvidia.com/gpu": 8}, "words": "a (nvidia.com/gpu=8)"},
                    {"node": "c", "resources": {"nvidia.com/mig-1g.10gb": 7}, "words": "c (nvidia.com/mig-1g.10gb=7)"}]


SMI = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "nvidia-smi")


def smi_facts(capture):
    """A real nvidia-smi -q -x capture as the facts' driver_version and GPUs."""
    with open(os.path.join(SMI, capture)) as handle:
        return inv.parse_smi_xml(handle.read())


# NVIDIA's DRA driver for GPUs, docs/prerequisites.md at v0.4.1: "NVIDIA Driver | v565 or later for GPU allocation".
@pytest.mark.parametrize("capture, old", [
    ("telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml", "535.54.03"),
    ("telegraf-rtx-3090-passthrough-driver-525.147.05-v12-redacted.xml", "525.147.05"),
    ("telegraf-rtx-3060-driver-570.124.04-v12.xml", None),
    ("telegraf-rtx-3090-driver-590.44.01-v13.xml", None),
    ("telegraf-rtx-3080-driver-595.58.03-v13.xml", None),
])
def test_a_dra_host_whose_driver_is_older_than_565_is_named_with_its_version(capture, old):
    rows = [{"host": "gpu-a", "node": "gpu-a", "facts": smi_facts(capture), "excluded": None}]
    found = dra.dra_old_drivers(rows, "565")
    if old is None:
        assert found == []
    else:
        assert found == [{"host": "gpu-a", "driver_version": old, "words": "gpu-a (driver %s)" % old}]


def test_the_driver_minimum_is_read_number_by_number_and_hosts_without_a_version_are_left_out():
    def row(host, version, excluded=None):
        return {"host": host, "facts": None if version is False else {"driver_version": version}, "excluded": excluded}
    rows = [row("a", "560.35.03"), row("b", "565.57.01"), row("c", "565"), row("d", "1000.1"),
            row("e", None), row("f", False), row("g", "470.74", excluded="outside --limit, not contacted")]
    assert [r["host"] for r in dra.dra_old_drivers(rows, "565")] == ["a"]
    assert [r["host"] for r in dra.dra_old_drivers(rows, "565.57.02")] == ["a", "b", "c"]
    with pytest.raises(AnsibleFilterError):
        dra.dra_old_drivers(rows, "new")


@pytest.mark.parametrize("gates, expected", [
    ({"DynamicMIG": True}, ['mig-a (gpu_mig_layout "balanced")',
                            'mig-b (gpu_mig_layout [{"gpus": [0], "mig": false}])']),
    ({"DynamicMIG": "true"}, ['mig-a (gpu_mig_layout "balanced")',
                              'mig-b (gpu_mig_layout [{"gpus": [0], "mig": false}])']),
    ({"DynamicMIG": False}, []),
    ({"MPSSupport": True}, []),
    ({}, []),
])
def test_dynamic_mig_is_refused_beside_a_gpu_mig_layout_on_the_same_host(gates, expected):
    hostvars = {"mig-a": {"gpu_mig_layout": "balanced"}, "mig-b": {"gpu_mig_layout": [{"gpus": [0], "mig": False}]},
                "plain": {}, "empty": {"gpu_mig_layout": []}, "blank": {"gpu_mig_layout": ""}}
    found = dra.dra_dynamic_mig_layouts(["mig-a", "plain", "mig-b", "empty", "blank", "nowhere"], hostvars, gates)
    assert [r["words"] for r in found] == expected
