# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbooks' own expressions, templated by Ansible as the tasks see them, over what the API answers.

No cluster runs here: each case feeds a task's `when`, `until`, `that` or message the variables and registered
results a live run would give (k8s_drain's messages as kubernetes.core 6.6.0 builds them) and checks the decision.
"""

from __future__ import annotations

import os

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
LOADER = DataLoader()


def playbook(name):
    return LOADER.load_from_file(os.path.join(COLLECTION, "playbooks", name), trusted_as_template=True)


def all_tasks(tasks):
    """Every task in order, blocks and rescues flattened."""
    for task in tasks:
        yield task
        for part in ("block", "rescue", "always"):
            yield from all_tasks(task.get(part) or [])


def task(play, name):
    found = [t for t in all_tasks(play["tasks"]) if t.get("name") == name]
    assert len(found) == 1, "no single task named %r in the play" % name
    return found[0]


def templar(play, **variables):
    merged = dict(play.get("vars") or {})
    merged.update(variables)
    return Templar(loader=LOADER, variables=merged)


def conditions(value):
    return value if isinstance(value, list) else [value]


def holds(play, value, **variables):
    engine = templar(play, **variables)
    return all(engine.evaluate_conditional(condition) for condition in conditions(value))


def rendered(play, value, **variables):
    return templar(play, **variables).template(value)


# site.yml

SITE = {play["name"]: play for play in playbook("site.yml")}
CLUSTER = SITE["Cluster - device plugin and smoke test"]


def h100_facts():
    return inv.summarise(inv.query_nvml(readings.RecordedNvml(readings.H100)), [], driver_installed=True,
                         module_version=None)


def test_site_registers_the_facts_run_the_cluster_part_trusts():
    gather = task(SITE["GPU nodes - NVIDIA inventory"], "Gather the NVIDIA inventory")
    assert gather["register"] == "__gpufleet_nvml_run"


def test_site_labels_only_hosts_with_facts_from_this_run_in_state_ok():
    decide = task(CLUSTER, "Decide which GPU nodes get their kubelet's labels")
    hostvars = {
        # In --limit, facts from this run.
        "gpu-a": {"ansible_facts": {"nvidia": h100_facts()}, "__gpufleet_nvml_run": {"changed": False},
                  "gpufleet_node_name": "node-a", "gpu_kubelet_node_labels": {"pool": "training"}},
        # Outside --limit: no facts at all.
        "gpu-b": {},
        # Outside --limit, but a fact cache still holds its facts from an earlier run.
        "gpu-c": {"ansible_facts": {"nvidia": h100_facts()}},
        # In --limit, no working driver.
        "gpu-d": {"ansible_facts": {"nvidia": {"state": "driver_not_loaded", "gpus": [], "message": "no module"}},
                  "__gpufleet_nvml_run": {"changed": False}},
    }
    variables = {"groups": {"gpu_nodes": ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]}, "hostvars": hostvars}
    variables.update(decide["vars"])
    plan = rendered(CLUSTER, decide["ansible.builtin.set_fact"]["__gpufleet_label_plan"], **variables)
    assert [(entry["host"], entry["node"]) for entry in plan["label"]] == [("gpu-a", "node-a")]
    assert plan["label"][0]["labels"]["pool"] == "training"
    assert plan["label"][0]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert [entry["host"] for entry in plan["skip"]] == ["gpu-b", "gpu-c", "gpu-d"]
    assert "outside --limit" in plan["skip"][0]["reason"] and "outside --limit" in plan["skip"][1]["reason"]
    assert plan["skip"][2]["reason"] == "NVIDIA state is driver_not_loaded: no module"

    label = task(CLUSTER, "Label the GPU nodes as their kubelet does")
    assert rendered(CLUSTER, label["loop"], __gpufleet_label_plan=plan) == plan["label"]
    say = task(CLUSTER, "Say which GPU nodes are not labelled, and why")
    lines = rendered(CLUSTER, say["ansible.builtin.debug"]["msg"], __gpufleet_label_plan=plan)
    assert lines[0] == ("gpu-b (node gpu-b): not labelled, no NVIDIA facts from this run (outside --limit, "
                        "unreachable, or gpufleet.nvidia.nvml_facts failed or did not run on it)")
    assert holds(CLUSTER, say["when"], __gpufleet_label_plan=plan)


# upgrade_driver.yml

UPGRADE = playbook("upgrade_driver.yml")[0]
PDB_REFUSED = ("Failed to delete pod shop/web-1 due to: Cannot evict pod as it would violate the pod's "
               "disruption budget.")
NODE = {"gpufleet_node_name": "gpu-a", "inventory_hostname": "gpu-a"}


def uses_the_api(entry):
    return any(key.startswith("kubernetes.core.") for key in entry)


def test_kubernetes_core_is_checked_before_any_api_call():
    names = [t.get("name") for t in all_tasks(UPGRADE["tasks"])]
    check = names.index("Check the controller's kubernetes.core drains without evicting DaemonSet pods")
    first_api_call = next(i for i, t in enumerate(all_tasks(UPGRADE["tasks"])) if uses_the_api(t))
    assert check < first_api_call
    assert task(UPGRADE, names[check]).get("run_once") is True


@pytest.mark.parametrize("version,passes", [
    (None, False), ("6.0.0", False), ("6.4.0", False), ("6.5.0", True), ("6.6.0", True), ("6.10.1", True),
])
def test_kubernetes_core_check(version, passes):
    check = task(UPGRADE, "Check the controller's kubernetes.core drains without evicting DaemonSet pods")
    variables = dict(NODE, __gpufleet_kubernetes_core=version, gpufleet_kube_api_host="localhost")
    assert holds(UPGRADE, check["ansible.builtin.assert"]["that"], **variables) is passes
    if not passes:
        message = rendered(UPGRADE, check["ansible.builtin.assert"]["fail_msg"], **variables)
        assert "6.5.0 or newer" in message and "no node was cordoned" in message
        assert ("kubernetes.core %s" % version if version else "no kubernetes.core at all") in message


def cordon_run(unschedulable, cordon_result):
    """The facts the play sets for a node read with spec.unschedulable, then the cordon task's result."""
    before = {"resources": [{"metadata": {"name": "gpu-a"},
                             "spec": {"unschedulable": True} if unschedulable else {}}]}
    was = rendered(UPGRADE, task(UPGRADE, "Remember whether the node was cordoned before this run")
                   ["ansible.builtin.set_fact"]["gpufleet_upgrade_was_cordoned"],
                   gpufleet_upgrade_before=before)
    cordon = task(UPGRADE, "Cordon the node")
    runs = holds(UPGRADE, cordon["when"], gpufleet_upgrade_was_cordoned=was)
    result = cordon_result if runs else {"changed": False, "skipped": True}
    ours = rendered(UPGRADE, task(UPGRADE, "Remember whether this run cordoned the node")
                    ["ansible.builtin.set_fact"]["gpufleet_upgrade_cordoned"], gpufleet_upgrade_cordon=result)
    return was, runs, ours


@pytest.mark.parametrize("unschedulable,cordon_result,cordons,uncordons", [
    (False, {"changed": True, "result": "node gpu-a marked unschedulable."}, True, True),
    (True, None, False, False),
    # Cordoned by someone else between the read and the cordon: k8s_drain changes nothing, nor do we.
    (False, {"changed": False, "result": "node gpu-a already marked unschedulable."}, True, False),
])
def test_only_a_node_this_run_cordoned_is_uncordoned(unschedulable, cordon_result, cordons, uncordons):
    was, runs, ours = cordon_run(unschedulable, cordon_result)
    assert (was, runs, ours) == (unschedulable, cordons, uncordons)
    uncordon = task(UPGRADE, "Uncordon the node this run cordoned")
    assert uncordon["kubernetes.core.k8s_drain"]["state"] == "uncordon"
    assert holds(UPGRADE, uncordon["when"], gpufleet_upgrade_cordoned=ours) is uncordons
    said = task(UPGRADE, "Say that the node stays cordoned, as it was before this run")
    assert holds(UPGRADE, said["when"], gpufleet_upgrade_cordoned=ours) is not uncordons


@pytest.mark.parametrize("facts,words,hint", [
    ({}, "which was not cordoned:", False),
    ({"gpufleet_upgrade_was_cordoned": True, "gpufleet_upgrade_cordoned": False},
     "which stays cordoned, as it was before this run:", False),
    ({"gpufleet_upgrade_was_cordoned": False, "gpufleet_upgrade_cordoned": True},
     "which is left cordoned (this run cordoned it):", True),
])
def test_stopped_rollout_says_truthfully_whose_cordon_it_is(facts, words, hint):
    stop = task(UPGRADE, "Stop the rollout, leaving the node as it is")
    variables = dict(NODE, ansible_failed_task={"name": "Drain the node"},
                     ansible_failed_result={"msg": PDB_REFUSED}, **facts)
    variables.update(stop.get("vars") or {})
    message = rendered(UPGRADE, stop["ansible.builtin.fail"]["msg"], **variables)
    assert words in message
    assert ("kubectl uncordon gpu-a" in message) is hint
    assert "budget.. " not in message and "budget. Nodes after it were not touched" in message
