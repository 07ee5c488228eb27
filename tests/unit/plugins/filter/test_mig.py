# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_plan: a declared MIG layout checked against a node's GPUs and compared with what they run."""

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import mig
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "nvidia-smi")


def capture_facts(name):
    """Facts as nvml_facts makes them from a real nvidia-smi -q -x capture."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        text = handle.read()
    parsed = inv.parse_smi_xml(text)
    return {"state": "ok", "driver_version": parsed["driver_version"], "gpus": parsed["gpus"]}


A100 = "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"
RTX = "telegraf-rtx-3090-driver-590.44.01-v13.xml"


def a100(mode="disabled", devices=None, profiles=None):
    facts = capture_facts(A100)
    gpu = facts["gpus"][0]
    gpu["mig"]["current_mode"] = gpu["mig"]["pending_mode"] = mode
    gpu["mig"]["devices"] = devices or []
    gpu["mig"]["profiles"] = profiles or []
    return facts


def device(index, gi, profile):
    return {"index": index, "gpu_instance_id": gi, "compute_instance_id": 0, "profile": profile}


def test_the_capture_is_an_a100_80gb_in_mig_mode():
    facts = capture_facts(A100)
    gpu = facts["gpus"][0]
    assert gpu["name"] == "NVIDIA A100-SXM4-80GB" and gpu["mig"]["current_mode"] == "enabled"
    profiles, source, dummy = mig.gpu_profiles(gpu)
    assert source == "table"
    assert sorted(profiles) == ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    # The capture's four MIG devices carry no profile name (-q -x prints none): they differ from any layout.
    plan = mig.mig_plan(facts, "balanced")
    assert plan["gpus"][0]["action"] == "repartition"


@pytest.mark.parametrize("layout, groups, strategy, advertised", [
    ("balanced", [["1g.10gb"], ["1g.10gb"], ["2g.20gb"], ["3g.40gb"]], "mixed",
     {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1}),
    ("smallest", [["1g.10gb"]] * 7, "single", {"nvidia.com/gpu": 7}),
    ("largest", [["7g.80gb"]], "single", {"nvidia.com/gpu": 1}),
    ("disabled", [], "none", {"nvidia.com/gpu": 1}),
    ([{"instances": ["4g.40gb", {"gpu_instance": "3g.40gb", "compute_instances": ["1c.3g.40gb", "2c.3g.40gb"]}]}],
     [["1c.3g.40gb", "2c.3g.40gb"], ["4g.40gb"]], "mixed", {"nvidia.com/mig-4g.40gb": 1}),
    ([{"instances": ["1c.3g.40gb", "3g.40gb"]}], [["1c.3g.40gb"], ["3g.40gb"]], "mixed",
     {"nvidia.com/mig-3g.40gb": 1}),
    ([{"gpus": [0], "instances": []}], [], "none", {"nvidia.com/gpu": 1}),
])
def test_layouts_resolve_against_the_gpu(layout, groups, strategy, advertised):
    plan = mig.mig_plan(a100(), layout)
    assert plan["errors"] == []
    row = plan["gpus"][0]
    wanted = row["wanted"]
    assert sorted(sorted(i["compute_instances"]) for i in wanted["instances"]) == groups
    assert plan["strategy"] == strategy
    assert plan["advertised"] == advertised
    assert plan["config"]["gpus"][0]["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert plan["resource"] == ("nvidia.com/gpu" if strategy != "mixed" else
                                sorted(advertised, key=lambda r: mig._profile_order(r[len("nvidia.com/mig-"):]))[0])


def test_a_gpu_that_runs_its_layout_is_left_alone_and_one_that_does_not_is_named():
    running = a100("enabled", [device(0, 2, "3g.40gb"), device(1, 3, "2g.20gb"), device(2, 9, "1g.10gb"),
                               device(3, 10, "1g.10gb")])
    plan = mig.mig_plan(running, "balanced")
    assert plan["changes"] == [] and plan["gpus"][0]["action"] == "none"
    plan = mig.mig_plan(running, "largest")
    assert plan["changes"] == [
        "GPU 0 (NVIDIA A100-SXM4-80GB): MIG enabled: 3g.40gb, 2g.20gb, 1g.10gb x2 -> MIG enabled: 7g.80gb"]
    assert plan["gpus"][0]["action"] == "repartition"
    assert mig.mig_plan(a100("disabled"), "balanced")["gpus"][0]["action"] == "enable"
    assert mig.mig_plan(running, "disabled")["gpus"][0]["action"] == "disable"
    assert mig.mig_plan(a100("disabled"), "disabled")["changes"] == []


def test_compute_instances_in_one_gpu_instance_are_told_from_ones_in_two():
    split = a100("enabled", [device(0, 1, "1c.3g.40gb"), device(1, 1, "2c.3g.40gb")])
    layout = [{"instances": [{"gpu_instance": "3g.40gb", "compute_instances": ["1c.3g.40gb", "2c.3g.40gb"]}]}]
    assert mig.mig_plan(split, layout)["changes"] == []
    apart = a100("enabled", [device(0, 1, "1c.3g.40gb"), device(1, 2, "2c.3g.40gb")])
    assert len(mig.mig_plan(apart, layout)["changes"]) == 1


def test_a_pending_mode_counts_as_a_difference():
    facts = a100("disabled")
    facts["gpus"][0]["mig"]["pending_mode"] = "enabled"
    assert mig.mig_plan(facts, "disabled")["gpus"][0]["action"] == "disable"


@pytest.mark.parametrize("layout, message", [
    ([{"instances": ["5g.40gb"]}],
     "gpu_mig_layout[0].instances[0] is '5g.40gb': GPU 0 (NVIDIA A100-SXM4-80GB) has no MIG profile 5g.40gb; it "
     "supports 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),
    ([{"instances": ["3g.40gb"] * 3}],
     "gpu_mig_layout[0].instances asks for 3 x 3g.40gb on GPU 0 (NVIDIA A100-SXM4-80GB), which allows 2"),
    ([{"instances": ["4g.40gb", "3g.40gb", "1g.10gb"]}], "4g.40gb + 3g.40gb + 1g.10gb do not fit together on GPU 0"),
    ([{"instances": ["1g.20gb"] * 4 + ["1g.10gb"]}], "do not fit together"),
    ([{"instances": [{"gpu_instance": "3g.40gb", "compute_instances": ["2c.3g.40gb", "2c.3g.40gb"]}]}],
     "need 4 compute slices; a 3g.40gb GPU instance on GPU 0 (NVIDIA A100-SXM4-80GB) has 3"),
    ([{"instances": [{"gpu_instance": "3g.40gb", "compute_instances": ["4c.3g.40gb"]}]}],
     "compute_instances[0] is '4c.3g.40gb'"),
    ([{"instances": [{"gpu_instance": "3g.40gb", "compute_instances": ["1c.4g.40gb"]}]}],
     "compute_instances[0] is '1c.4g.40gb'"),
    ([{"gpus": [1], "layout": "balanced"}],
     "gpu_mig_layout[0].gpus names GPU 1, which the node does not have (it has 0)"),
    ([{"gpus": "some"}], "gpu_mig_layout[0].gpus is 'some'"),
    ([{"layout": "balanced"}, {"gpus": [0], "mig": False}], "gpu_mig_layout[1] names GPU 0"),
    ("everything", "gpu_mig_layout is 'everything'; give one of disabled, smallest, largest, balanced"),
    ({"layout": "balanced"}, "gpu_mig_layout must be a named layout"),
    ([{"instance": ["1g.10gb"]}], "gpu_mig_layout[0] has unknown keys instance"),
    ([{"mig": False, "instances": ["1g.10gb"]}], "gpu_mig_layout[0] gives mig: false and instances"),
    ([{"mig": "yes"}], "gpu_mig_layout[0].mig is 'yes'"),
    ([{"layout": "tiny"}], "gpu_mig_layout[0].layout is 'tiny'"),
    ([{"instances": "3g.40gb"}], "gpu_mig_layout[0].instances is '3g.40gb'; give a list"),
])
def test_bad_layouts_are_refused_naming_the_variable_the_gpu_and_the_profile(layout, message):
    plan = mig.mig_plan(a100(), layout)
    assert any(message in error for error in plan["errors"]), plan["errors"]
    assert plan["config"]["gpus"] == [] and plan["changes"] == []


def test_a_gpu_without_mig_is_refused():
    plan = mig.mig_plan(capture_facts(RTX), "balanced")
    assert plan["errors"] == ["gpu_mig_layout asks for MIG on GPU 0 (NVIDIA GeForce RTX 3090), which does not "
                              "support MIG"]
    # MIG off is fine on any GPU.
    assert mig.mig_plan(capture_facts(RTX), "disabled")["errors"] == []


def test_facts_without_a_working_driver_are_refused_and_no_layout_needs_none():
    assert "NVIDIA facts of this node say driver_not_loaded" in mig.mig_plan(
        {"state": "driver_not_loaded", "message": "no module"}, "balanced")["errors"][0]
    assert mig.mig_plan({"state": "driver_not_loaded"}, [])["errors"] == []
    assert mig.mig_plan(None, "")["config"]["gpus"] == []


def test_profiles_in_the_facts_are_used_for_gpus_the_tables_do_not_know():
    facts = a100()
    gpu = facts["gpus"][0]
    gpu["name"] = "NVIDIA Future GPU"
    assert "are not known" in mig.mig_plan(facts, "balanced")["errors"][0]
    gpu["mig"]["profiles"] = [{"name": "1g.30gb", "id": 19, "instances_free": 7, "instances_total": 7},
                              {"name": "7g.240gb", "id": 0, "instances_free": 1, "instances_total": 1}]
    assert mig.mig_plan(facts, [{"instances": ["1g.30gb"] * 7}])["errors"] == []
    assert "which allows 7" in mig.mig_plan(facts, [{"instances": ["1g.30gb"] * 8}])["errors"][0]
    assert "no MIG profile 1g.10gb" in mig.mig_plan(facts, [{"instances": ["1g.10gb"]}])["errors"][0]
    # Eight compute slices are more than the largest profile's seven.
    assert "do not fit" in mig.mig_plan(facts, [{"instances": ["7g.240gb", "1g.30gb"]}])["errors"][0]
    assert mig.mig_plan(facts, "largest")["gpus"][0]["wanted"]["instances"][0]["gpu_instance"] == "7g.240gb"
    assert "NVIDIA publishes no such layout" in mig.mig_plan(facts, "balanced")["errors"][0]


@pytest.mark.parametrize("name, memory, names, fits", [
    ("NVIDIA A100-SXM4-80GB", 81920, ["4g.40gb", "3g.40gb"], True),
    ("NVIDIA A100-SXM4-80GB", 81920, ["3g.40gb", "2g.20gb", "2g.20gb"], True),
    ("NVIDIA A100-SXM4-80GB", 81920, ["2g.20gb"] * 3 + ["1g.10gb"], True),
    ("NVIDIA A100-SXM4-80GB", 81920, ["1g.20gb"] * 2 + ["3g.40gb"], True),
    ("NVIDIA A100-SXM4-80GB", 81920, ["1g.10gb"] * 7, True),
    ("NVIDIA A100-SXM4-80GB", 81920, ["4g.40gb", "2g.20gb", "2g.20gb"], False),
    ("NVIDIA A100-SXM4-40GB", 40960, ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], True),
    ("NVIDIA H100 80GB HBM3", 81559, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], True),
    ("NVIDIA H100 NVL", 95830, ["3g.47gb", "3g.47gb"], True),
    ("NVIDIA H200", 143771, ["4g.71gb", "3g.71gb"], True),
    ("NVIDIA A30", 24576, ["2g.12gb", "1g.6gb", "1g.6gb"], True),
    ("NVIDIA A30", 24576, ["2g.12gb+me", "2g.12gb"], True),
    ("NVIDIA A30", 24576, ["4g.24gb", "1g.6gb"], False),
])
def test_placements_follow_nvidias_tables(name, memory, names, fits):
    facts = a100()
    gpu = facts["gpus"][0]
    gpu["name"], gpu["memory_total_mib"] = name, memory
    errors = mig.mig_plan(facts, [{"instances": names}])["errors"]
    assert (errors == []) is fits, errors


def test_gpu_pods_are_the_ones_holding_gpus_or_mig_devices():
    def pod(name, resources, phase="Running", init=False):
        spec = {"containers": [{"name": "c", "resources": resources}]}
        if init:
            spec = {"containers": [{"name": "c"}], "initContainers": [{"name": "i", "resources": resources}]}
        return {"metadata": {"namespace": "ml", "name": name}, "spec": spec, "status": {"phase": phase}}

    pods = [pod("a", {"limits": {"nvidia.com/gpu": "2"}}), pod("b", {"limits": {"cpu": "1"}}),
            pod("c", {"limits": {"nvidia.com/mig-1g.10gb": 1}}, phase="Succeeded"),
            pod("d", {"requests": {"nvidia.com/mig-3g.40gb": "1"}}, init=True), pod("e", {})]
    assert mig.mig_gpu_pods(pods) == ["ml/a (nvidia.com/gpu: 2)", "ml/d (nvidia.com/mig-3g.40gb: 1)"]


def test_advertised_gaps_name_each_resource_that_differs():
    expected = {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1}
    assert mig.mig_advertised_gaps(expected, {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": "1",
                                              "cpu": "64", "nvidia.com/gpu": "0"}) == []
    assert mig.mig_advertised_gaps(expected, {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "1"}) == [
        "nvidia.com/gpu: 1 advertised, the layout makes 0",
        "nvidia.com/mig-1g.10gb: 1 advertised, the layout makes 2",
        "nvidia.com/mig-3g.40gb: 0 advertised, the layout makes 1"]


def test_the_plan_does_not_change_the_facts():
    facts = a100()
    before = copy.deepcopy(facts)
    mig.mig_plan(facts, "balanced")
    assert facts == before


def two_a100s():
    facts = a100()
    second = copy.deepcopy(facts["gpus"][0])
    second["index"], second["uuid"] = 1, "GPU-2"
    facts["gpus"].append(second)
    return facts


def test_a_gpu_in_mig_mode_without_instances_makes_the_strategy_mixed():
    # NVIDIA's plugin refuses, under single, a MIG-enabled GPU with no MIG device; mixed ignores it.
    plan = mig.mig_plan(two_a100s(), [{"gpus": [0], "layout": "smallest"}, {"gpus": [1], "instances": []}])
    assert plan["errors"] == [] and plan["strategy"] == "mixed"
    assert plan["advertised"] == {"nvidia.com/mig-1g.10gb": 7}
    plan = mig.mig_plan(two_a100s(), "smallest")
    assert plan["strategy"] == "single" and plan["advertised"] == {"nvidia.com/gpu": 14}
    plan = mig.mig_plan(two_a100s(), [{"gpus": [0], "layout": "smallest"}, {"gpus": [1], "mig": False}])
    assert plan["strategy"] == "mixed"
    assert plan["advertised"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 7}


def test_a_pending_disable_on_a_gpu_that_runs_its_layout_is_a_change():
    facts = a100("enabled", [device(0, 0, "7g.80gb")])
    assert mig.mig_plan(facts, "largest")["changes"] == []
    facts["gpus"][0]["mig"]["pending_mode"] = "disabled"
    assert mig.mig_plan(facts, "largest")["gpus"][0]["action"] == "enable"


@pytest.mark.parametrize("name, memory, largest", [
    ("NVIDIA GH200 480GB", 97871, "7g.96gb"),
    ("NVIDIA GH200 144G HBM3e", 146831, "7g.144gb"),
    ("NVIDIA H200", 143771, "7g.141gb"),
    ("NVIDIA H100 NVL", 95830, "7g.94gb"),
    ("NVIDIA H100 PCIe", 95830, "7g.94gb"),
    ("NVIDIA H100 80GB HBM3", 81559, "7g.80gb"),
    ("NVIDIA A100-SXM4-40GB", 40960, "7g.40gb"),
    ("NVIDIA B200", 183359, "7g.180gb"),
    ("NVIDIA A30", 24576, "4g.24gb"),
])
def test_the_published_tables_by_product_and_memory(name, memory, largest):
    facts = a100()
    facts["gpus"][0]["name"], facts["gpus"][0]["memory_total_mib"] = name, memory
    plan = mig.mig_plan(facts, "largest")
    assert plan["errors"] == [] and plan["gpus"][0]["wanted"]["instances"][0]["gpu_instance"] == largest
