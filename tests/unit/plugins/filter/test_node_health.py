# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Health gating: the plan of labels and taint per Node, from facts and Nodes as the API returns them.

The facts are nvml_facts' own output over real captures (two RTX A5000, one A100 whose nvidia-smi
says 4 GPUs are attached and prints one), with the health fields of the facts contract added by
hand from those captures' values. The Nodes are what the simulated cluster of molecule/gpu_cluster
answers for its GPU nodes (kubelet's labels, a cordon taint with its timeAdded).
"""

from __future__ import annotations

import copy
import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import node_health as nh
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_health import lost_in_fields
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_smi import fixture

A5000_PAIR_XML = "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"
A100_MIG_XML = "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"
ON = {"gpufleet_health_labels": True, "gpufleet_health_taint": True}
LABELS_ONLY = {"gpufleet_health_labels": True, "gpufleet_health_taint": False}


def smi_facts(name):
    def run(argv):
        if argv[1:] == ["-q", "-x"]:
            return 0, fixture(name).decode("utf-8"), ""
        return 2, "", "unsupported"
    return inv.summarise(inv.query_nvidia_smi(run, "nvidia-smi"), [], driver_installed=True, module_version=None)


def without_health(facts):
    facts.pop("health", None)
    return facts


def healthy():
    facts = smi_facts(A5000_PAIR_XML)
    facts["health"] = {"status": "healthy", "problems": []}
    for gpu in facts["gpus"]:
        gpu["xids"] = []
    return facts


def gpu_lost():
    """The A100 capture: attached_gpus 4, one GPU printed; nvidia-smi cannot say which ones are missing."""
    facts = smi_facts(A100_MIG_XML)
    message = "nvidia-smi reports 4 attached GPUs and could read 1"
    facts["state"] = "gpu_lost"
    facts["lost_gpus"] = [{"pci_address": None, "source": "nvidia_smi", "message": message}]
    facts["health"] = {"status": "unhealthy", "problems": [
        {"code": "gpu_lost", "pci_address": None, "gpu_index": None, "message": message}]}
    return facts


def fell_off_the_bus():
    """One A5000 of the pair fell off the bus: gpu_lost by its PCI address and its XID 79."""
    facts = healthy()
    facts["state"] = "gpu_lost"
    facts["health"] = {"status": "unhealthy", "problems": [
        {"code": "gpu_lost", "pci_address": "0000:c1:00.0", "gpu_index": None,
         "message": "NVIDIA GPU 0000:c1:00.0 is on the PCI bus but the driver does not report it"},
        {"code": "xid", "pci_address": "0000:c1:00.0", "gpu_index": 1,
         "message": "Xid 79 (GPU has fallen off the bus), 1 event since boot"}]}
    return facts


def node(name, labels=None, taints=None, annotations=None, rv="1020"):
    metadata = {"name": name, "resourceVersion": rv, "uid": "3f0c5d9e-%s" % name, "labels": dict({
        "beta.kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-RTX-A5000"}, **(labels or {}))}
    if annotations is not None:
        metadata["annotations"] = annotations
    spec = {"taints": taints} if taints is not None else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def host(name, facts, node_name=None):
    return {"host": name, "node": node_name or name, "facts": facts}


def plan_one(facts, the_node, settings=None):
    plan = nh.node_health_plan([host(the_node["metadata"]["name"], facts)], [the_node],
                               ON if settings is None else settings)
    return plan["nodes"][0]


def applied(the_node, entry):
    """The Node after the entry's merge patch (RFC 7386), as the API server would store it."""
    def merge(target, patch):
        if not isinstance(patch, dict):
            return patch
        result = dict(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = merge(result.get(key), value)
        return result
    after = merge(copy.deepcopy(the_node), entry["patch"])
    after["metadata"]["resourceVersion"] = str(int(the_node["metadata"]["resourceVersion"]) + 1)
    return after


CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2026-11-23T18:14:16Z"}
OPERATOR_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


# ---- health from the facts

def test_health_of_healthy_unhealthy_and_missing_facts():
    assert nh.node_health(healthy())["status"] == "healthy"
    lost = nh.node_health(fell_off_the_bus())
    assert (lost["status"], lost["codes"]) == ("unhealthy", ["gpu_lost", "xid"])
    assert lost["text"] == "gpu_lost 0000:c1:00.0, xid 0000:c1:00.0"
    assert nh.node_health(gpu_lost())["text"] == "gpu_lost"
    assert nh.node_health(None)["reason"] == nh.NOT_GATHERED
    # Facts of an nvml_facts that reports no health: nothing is derived from them.
    older = without_health(smi_facts(A5000_PAIR_XML))
    unknown = nh.node_health(older)
    assert unknown["status"] == "unknown" and "have no health (NVIDIA state ok" in unknown["reason"]


@pytest.mark.parametrize("health, words", [
    ("sick", "is a str, not a mapping"),
    ({"status": "poorly", "problems": []}, "'poorly', not one of healthy, unhealthy, unknown"),
    ({"status": "unhealthy", "problems": [{"message": "no code"}]}, "not a list of problems with a code"),
])
def test_health_of_another_shape_is_unknown(health, words):
    facts = healthy()
    facts["health"] = health
    answer = nh.node_health(facts)
    assert answer["status"] == "unknown" and words in answer["reason"]


def test_problems_repeated_are_counted():
    lost = {"code": "gpu_lost", "pci_address": None, "gpu_index": None, "message": "4 attached, 1 printed"}
    xid = {"code": "xid", "pci_address": "0000:3b:00.0", "gpu_index": 0, "message": "Xid 79"}
    assert nh.problems_text([lost, lost, lost, xid]) == "3 x gpu_lost, xid 0000:3b:00.0"


def test_problem_text_names_the_gpu_by_address_else_index():
    assert nh.problem_text({"code": "xid", "pci_address": None, "gpu_index": 0}) == "xid GPU 0"
    assert nh.problem_text({"code": "fabric_not_ready", "pci_address": "0000:00:09.0", "gpu_index": 0}) == \
        "fabric_not_ready 0000:00:09.0"
    assert nh.problem_text({"code": "driver", "pci_address": None, "gpu_index": None}) == "driver"


# ---- settings

@pytest.mark.parametrize("values, labels, taint, errors", [
    ({}, True, False, []),
    ({"gpufleet_health_labels": None, "gpufleet_health_taint": None}, True, False, []),
    ({"gpufleet_health_taint": True}, True, True, []),
    # -e gpufleet_health_taint=true gives a string
    ({"gpufleet_health_taint": "true", "gpufleet_health_labels": "no"}, False, True, []),
    ({"gpufleet_health_taint": "maybe"}, True, False, ['gpufleet_health_taint is "maybe", not a boolean']),
    ({"gpufleet_health_labels": [True]}, True, False, ["gpufleet_health_labels is [true], not a boolean"]),
    ({"gpufleet_health_taint": 2}, True, False, ["gpufleet_health_taint is 2, not a boolean"]),
])
def test_settings_are_booleans(values, labels, taint, errors):
    answer = nh.node_health_settings(values)
    assert (answer["labels"], answer["taint"]) == (labels, taint)
    assert [error.split(";")[0] for error in answer["errors"]] == errors


def test_plan_refuses_bad_settings_before_planning_anything():
    with pytest.raises(AnsibleFilterError, match="gpufleet_health_taint is \"yes please\", not a boolean"):
        nh.node_health_plan([host("gpu-a", gpu_lost())], [node("gpu-a")], {"gpufleet_health_taint": "yes please"})


# ---- the plan

def test_unhealthy_node_is_labelled_and_tainted_keeping_every_other_label_and_taint():
    before = node("gpu-a", labels={"team": "ml"}, taints=[CORDON, OPERATOR_TAINT])
    entry = plan_one(fell_off_the_bus(), before)
    patch = entry["patch"]
    # What gpufleet.nvidia.internal.api_patch sends: the Node's name, and a merge patch with the resourceVersion read.
    assert entry["name"] == "gpu-a" and set(patch) == {"metadata", "spec"}
    assert patch["metadata"]["resourceVersion"] == "1020"
    # What the Node has now of the same fields, for --diff.
    assert entry["before"] == {"metadata": {"resourceVersion": "1020",
                                            "labels": {nh.HEALTH_LABEL: None, nh.REASON_LABEL: None},
                                            "annotations": {nh.RECORD_ANNOTATION: None}},
                               "spec": {"taints": [CORDON, OPERATOR_TAINT]}}
    assert patch["metadata"]["labels"] == {nh.HEALTH_LABEL: "unhealthy", nh.REASON_LABEL: "gpu_lost.xid"}
    ours = {"key": nh.TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}
    # The whole list, as read (timeAdded included), with the gating's taint added at the end.
    assert patch["spec"]["taints"] == [CORDON, OPERATOR_TAINT, ours]
    assert json.loads(patch["metadata"]["annotations"][nh.RECORD_ANNOTATION]) == {
        "labels": {nh.HEALTH_LABEL: "unhealthy", nh.REASON_LABEL: "gpu_lost.xid"}, "taints": [ours]}
    assert entry["changes"] == ["label gpufleet.nvidia.com/gpu-health=unhealthy",
                                "label gpufleet.nvidia.com/gpu-health-reason=gpu_lost.xid",
                                "taint gpufleet.nvidia.com/gpu-unhealthy=gpu_lost:NoSchedule"]
    after = applied(before, entry)
    assert after["metadata"]["labels"]["team"] == "ml"
    assert after["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-RTX-A5000"
    # A second run plans nothing.
    again = plan_one(fell_off_the_bus(), after)
    assert again["patch"] is None and again["changes"] == []


def test_a_gpu_nvidia_smi_prints_as_lost_is_gated():
    """The A5000 pair's capture with 'GPU is lost' where the second GPU's values were: the driver still lists it."""
    xml = lost_in_fields(fixture(A5000_PAIR_XML).decode("utf-8"), "00000000:C1:00.0")
    facts = inv.summarise(inv.query_nvidia_smi(lambda argv: (0, xml, "") if argv[1:] == ["-q", "-x"] else (2, "", ""),
                                               "nvidia-smi"), [], driver_installed=True, module_version=None)
    assert nh.node_health(facts)["status"] == "unhealthy"
    entry = plan_one(facts, node("gpu-a"))
    assert entry["patch"]["metadata"]["labels"] == {nh.HEALTH_LABEL: "unhealthy", nh.REASON_LABEL: "gpu_lost"}
    assert entry["patch"]["spec"]["taints"] == [{"key": nh.TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}]
    assert "taint gpufleet.nvidia.com/gpu-unhealthy=gpu_lost:NoSchedule" in entry["changes"]


def test_healthy_node_is_labelled_healthy_and_not_tainted():
    before = node("gpu-b", taints=[CORDON])
    entry = plan_one(healthy(), before)
    assert entry["patch"]["metadata"]["labels"] == {nh.HEALTH_LABEL: "healthy"}
    assert "spec" not in entry["patch"]
    assert plan_one(healthy(), applied(before, entry))["patch"] is None


def test_taint_only_when_asked():
    entry = plan_one(gpu_lost(), node("gpu-a"), LABELS_ONLY)
    assert "spec" not in entry["patch"]
    assert entry["patch"]["metadata"]["labels"][nh.REASON_LABEL] == "gpu_lost"
    assert not any("taint" in change for change in entry["changes"])


def test_healthy_again_removes_exactly_what_the_gating_set():
    before = node("gpu-a", labels={"team": "ml"}, taints=[CORDON, OPERATOR_TAINT])
    sick = applied(before, plan_one(fell_off_the_bus(), before))
    entry = plan_one(healthy(), sick)
    patch = entry["patch"]
    assert patch["metadata"]["resourceVersion"] == sick["metadata"]["resourceVersion"]
    assert patch["metadata"]["labels"] == {nh.HEALTH_LABEL: "healthy", nh.REASON_LABEL: None}
    assert patch["spec"]["taints"] == [CORDON, OPERATOR_TAINT]
    record = json.loads(patch["metadata"]["annotations"][nh.RECORD_ANNOTATION])
    assert record == {"labels": {nh.HEALTH_LABEL: "healthy"}, "taints": []}
    assert entry["changes"] == ["label gpufleet.nvidia.com/gpu-health=healthy (was unhealthy)",
                                "removed label gpufleet.nvidia.com/gpu-health-reason=gpu_lost.xid",
                                "removed taint gpufleet.nvidia.com/gpu-unhealthy=gpu_lost:NoSchedule"]
    well = applied(sick, entry)
    assert well["spec"]["taints"] == [CORDON, OPERATOR_TAINT]
    assert well["metadata"]["labels"]["team"] == "ml"
    # The last taint of a Node going: the list is removed (null), as the API leaves an empty list out.
    lone = node("gpu-c")
    lone_sick = applied(lone, plan_one(gpu_lost(), lone))
    assert [t["key"] for t in lone_sick["spec"]["taints"]] == [nh.TAINT_KEY]
    assert plan_one(healthy(), lone_sick)["patch"]["spec"] == {"taints": None}


def test_turning_the_gating_off_removes_what_it_set_and_then_the_record():
    before = node("gpu-a", taints=[CORDON])
    sick = applied(before, plan_one(gpu_lost(), before))
    entry = plan_one(gpu_lost(), sick, {"gpufleet_health_labels": False, "gpufleet_health_taint": False})
    assert entry["patch"]["metadata"]["labels"] == {nh.HEALTH_LABEL: None, nh.REASON_LABEL: None}
    assert entry["patch"]["metadata"]["annotations"] == {nh.RECORD_ANNOTATION: None}
    assert entry["patch"]["spec"]["taints"] == [CORDON]
    off = applied(sick, entry)
    assert nh.RECORD_ANNOTATION not in off["metadata"]["annotations"]
    assert plan_one(gpu_lost(), off, {"gpufleet_health_labels": False})["patch"] is None


def test_operator_taint_with_the_same_key_is_never_removed():
    theirs = {"key": nh.TAINT_KEY, "value": "burn-in", "effect": "NoSchedule"}
    before = node("gpu-a", taints=[theirs])
    sick = plan_one(gpu_lost(), before)
    # Taints are unique by key and effect: theirs stands, none of the gating's is added, and the plan says so.
    assert sick["patch"]["metadata"]["labels"][nh.HEALTH_LABEL] == "unhealthy"
    assert "spec" not in sick["patch"]
    assert json.loads(sick["patch"]["metadata"]["annotations"][nh.RECORD_ANNOTATION])["taints"] == []
    assert sick["kept"] == ["taint gpufleet.nvidia.com/gpu-unhealthy=burn-in:NoSchedule (not set by the gating: "
                            "left as it is)"]
    assert sick["notes"] == ["not tainted: gpufleet.nvidia.com/gpu-unhealthy=burn-in:NoSchedule is there already, "
                             "set by someone else"]
    well = plan_one(healthy(), applied(before, sick))
    assert "spec" not in well["patch"]
    assert applied(applied(before, sick), well)["spec"]["taints"] == [theirs]


def test_operator_taint_identical_to_the_gatings_is_not_taken_over():
    theirs = {"key": nh.TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}
    before = node("gpu-a", taints=[theirs])
    sick = applied(before, plan_one(gpu_lost(), before))
    assert sick["spec"]["taints"] == [theirs]
    assert json.loads(sick["metadata"]["annotations"][nh.RECORD_ANNOTATION])["taints"] == []
    well = plan_one(healthy(), sick)
    assert "spec" not in well["patch"]


def test_same_key_with_another_effect_is_someone_elses_and_stays_beside_the_gatings():
    theirs = {"key": nh.TAINT_KEY, "value": "drain", "effect": "NoExecute", "timeAdded": "2026-11-23T18:20:00Z"}
    before = node("gpu-a", taints=[theirs])
    entry = plan_one(gpu_lost(), before)
    assert entry["patch"]["spec"]["taints"] == [theirs, {"key": nh.TAINT_KEY, "value": "gpu_lost",
                                                         "effect": "NoSchedule"}]
    well = plan_one(healthy(), applied(before, entry))
    assert well["patch"]["spec"]["taints"] == [theirs]


def test_operator_label_with_the_same_key_is_never_changed_or_removed():
    before = node("gpu-a", labels={nh.HEALTH_LABEL: "retired", "team": "ml"})
    sick = plan_one(gpu_lost(), before)
    assert sick["patch"]["metadata"]["labels"] == {nh.REASON_LABEL: "gpu_lost"}
    assert sick["kept"][0] == "label gpufleet.nvidia.com/gpu-health=retired (not set by the gating: left as it is)"
    after = applied(before, sick)
    well = plan_one(healthy(), after)
    assert well["patch"]["metadata"]["labels"] == {nh.REASON_LABEL: None}
    assert applied(after, well)["metadata"]["labels"][nh.HEALTH_LABEL] == "retired"


def test_a_label_changed_by_hand_after_the_gating_set_it_becomes_the_operators():
    before = node("gpu-a")
    sick = applied(before, plan_one(gpu_lost(), before))
    sick["metadata"]["labels"][nh.REASON_LABEL] = "under-repair"
    well = plan_one(healthy(), sick)
    assert well["patch"]["metadata"]["labels"] == {nh.HEALTH_LABEL: "healthy"}
    assert "theirs now" in well["notes"][0]
    after = applied(sick, well)
    assert after["metadata"]["labels"][nh.REASON_LABEL] == "under-repair"
    assert plan_one(healthy(), after)["patch"] is None


def test_a_taint_changed_by_hand_after_the_gating_set_it_becomes_the_operators():
    before = node("gpu-a")
    sick = applied(before, plan_one(gpu_lost(), before))
    sick["spec"]["taints"][0]["value"] = "rma"
    well = plan_one(healthy(), sick)
    assert "spec" not in well["patch"]
    assert any("was changed by someone else" in note for note in well["notes"])
    assert applied(sick, well)["spec"]["taints"] == [{"key": nh.TAINT_KEY, "value": "rma", "effect": "NoSchedule"}]


def test_a_record_that_is_not_the_gatings_takes_nothing_for_its_own():
    before = node("gpu-a", labels={nh.HEALTH_LABEL: "unhealthy"}, annotations={nh.RECORD_ANNOTATION: "{oops"})
    entry = plan_one(healthy(), before)
    assert "labels" not in entry["patch"]["metadata"]
    assert "is not what the gating writes" in entry["notes"][0]
    # the record is rewritten to say what the gating owns now: nothing
    assert entry["patch"]["metadata"]["annotations"] == {nh.RECORD_ANNOTATION: None}


def test_the_taint_value_follows_the_first_problem():
    before = node("gpu-a")
    lost = applied(before, plan_one(gpu_lost(), before))
    facts = healthy()
    facts["health"] = {"status": "unhealthy", "problems": [
        {"code": "row_remap_pending", "pci_address": "0000:81:00.0", "gpu_index": 0, "message": "pending"}]}
    entry = plan_one(facts, lost)
    assert entry["patch"]["spec"]["taints"] == [{"key": nh.TAINT_KEY, "value": "row_remap_pending",
                                                 "effect": "NoSchedule"}]
    assert "taint gpufleet.nvidia.com/gpu-unhealthy=row_remap_pending:NoSchedule (was " in entry["changes"][-1]


def test_unknown_health_changes_nothing_and_is_named():
    sick = applied(node("gpu-a"), plan_one(gpu_lost(), node("gpu-a")))
    older = without_health(smi_facts(A5000_PAIR_XML))
    plan = nh.node_health_plan([host("gpu-a", None), host("gpu-b", older)], [sick, node("gpu-b")], ON)
    assert plan["patch"] == []
    assert [entry["status"] for entry in plan["nodes"]] == ["unknown", "unknown"]
    assert plan["nodes"][0]["reason"] == nh.NOT_GATHERED
    lines = nh.node_health_table(plan)
    assert lines[1].split()[:3] == ["gpu-a", "gpu-a", "unknown"]
    assert "nothing: health unknown: no NVIDIA facts from this run" in lines[1]


def test_host_without_node_or_sharing_a_node_is_left_alone():
    plan = nh.node_health_plan([host("gpu-a", gpu_lost(), "node-x"), host("gpu-b", gpu_lost()),
                                host("gpu-c", gpu_lost(), "gpu-b")], [node("gpu-b")], ON)
    reasons = [entry["reason"] for entry in plan["nodes"]]
    assert reasons[0] == "left alone: no Node named node-x in the cluster (set gpufleet_node_name)"
    assert reasons[2] == "left alone: host gpu-b names the same node"
    assert [entry["node"] for entry in plan["patch"]] == ["gpu-b"]


def test_only_plans_the_nodes_asked_for():
    plan = nh.node_health_plan([host("gpu-a", gpu_lost()), host("gpu-b", healthy())],
                               [node("gpu-a"), node("gpu-b")], ON, only=["gpu-b"])
    assert [entry["node"] for entry in plan["nodes"]] == ["gpu-b"]


# ---- label values

@pytest.mark.parametrize("codes, value", [
    (["gpu_lost"], "gpu_lost"),
    (["gpu_lost", "xid", "fabric_not_ready"], "gpu_lost.xid.fabric_not_ready"),
    # every code of the contract: cut at a code so that it fits 63 characters
    (["gpu_lost", "xid", "fabric_not_ready", "row_remap_pending", "row_remap_failed", "retired_pages_pending",
      "ecc_uncorrectable", "driver"], "gpu_lost.xid.fabric_not_ready.row_remap_pending"),
    (["x" * 70], "x" * 63),
])
def test_reason_is_a_valid_label_value(codes, value):
    assert nh.reason_value(codes) == value
    assert nh.valid_label_value(value)


def test_codes_from_facts_are_made_valid_label_values():
    facts = healthy()
    facts["health"] = {"status": "unhealthy", "problems": [
        {"code": "Fabric state: not ready!", "pci_address": None, "gpu_index": None, "message": "m"},
        {"code": "___", "pci_address": None, "gpu_index": None, "message": "m"}]}
    entry = plan_one(facts, node("gpu-a"))
    labels = entry["patch"]["metadata"]["labels"]
    assert labels[nh.REASON_LABEL] == "Fabricstatenotready.unknown"
    assert all(nh.valid_label_value(value) for value in labels.values())
    assert nh.valid_label_value(entry["patch"]["spec"]["taints"][0]["value"])


@pytest.mark.parametrize("value, valid", [
    ("healthy", True), ("", True), ("gpu_lost.xid", True), ("-x", False), ("x.", False), ("a b", False),
    ("x" * 64, False), (None, False)])
def test_valid_label_value(value, valid):
    assert nh.valid_label_value(value) is valid


# ---- conflicts and the table

def test_conflicts_and_changes_are_read_from_the_api_patch_result():
    plan = nh.node_health_plan([host("gpu-a", fell_off_the_bus()), host("gpu-b", fell_off_the_bus()),
                                host("gpu-c", healthy())], [node("gpu-a"), node("gpu-b"), node("gpu-c")], ON)
    assert [entry["name"] for entry in plan["patch"]] == ["gpu-a", "gpu-b", "gpu-c"]
    # What gpufleet.nvidia.internal.api_patch returns: gpu-a changed since it was read (409), gpu-b and gpu-c patched.
    result = {"changed": True, "patched": ["gpu-b", "gpu-c"], "conflicts": ["gpu-a"], "failures": [],
              "not_tried": [], "requests": 3}
    assert nh.node_health_conflicts(result, plan) == ["gpu-a"]
    # A name the plan did not patch is not read again.
    assert nh.node_health_conflicts(dict(result, conflicts=["gpu-a", "other"]), plan) == ["gpu-a"]
    done = nh.node_health_applied(result, plan)
    assert sorted(done) == ["gpu-b", "gpu-c"]
    assert done["gpu-b"] == plan["patch"][1]["changes"] and done["gpu-b"]
    # The next attempt plans gpu-a alone and keeps what the first one did.
    again = nh.node_health_plan([host("gpu-a", fell_off_the_bus())], [node("gpu-a", rv="1021")], ON,
                                only=["gpu-a"], earlier=plan)
    retried = {"changed": True, "patched": ["gpu-a"], "conflicts": [], "failures": [], "not_tried": [], "requests": 1}
    assert nh.node_health_conflicts(retried, again) == []
    assert sorted(nh.node_health_applied(retried, again, done)) == ["gpu-a", "gpu-b", "gpu-c"]
    # A patch task skipped (nothing to patch) changed nothing and has no conflicts.
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    assert nh.node_health_applied(skipped, plan, done) == done
    assert nh.node_health_conflicts(skipped, plan) == []


def test_table_says_what_changed_or_would_change():
    plan = nh.node_health_plan([host("gpu-a", fell_off_the_bus()), host("gpu-b", healthy()), host("gpu-c", None)],
                               [node("gpu-a", taints=[{"key": nh.TAINT_KEY, "value": "x", "effect": "NoSchedule"}]),
                                node("gpu-b")], ON)
    done = dict((entry["node"], entry["changes"]) for entry in plan["patch"])
    lines = nh.node_health_table(plan, done, check_mode=True)
    assert lines[0].split() == ["NODE", "HOST", "HEALTH", "PROBLEMS", "WOULD", "CHANGE"]
    assert lines[1].startswith("gpu-a  gpu-a  unhealthy  gpu_lost 0000:c1:00.0, xid 0000:c1:00.0  label ")
    assert lines[2].split()[2:5] == ["healthy", "-", "label"]
    assert lines[3].split()[2] == "unknown"
    assert lines[4] == "gpu-a: kept taint gpufleet.nvidia.com/gpu-unhealthy=x:NoSchedule (not set by the gating: " \
                       "left as it is)"
    assert nh.node_health_table(plan, {})[1].endswith("not patched")


def test_a_retry_plans_the_conflicted_node_again_from_its_new_read_and_keeps_the_others():
    first = nh.node_health_plan([host("gpu-a", gpu_lost()), host("gpu-b", healthy())],
                                [node("gpu-a"), node("gpu-b")], ON)
    # Another controller tainted gpu-a between the read and the patch: its patch got 409, it is read again.
    moved = node("gpu-a", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute",
                                   "timeAdded": "2026-11-23T18:30:00Z"}], rv="1031")
    again = nh.node_health_plan([host("gpu-a", gpu_lost()), host("gpu-b", healthy())], [moved, node("gpu-b")], ON,
                                only=["gpu-a"], earlier=first)
    assert [entry["node"] for entry in again["patch"]] == ["gpu-a"]
    patch = again["patch"][0]["patch"]
    assert patch["metadata"]["resourceVersion"] == "1031"
    # The taint added meanwhile is kept in the list the patch carries.
    assert [t["key"] for t in patch["spec"]["taints"]] == ["node.kubernetes.io/not-ready", nh.TAINT_KEY]
    assert [entry["node"] for entry in again["nodes"]] == ["gpu-a", "gpu-b"]
    assert again["nodes"][1] is first["nodes"][1]
