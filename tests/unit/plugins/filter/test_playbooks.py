# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbooks' own expressions, templated by Ansible as the tasks see them, over what the API answers.

No cluster runs here: each case feeds a task's `when`, `until`, `that` or message the variables and registered
results a live run would give (k8s_drain's messages as kubernetes.core 6.6.0 builds them) and checks the decision.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings
from ansible_collections.gpufleet.nvidia.tests.unit.templating import DataLoader, Templar, evaluate_conditional, load_yaml, trust_as_template

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
LOADER = DataLoader()


def playbook(name):
    return load_yaml(LOADER, os.path.join(COLLECTION, "playbooks", name))


def all_tasks(tasks, base=os.path.join(COLLECTION, "playbooks")):
    """Every task in order, blocks and rescues flattened, the task files a play imports read in (a task file's own
    imports relative to it)."""
    for task in tasks:
        yield task
        for part in ("block", "rescue", "always"):
            yield from all_tasks(task.get(part) or [], base)
        imported = task.get("ansible.builtin.import_tasks")
        if imported:
            path = os.path.join(base, imported)
            yield from all_tasks(load_yaml(LOADER, path) or [], os.path.dirname(path))


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
    return all(evaluate_conditional(engine, condition) for condition in conditions(value))


def rendered(play, value, **variables):
    return templar(play, **variables).template(value)


def trusted(text):
    """A template written here, trusted as one read from a playbook is (ansible-core 2.19 and later template
    only those)."""
    try:
        from ansible.template import trust_as_template
    except ImportError:  # ansible-core 2.16 to 2.18 template every string
        return text
    return trust_as_template(text)


# site.yml

# A play is named by its name up to any templated part (site.yml's first carries the collection's version).
SITE = {play["name"].split(" (")[0]: play for play in playbook("site.yml")}
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
    assert rendered(CLUSTER, label["gpufleet.nvidia.internal.api_patch"]["patches"], __gpufleet_label_plan=plan) == plan["label"]
    assert plan["label"][0]["name"] == "node-a"
    assert plan["label"][0]["patch"] == {"metadata": {"labels": plan["label"][0]["labels"]}}
    # With the Nodes read, a converged Node gets no patch, and a host whose Node is gone is named.
    nodes = [{"metadata": {"name": "node-a", "labels": plan["label"][0]["labels"]}}]
    again = rendered(CLUSTER, decide["ansible.builtin.set_fact"]["__gpufleet_label_plan"],
                     __gpufleet_label_nodes={"resources": nodes}, **variables)
    assert again["label"] == [] and again["same"] == [{"host": "gpu-a", "node": "node-a"}]
    gone = rendered(CLUSTER, decide["ansible.builtin.set_fact"]["__gpufleet_label_plan"],
                    __gpufleet_label_nodes={"resources": []}, **variables)
    assert gone["label"] == [] and "not in the cluster (no Node named node-a)" in gone["skip"][0]["reason"]
    say = task(CLUSTER, "Say which GPU nodes are not labelled, and why")
    lines = rendered(CLUSTER, say["ansible.builtin.debug"]["msg"], __gpufleet_label_plan=plan)
    assert lines[0] == ("gpu-b (node gpu-b): not labelled, no NVIDIA facts from this run (outside --limit, "
                        "unreachable, or gpufleet.nvidia.nvml_facts failed or did not run on it)")
    assert holds(CLUSTER, say["when"], __gpufleet_label_plan=plan)


@pytest.mark.parametrize("settings, passed", [
    ({}, "accept"),
    ({"gpu-a": "ignore", "gpu-b": "ignore"}, "ignore"),
    ({"gpu-a": "ignore"}, "accept"),
    ({"gpu-a": "accept", "gpu-b": "keep"}, "accept"),
])
def test_site_tells_the_device_plugin_how_the_toolkit_left_the_runtime(settings, passed):
    deploy = task(CLUSTER, "Deploy the device plugin")
    hostvars = {host: ({"gpu_container_toolkit_visible_devices_envvar": settings[host]} if host in settings else {})
                for host in ("gpu-a", "gpu-b")}
    value = deploy["vars"]["gpu_device_plugin_runtime_visible_devices_envvar"]
    assert rendered(CLUSTER, value, groups={"gpu_nodes": ["gpu-a", "gpu-b"]}, hostvars=hostvars) == passed


def test_site_keeps_the_cluster_results_for_the_report_also_when_the_part_fails():
    part = task(CLUSTER, "Deploy the device plugin and test every GPU node, keeping the results")
    # The DRA driver first (its labels keep the device plugin off the DRA nodes); a failed DRA check is kept too.
    assert [t["name"] for t in part["block"]] == ["Deploy NVIDIA's DRA driver on the DRA nodes", "Deploy the device plugin",
                                                  "Run nvidia-smi on every GPU node"]
    keep = task(CLUSTER, "Keep each GPU host's device plugin check and smoke verdict for the fleet report")
    assert keep in part["always"]
    assert sorted(keep["tags"]) == ["device_plugin", "dra", "smoke_test"]
    # In the cluster by default, where report.yml reads it from any folder or AWX job; in a file when one is named.
    path = CLUSTER["vars"]["__gpufleet_cluster_results"]
    assert rendered(CLUSTER, path, gpufleet_report_dir="/srv/reports") == ""
    assert rendered(CLUSTER, path, gpufleet_cluster_results="/tmp/r.json") == "/tmp/r.json"
    in_cluster = task(CLUSTER, "Keep them in the cluster, in ConfigMap {{ __gpufleet_results_where }}")
    in_file = task(CLUSTER, "Keep them in a file on the controller")
    assert keep["block"] == [in_cluster, in_file]
    assert holds(CLUSTER, in_cluster["when"], __gpufleet_cluster_results="")
    assert not holds(CLUSTER, in_file["when"], __gpufleet_cluster_results="")
    assert holds(CLUSTER, in_file["when"], __gpufleet_cluster_results="/tmp/r.json")
    assert (in_file["delegate_to"], in_file["run_once"], in_cluster["run_once"]) == ("localhost", True, True)
    store = in_cluster["gpufleet.nvidia.internal.cluster_results_store"]
    label = task(CLUSTER, "Label the GPU nodes as their kubelet does")["gpufleet.nvidia.internal.api_patch"]
    assert (store["kubeconfig"], store["context"]) == (label["kubeconfig"], label["context"])
    assert (rendered(CLUSTER, store["namespace"]), rendered(CLUSTER, store["name"])) == (
        "kube-system", "gpufleet-cluster-results")
    assert rendered(CLUSTER, store["namespace"], gpufleet_results_namespace="gpu-ops") == "gpu-ops"
    assert rendered(CLUSTER, in_cluster["vars"]["__gpufleet_results_where"],
                    gpufleet_results_configmap="fleet") == "kube-system/fleet"
    rows = [{"host": "gpu-a", "node": "node-a", "ok": True, "tested": True, "verdict": "passed nvidia-smi",
             "detail": ["nvidia-smi: saw GPU-1"]}]
    assert holds(CLUSTER, keep["when"], gpu_smoke_test_report=rows)
    assert not holds(CLUSTER, keep["when"])
    # Check mode: the device plugin keeps no rows, the smoke test rows without a verdict.
    not_run = [dict(rows[0], ok=None, verdict="not run", detail=[])]
    assert not holds(CLUSTER, keep["when"], gpu_smoke_test_report=not_run)
    assert holds(CLUSTER, keep["when"], gpu_device_plugin_report=[{"host": "gpu-a"}])
    assert holds(CLUSTER, keep["when"], gpu_dra_driver_report=[{"host": "dra-a"}])
    assert not holds(CLUSTER, keep["when"], gpu_dra_driver_report=[{"host": "dra-a", "excluded": "outside --limit"}])
    write = task(CLUSTER, "Write the results file")
    content = rendered(CLUSTER, write["ansible.builtin.copy"]["content"], __gpufleet_cluster_results="/nonexistent/r.json",
                       gpu_smoke_test_report=rows)
    written = json.loads(content)
    assert written["hosts"]["gpu-a"]["smoke_test"]["verdict"] == "passed nvidia-smi"
    assert written["hosts"]["gpu-a"]["smoke_test"]["time"].endswith("Z")


# health gating: site.yml's cluster part and health.yml share tasks/node_health.yml

HEALTH = {play["name"]: play for play in playbook("health.yml")}
HEALTH_TASKS = {"tasks": playbook(os.path.join("tasks", "node_health.yml"))}
HEALTH_PATCH = {"tasks": playbook(os.path.join("tasks", "node_health_patch.yml"))}


def health_facts(status, *codes):
    facts = h100_facts()
    facts["health"] = {"status": status, "problems": [
        {"code": code, "pci_address": facts["gpus"][0]["pci_address"], "gpu_index": 0, "message": code}
        for code in codes]}
    return facts


def test_site_gates_health_after_the_labels_and_before_the_device_plugin():
    names = [t.get("name") for t in CLUSTER["tasks"]]
    gate = names.index("Gate the GPU nodes by their health")
    assert names.index("Label the GPU nodes as their kubelet does") < gate
    assert gate < names.index("Deploy the device plugin and test every GPU node, keeping the results")
    entry = CLUSTER["tasks"][gate]
    assert (entry["ansible.builtin.import_tasks"], entry["tags"]) == ("tasks/node_health.yml", ["health"])
    gating = task(HEALTH["Cluster - label and taint the GPU nodes by their health"], "Gate the GPU nodes by their health")
    assert gating["ansible.builtin.import_tasks"] == "tasks/node_health.yml"
    assert HEALTH["Cluster - label and taint the GPU nodes by their health"]["hosts"] == CLUSTER["hosts"]


@pytest.mark.parametrize("facts_play", [SITE["GPU nodes - NVIDIA inventory"],
                                        HEALTH["GPU nodes - NVIDIA inventory for health gating"]])
def test_settings_are_checked_before_the_facts_and_any_change(facts_play):
    names = [t["name"] for t in facts_play["tasks"]]
    # site.yml checks the roles' boolean settings first (test_booleans.py), and where its cluster part keeps its
    # results once it knows the API host (whose variables say it).
    assert names in (["Check the health gating settings before any change", "Gather the NVIDIA inventory",
                      "Choose the host the cluster part runs on"],
                     ["Check the roles' boolean settings before any change",
                      "Check the health gating settings before any change", "Choose the host the cluster part runs on",
                      "Check where the cluster part keeps its results before any change", "Gather the NVIDIA inventory"])
    check = task(facts_play, "Check the health gating settings before any change")
    assert check["run_once"] is True
    assert task(facts_play, "Gather the NVIDIA inventory")["register"] == "__gpufleet_nvml_run"
    variables = dict(check["vars"], gpufleet_health_taint="maybe")
    assert not holds(facts_play, check["ansible.builtin.assert"]["that"], **variables)
    assert rendered(facts_play, check["ansible.builtin.assert"]["fail_msg"], **variables).endswith(
        'gpufleet_health_taint is "maybe", not a boolean; give true or false')
    assert holds(facts_play, check["ansible.builtin.assert"]["that"], **dict(check["vars"], gpufleet_health_taint=True))
    assert holds(facts_play, check["ansible.builtin.assert"]["that"], **check["vars"])


def test_health_gating_takes_only_facts_from_this_run():
    take = task(HEALTH_TASKS, "Take each GPU host's NVIDIA facts from this run")["ansible.builtin.set_fact"]
    sick = health_facts("unhealthy", "xid")
    hostvars = {
        "gpu-a": {"__gpufleet_nvml_run": {"changed": False, "ansible_facts": {"nvidia": sick}},
                  "ansible_facts": {"nvidia": sick}, "gpufleet_node_name": "node-a"},
        # a fact cache keeps facts of a host this run did not reach
        "gpu-b": {"ansible_facts": {"nvidia": sick}},
        # nvml_facts failed on it this run: what the cache holds does not count
        "gpu-c": {"__gpufleet_nvml_run": {"failed": True, "msg": "nvidia-smi failed"}, "ansible_facts": {"nvidia": sick}},
    }
    rows = rendered(HEALTH_TASKS, take["__gpufleet_health_hosts"], groups={"gpu_nodes": list(hostvars)},
                    hostvars=hostvars)
    assert [(row["host"], row["node"], row["facts"] is not None) for row in rows] == [
        ("gpu-a", "node-a", True), ("gpu-b", "gpu-b", False), ("gpu-c", "gpu-c", False)]
    settings = rendered(HEALTH_TASKS, take["__gpufleet_health_settings"], gpufleet_health_taint=True)
    assert settings == {"gpufleet_health_labels": None, "gpufleet_health_taint": True}


def test_the_patches_go_through_api_patch_and_a_conflict_is_read_again():
    patch = task(HEALTH_PATCH, "Patch the Nodes whose health labels or taint change")
    module = patch["gpufleet.nvidia.internal.api_patch"]
    # One module run for every Node that changes; none when nothing does. api_patch fails by itself on any refusal
    # but 409, which it returns apart.
    assert module["resource"] == "nodes" and "failed_when" not in patch
    plan = {"nodes": [], "patch": [{"node": "gpu-a", "name": "gpu-a", "changes": ["label x"], "patch": {},
                                    "before": {}},
                                   {"node": "gpu-b", "name": "gpu-b", "changes": ["label y"], "patch": {},
                                    "before": {}}]}
    assert rendered(HEALTH_PATCH, module["patches"], __gpufleet_health_plan=plan) == plan["patch"]
    assert holds(HEALTH_PATCH, patch["when"], __gpufleet_health_plan=plan)
    assert not holds(HEALTH_PATCH, patch["when"], __gpufleet_health_plan={"nodes": [], "patch": []})
    keep = task(HEALTH_PATCH, "Keep what changed, and which Nodes changed meanwhile")["ansible.builtin.set_fact"]
    answer = {"changed": True, "patched": ["gpu-b"], "conflicts": ["gpu-a"], "failures": [], "not_tried": [],
              "requests": 2}
    variables = {"__gpufleet_health_patched": answer, "__gpufleet_health_plan": plan, "__gpufleet_health_applied": {}}
    assert rendered(HEALTH_PATCH, keep["__gpufleet_health_only"], **variables) == ["gpu-a"]
    assert rendered(HEALTH_PATCH, keep["__gpufleet_health_applied"], **variables) == {"gpu-b": ["label y"]}


def test_retries_stop_after_five_attempts_naming_the_nodes():
    stop = task(HEALTH_PATCH, "Stop when Nodes kept changing")
    again = task(HEALTH_PATCH, "Read again the Nodes that changed meanwhile")
    for attempt, stops in ((1, False), (4, False), (5, True)):
        variables = {"__gpufleet_health_only": ["gpu-a"], "__gpufleet_health_attempt": attempt}
        assert holds(HEALTH_PATCH, stop["when"], **variables) is stops
        assert holds(HEALTH_PATCH, again["when"], **variables)
    assert not holds(HEALTH_PATCH, again["when"], __gpufleet_health_only=[])
    message = rendered(HEALTH_PATCH, stop["ansible.builtin.fail"]["msg"], __gpufleet_health_only=["gpu-a"],
                       __gpufleet_health_attempt=5)
    assert message.startswith("gpu-a changed between every read and patch (5 attempts, 409 Conflict each time)")
    assert again["block"][-1]["ansible.builtin.include_tasks"]["file"] == "node_health_patch.yml"


# report.yml

REPORT = {play["name"]: play for play in playbook("report.yml")}
REPORT_PLAY = REPORT["Fleet report of the GPU nodes"]
REPORT_READ = task(REPORT_PLAY, "Read the cluster from the API host")
REPORT_WRITE = task(REPORT_PLAY, "Write the fleet report on the controller")


def report_rendered(value, **variables):
    """A value of the write block, with the play's and the block's variables."""
    play = dict(REPORT_PLAY, vars=dict(REPORT_PLAY["vars"], **REPORT_WRITE["vars"]))
    return rendered(play, value, **variables)


def test_report_reads_the_nodes_where_site_yml_labels_them():
    read = task(REPORT_PLAY, "Read the Nodes")
    label = task(CLUSTER, "Label the GPU nodes as their kubelet does")["gpufleet.nvidia.internal.api_patch"]
    # omit without an API host: delegate_to is worked out before when, and an empty one fails the task.
    assert REPORT_READ["delegate_to"] == "{{ __gpufleet_report_api | default(omit, true) }}"
    assert REPORT_READ["run_once"] is True
    assert read["ignore_errors"] is True
    # The API host's own variables, as site.yml's cluster part reads them there (group_vars of the control plane).
    api_vars = {"gpu_device_plugin_kubeconfig": "", "gpufleet_kubeconfig": "/etc/kubernetes/admin.conf",
                "gpufleet_kube_context": "fleet"}
    variables = {"hostvars": {"localhost": {"gpufleet_api_host": "cp-1"}, "cp-1": api_vars, "gpu-a": {}},
                 "inventory_hostname": "gpu-a"}
    assert rendered(REPORT_PLAY, read["kubernetes.core.k8s_info"]["kubeconfig"], **variables) == \
        rendered(CLUSTER, label["kubeconfig"], **api_vars) == "/etc/kubernetes/admin.conf"
    assert rendered(REPORT_PLAY, read["kubernetes.core.k8s_info"]["context"], **variables) == "fleet"
    # Not on the API host but given to the play (-e, or the vars of a playbook that imports report.yml), as
    # site.yml's cluster part sees them there.
    variables["hostvars"]["cp-1"] = {}
    assert rendered(REPORT_PLAY, read["kubernetes.core.k8s_info"]["kubeconfig"], gpufleet_kubeconfig="/srv/kc",
                    **variables) == "/srv/kc"
    assert holds(REPORT_PLAY, REPORT_READ["when"], **variables)
    assert not holds(REPORT_PLAY, REPORT_READ["when"], hostvars={"localhost": {"gpufleet_api_host": ""}})


def test_report_reads_the_results_where_site_yml_keeps_them():
    results = task(REPORT_PLAY, "Read the results site.yml kept in the cluster")
    store = task(CLUSTER, "Keep them in the cluster, in ConfigMap {{ __gpufleet_results_where }}")
    k8s = results["kubernetes.core.k8s_info"]
    api_vars = {"gpufleet_results_namespace": "gpu-ops"}
    variables = {"hostvars": {"localhost": {"gpufleet_api_host": "cp-1"}, "cp-1": api_vars}}
    for report_value, site_value in ((k8s["namespace"], store["gpufleet.nvidia.internal.cluster_results_store"]["namespace"]),
                                     (k8s["name"], store["gpufleet.nvidia.internal.cluster_results_store"]["name"])):
        assert rendered(REPORT_PLAY, report_value, **variables) == rendered(CLUSTER, site_value, **api_vars)
    assert holds(REPORT_PLAY, results["when"], **variables)
    assert rendered(REPORT_PLAY, trusted("{{ __gpufleet_results_where }}"), **variables) == \
        "ConfigMap gpu-ops/gpufleet-cluster-results"
    # A file named on the API host (or with -e): read on the controller instead.
    variables["hostvars"]["cp-1"] = {"gpufleet_cluster_results": "/srv/results.json"}
    assert not holds(REPORT_PLAY, results["when"], **variables)
    assert rendered(REPORT_PLAY, trusted("{{ __gpufleet_results_where }}"), **variables) == "/srv/results.json"
    assert rendered(REPORT_PLAY, trusted("{{ __gpufleet_results_where }}"), gpufleet_cluster_results="/tmp/r.json",
                    hostvars={"localhost": {}}) == "/tmp/r.json"


def test_report_under_limit_writes_from_the_play_of_the_nodes():
    # No play of its own on localhost for the files (a --limit of GPU hosts would leave it out): the write is
    # delegated there once from the nodes' play, and the cluster read from the API host the same way.
    plays = playbook("report.yml")
    assert [play["hosts"] for play in plays] == ["localhost", "{{ gpufleet_hosts | default('gpu_nodes') }}"]
    assert [t["name"] for t in plays[0]["tasks"]] == ["Check that the host pattern matches hosts of the inventory"]
    assert (REPORT_WRITE["delegate_to"], REPORT_WRITE["run_once"]) == ("localhost", True)
    assert REPORT_PLAY["ignore_unreachable"] is True
    assert any(t.get("ansible.builtin.import_tasks") == "tasks/api_host.yml" for t in REPORT_PLAY["tasks"])
    assert REPORT_WRITE["vars"]["ansible_become"] is False
    # The hosts reported are the play's: --limit narrows them.
    assert report_rendered(trusted("{{ __gpufleet_report_hosts_found }}"), ansible_play_hosts_all=["gpu-a"]) == ["gpu-a"]
    pattern = plays[0]["tasks"][0]["ansible.builtin.assert"]["that"][0]
    assert "inventory_hostnames" in pattern


def test_report_joins_facts_nodes_and_recorded_results(tmp_path):
    results = tmp_path / "cluster-results.json"
    results.write_text(json.dumps({"format": 1, "written_by": "gpufleet.nvidia.site", "hosts": {"gpu-a.example": {
        "node": "node-a", "smoke_test": {"node": "node-a", "ok": True, "tested": True, "verdict": "passed nvidia-smi",
                                         "detail": ["nvidia-smi: saw GPU-1"], "time": "2026-11-23T15:57:34Z"}}}}))
    compute = task({"tasks": REPORT_WRITE["block"]}, "Compute the report")
    nodes = {"changed": False, "resources": [
        {"metadata": {"name": "node-a"}, "spec": {},
         "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "1"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}]}
    hostvars = {
        "gpu-a.example": {"gpufleet_node_name": "node-a", "ansible_facts": {"nvidia": h100_facts()},
                          "__gpufleet_report_nvml": {"changed": False, "ansible_facts": {"nvidia": h100_facts()}}},
        "cp-01": {"gpufleet_cluster_results": str(results)},
        "localhost": {"gpufleet_api_host": "cp-01"},
    }
    variables = {"hostvars": hostvars, "ansible_play_hosts_all": ["gpu-a.example"], "__gpufleet_report_k8s_nodes": nodes,
                 "gpufleet_report_dir": str(tmp_path), "playbook_dir": os.path.join(COLLECTION, "playbooks"),
                 "inventory_hostname": "gpu-a.example", "ansible_version": {"full": "2.21.5"},
                 "__gpufleet_report_time": "2026-12-07T18:00:00Z"}
    value = compute["ansible.builtin.set_fact"]["gpufleet_report"]
    report = report_rendered(value, **variables)
    row = report["rows"][0]["cluster"]
    assert (row["node"], row["advertises"], row["smoke"], row["smoke_time"]) == (
        "node-a", "nvidia.com/gpu: 1", "passed nvidia-smi", "2026-11-23 15:57 UTC")
    # The same results kept in the cluster's ConfigMap, as k8s_info answers for it.
    hostvars["cp-01"] = {}
    configmap = {"kind": "ConfigMap", "metadata": {"name": "gpufleet-cluster-results"},
                 "data": {"results.json": results.read_text()}}
    report = report_rendered(value, __gpufleet_report_results={"changed": False, "resources": [configmap]}, **variables)
    assert report["rows"][0]["cluster"]["smoke"] == "passed nvidia-smi"
    assert report["summary"]["cluster"]["results_file"] == "ConfigMap kube-system/gpufleet-cluster-results"
    # None kept there yet: no verdict recorded, and no problem.
    report = report_rendered(value, __gpufleet_report_results={"changed": False, "resources": []}, **variables)
    assert report["rows"][0]["cluster"]["smoke"] == "no verdict recorded"
    # No API host in the inventory: the rows say so.
    hostvars["localhost"] = {}
    report = report_rendered(value, **variables)
    assert (report["summary"]["cluster"]["state"], report["rows"][0]["cluster"]["smoke"]) == ("none", "no verdict recorded")


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


NODE_PLAY = SITE["GPU nodes - driver, container toolkit and kubelet"]


@pytest.mark.parametrize("variables,host,asks", [
    ({"hostvars": {"localhost": {"gpufleet_api_host": "cp-1"}}}, "cp-1", True),
    # No API host chosen (the facts play did not run): the cluster cannot be asked.
    ({"hostvars": {"localhost": {}}}, "", False),
    # --tags node needs no cluster; --skip-tags cluster leaves it out.
    ({"hostvars": {"localhost": {"gpufleet_api_host": "cp-1"}}, "ansible_run_tags": ["node"]}, "cp-1", False),
    ({"hostvars": {"localhost": {"gpufleet_api_host": "cp-1"}}, "ansible_skip_tags": ["cluster"]}, "cp-1", False),
    ({"hostvars": {"localhost": {"gpufleet_api_host": "cp-1"}}, "ansible_run_tags": ["driver"]}, "cp-1", True),
])
def test_site_asks_the_cluster_which_nodes_serve_unless_told_not_to(variables, host, asks):
    given = dict({"ansible_run_tags": ["all"], "ansible_skip_tags": []}, **variables)
    assert rendered(NODE_PLAY, NODE_PLAY["vars"]["__gpufleet_api_host"], **given) == host
    block = task(NODE_PLAY, "Read which GPU nodes serve in the cluster")
    given["__gpufleet_api_host"] = host
    assert holds(NODE_PLAY, block["when"], **dict(given, **block["vars"])) is asks


@pytest.mark.parametrize("states,state,reason", [
    (None, "unknown", ""),
    ({}, "unknown", ""),
    ({"gpu-a": {"state": "serving", "reason": "its Node gpu-a is schedulable (not cordoned)"}},
     "serving", "its Node gpu-a is schedulable (not cordoned)"),
    ({"gpu-b": {"state": "drained", "reason": "x"}}, "unknown", ""),
])
def test_site_hands_gpu_driver_what_the_cluster_said_of_the_node(states, state, reason):
    include = task(NODE_PLAY, "Install and pin the NVIDIA driver")
    given = {"inventory_hostname": "gpu-a"}
    if states is not None:
        given["__gpufleet_node_states"] = states
    given.update(include["vars"])
    assert rendered(NODE_PLAY, include["vars"]["gpu_driver_node_state"], **given) == state
    assert rendered(NODE_PLAY, include["vars"]["gpu_driver_node_state_reason"], **given) == reason


def cordon_run(unschedulable, cordon_result, marker=None):
    """The facts the play sets for a node read with spec.unschedulable (and the collection's cordon marker), then
    the cordon task's result."""
    metadata = {"name": "gpu-a"}
    if marker:
        metadata["annotations"] = {"gpufleet.nvidia.com/cordoned-by": json.dumps(marker)}
    before = {"resources": [{"metadata": metadata, "spec": {"unschedulable": True} if unschedulable else {}}]}
    remember = task(UPGRADE, "Remember whether the node was cordoned before this run")
    facts = dict((name, rendered(UPGRADE, value, gpufleet_upgrade_before=before, gpufleet_rolling_playbook="upgrade_driver",
                                 **remember["vars"]))
                 for name, value in remember["ansible.builtin.set_fact"].items())
    cordon = task(UPGRADE, "Cordon the node")
    runs = holds(UPGRADE, cordon["when"], **facts)
    result = cordon_result if runs else {"changed": False, "skipped": True}
    ours = rendered(UPGRADE, task(UPGRADE, "Remember whether this run cordoned the node")
                    ["ansible.builtin.set_fact"]["gpufleet_upgrade_cordoned"], gpufleet_upgrade_cordon=result, **facts)
    return facts["gpufleet_upgrade_was_cordoned"], runs, ours


@pytest.mark.parametrize("unschedulable,marker,cordon_result,was,cordons,uncordons", [
    (False, None, {"changed": True}, False, True, True),
    (True, None, None, True, False, False),
    # Cordoned by an earlier run of this playbook that stopped: this run's to finish and uncordon.
    (True, {"playbook": "upgrade_driver", "reason": "The driver is changed"}, None, False, False, True),
    # Cordoned by another of the collection's playbooks: its cordon stays.
    (True, {"playbook": "mig", "reason": "The MIG layout is changed"}, None, True, False, False),
    # A mark left on a node uncordoned by hand: cordoned again, and uncordoned.
    (False, {"playbook": "upgrade_driver"}, {"changed": True}, False, True, True),
])
def test_only_a_node_this_run_cordoned_is_uncordoned(unschedulable, marker, cordon_result, was, cordons, uncordons):
    assert cordon_run(unschedulable, cordon_result, marker) == (was, cordons, uncordons)
    cordon = task(UPGRADE, "Cordon the node")["kubernetes.core.k8s"]
    # One write: the cordon and the collection's mark, naming the playbook and why.
    assert (cordon["state"], cordon["merge_type"], cordon["definition"]["spec"]) == ("patched", "merge", {"unschedulable": True})
    mark = json.loads(rendered(UPGRADE, cordon["definition"]["metadata"]["annotations"]["gpufleet.nvidia.com/cordoned-by"],
                               gpufleet_rolling_playbook="upgrade_driver", gpufleet_rolling_change="The driver"))
    assert (mark["playbook"], mark["reason"]) == ("upgrade_driver", "The driver is changed")
    uncordon = task(UPGRADE, "Uncordon the node this run cordoned")
    patch = uncordon["kubernetes.core.k8s"]
    # The uncordon takes the collection's mark off in the same write, and no other annotation.
    assert (patch["state"], patch["merge_type"], patch["definition"]["spec"]) == ("patched", "merge", {"unschedulable": False})
    assert rendered(UPGRADE, patch["definition"]["metadata"]["annotations"]) == {"gpufleet.nvidia.com/cordoned-by": None}
    # A Node deleted since it was Ready: state patched only warns, and the uncordon fails as k8s_drain's did.
    gone = {"changed": False, "warnings": ["resource 'kind=Node,name=gpu-a' was not found but will not be created as "
                                           "'state' parameter has been set to 'patched'"]}
    assert holds(UPGRADE, uncordon["failed_when"], gpufleet_upgrade_uncordon=gone)
    assert not holds(UPGRADE, uncordon["failed_when"], gpufleet_upgrade_uncordon={"changed": True, "result": {}})
    assert holds(UPGRADE, uncordon["failed_when"], gpufleet_upgrade_uncordon={"failed": True, "msg": "Forbidden"})
    ours = cordon_run(unschedulable, cordon_result, marker)[2]
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


def test_a_stopped_move_says_the_next_run_finishes_it():
    stop = task(PATH_MOVE, "Stop the rollout, leaving the node as it is")
    variables = dict(NODE, ansible_failed_task={"name": "Drain the node"}, ansible_failed_result={"msg": PDB_REFUSED},
                     gpufleet_upgrade_was_cordoned=False, gpufleet_upgrade_cordoned=True)
    variables.update(stop.get("vars") or {})
    variables.update(gpufleet_rolling_resumes=True)
    message = " ".join(rendered(PATH_MOVE, stop["ansible.builtin.fail"]["msg"], **variables).split())
    # The annotation lets the next run uncordon the node it cordoned: no uncordon by hand, which would let work in.
    assert "kubectl uncordon" not in message
    assert message.endswith("Fix the node and run the playbook again: it finishes the move, uncordon included.")
    rescue = [t for t in PATH_MOVE["tasks"] if "rescue" in t][0]["rescue"][0]
    assert rescue["vars"]["gpufleet_rolling_resumes"] is True
    # A resumed move that fails in the drain: the cordon is the move's (the annotation's), not "as it was before".
    resumed = dict(variables)
    resumed.update({"gpufleet_upgrade_was_cordoned": True, "gpufleet_upgrade_cordoned": False, "gpufleet_path_cordons": True})
    resumed["gpufleet_rolling_cordoned"] = rendered(PATH_MOVE, rescue["vars"]["gpufleet_rolling_cordoned"], **resumed)
    message = " ".join(rendered(PATH_MOVE, stop["ansible.builtin.fail"]["msg"], **resumed).split())
    assert "which is left cordoned (this run cordoned it)" in message


def test_stopped_rollout_without_a_module_message_says_how_many_attempts():
    stop = task(UPGRADE, "Stop the rollout, leaving the node as it is")
    variables = dict(NODE, ansible_failed_task={"name": "Wait for the device plugin to advertise the node's GPUs again"},
                     ansible_failed_result={"failed": True, "attempts": 121, "resources": []},
                     gpufleet_upgrade_cordoned=True)
    variables.update(stop.get("vars") or {})
    message = " ".join(rendered(UPGRADE, stop["ansible.builtin.fail"]["msg"], **variables).split())
    assert 'task "Wait for the device plugin to advertise the node\'s GPUs again" failed after 121 attempts. ' in message


def drain_until(result, seconds_left, window=600):
    drain = task(UPGRADE, "Drain the node")
    return holds(UPGRADE, drain["until"], gpufleet_upgrade_drain=result,
                 gpufleet_upgrade_drain_deadline=int(time.time()) + seconds_left, gpufleet_drain_timeout=window)


@pytest.mark.parametrize("result,seconds_left,stops", [
    ({"failed": True, "msg": PDB_REFUSED}, 300, False),
    ({"failed": True, "msg": "Failed to delete pod shop/web-1 due to: 429 Reason: Too Many Requests"}, 300, False),
    ({"failed": True, "msg": PDB_REFUSED}, -1, True),
    ({"failed": True, "msg": "Failed to delete pod shop/web-1 due to: pods \"web-1\" is forbidden"}, 300, True),
    ({"failed": True, "msg": "Node gpu-a not found."}, 300, True),
    ({"changed": True, "result": "node gpu-a already marked unschedulable. 2 Pod(s) deleted from node."}, 300, True),
])
def test_drain_retries_what_a_budget_refuses_until_the_deadline_only(result, seconds_left, stops):
    assert drain_until(result, seconds_left) is stops


@pytest.mark.parametrize("variables,window", [
    ({}, 600),
    ({"gpufleet_drain_timeout": 120}, 120),
    ({"gpufleet_drain_timeout": "900"}, 900),
    # Deprecated: still as patient as its 30 s apart retries were.
    ({"gpufleet_drain_retries": 3}, 600),
    ({"gpufleet_drain_timeout": 60, "gpufleet_drain_retries": 3}, 90),
])
def test_drain_tries_for_the_whole_timeout(variables, window):
    drain = task(UPGRADE, "Drain the node")
    assert int(rendered(UPGRADE, trust_as_template("{{ gpufleet_upgrade_drain_window }}"), **variables)) == window
    retries = int(rendered(UPGRADE, drain["retries"], **variables))
    assert drain["delay"] == 5
    assert retries * drain["delay"] >= window
    assert "ignore_errors" in drain and "register" in drain


def left_pods():
    return [
        {"metadata": {"namespace": "shop", "name": "web-1", "labels": {"app": "web"},
                      "ownerReferences": [{"kind": "ReplicaSet"}]}, "status": {"phase": "Running"}},
        {"metadata": {"namespace": "nvidia-device-plugin", "name": "nvidia-device-plugin-x",
                      "ownerReferences": [{"kind": "DaemonSet"}]}, "status": {"phase": "Running"}},
    ]


BUDGETS = [{"metadata": {"namespace": "shop", "name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}}]


def test_drain_failure_names_the_refused_pod_and_its_budget():
    check = task(UPGRADE, "Check the drain went through and only DaemonSet, static and finished pods are left")
    variables = dict(NODE, ansible_check_mode=False, gpufleet_upgrade_drain={"failed": True, "msg": PDB_REFUSED},
                     gpufleet_upgrade_left={"resources": left_pods()},
                     gpufleet_upgrade_budgets={"resources": BUDGETS}, gpufleet_drain_timeout=600)
    variables.update(check["vars"])
    assert not holds(UPGRADE, check["ansible.builtin.assert"]["that"], **variables)
    message = " ".join(rendered(UPGRADE, check["ansible.builtin.assert"]["fail_msg"], **variables).split())
    assert message == (
        "The drain of gpu-a gave up after 600 s: the API still refused to evict shop/web-1: Cannot evict pod as it "
        "would violate the pod's disruption budget. Still on the node: shop/web-1 (PodDisruptionBudget shop/web: "
        "0 disruptions allowed, 1 healthy of 1 needed). The driver was not touched.")


def test_drain_that_went_through_passes_the_check():
    check = task(UPGRADE, "Check the drain went through and only DaemonSet, static and finished pods are left")
    variables = dict(NODE, ansible_check_mode=False, gpufleet_upgrade_drain={"changed": True},
                     gpufleet_upgrade_left={"resources": left_pods()[1:]})
    variables.update(check["vars"])
    assert holds(UPGRADE, check["ansible.builtin.assert"]["that"], **variables)


# gpu_path.yml, and return_node.yml's wait for a DRA node

PATH_CHECK, PATH_DRIVER, PATH_MOVE = playbook("gpu_path.yml")
LABEL = "nvidia.com/dra-kubelet-plugin"


def path_target(host, **variables):
    decide = task(PATH_CHECK, "Decide the node's path")["ansible.builtin.set_fact"]["gpufleet_path_target"]
    return rendered(PATH_CHECK, decide, inventory_hostname=host, groups={"gpu_dra_nodes": ["dra-a"]}, **variables)


def test_the_path_comes_from_the_inventory_unless_given():
    assert path_target("dra-a") == "dra"
    assert path_target("gpu-a") == "device_plugin"
    assert path_target("dra-a", gpufleet_gpu_path="device_plugin") == "device_plugin"


@pytest.mark.parametrize("target,cdi,words", [
    ("dra", True, None),
    ("device_plugin", False, None),
    ("sideways", True, 'gpufleet_gpu_path of dra-a is "sideways"; give dra or device_plugin'),
    ("dra", False, "dra-a goes to DRA but its gpu_container_toolkit_cdi is false"),
])
def test_a_bad_path_or_a_dra_host_without_cdi_is_refused_before_any_change(target, cdi, words):
    check = task(PATH_CHECK, "Check the path and what it needs")["ansible.builtin.assert"]
    variables = dict(inventory_hostname="dra-a", gpufleet_path_target=target, gpu_container_toolkit_cdi=cdi,
                     gpufleet_path_cdi_needed=True)
    assert holds(PATH_CHECK, check["that"], **variables) is (words is None)
    # Where the API host's gpu_dra_driver_require_cdi is false (a runtime with CDI on by default), CDI is not asked.
    relaxed = dict(variables)
    relaxed["gpufleet_path_cdi_needed"] = False
    assert holds(PATH_CHECK, check["that"], **relaxed) is (target != "sideways")
    if words:
        message = rendered(PATH_CHECK, check["fail_msg"], **variables)
        assert message.startswith("No node was changed: ") and words in message
    # Every check before the first task that changes anything, and the play stops all hosts on one failure.
    assert PATH_CHECK.get("any_errors_fatal") is True
    assert not any(uses_the_api(t) and "kubernetes.core.k8s" in t for t in all_tasks(PATH_CHECK["tasks"]))


@pytest.mark.parametrize("labels,annotations,current,unfinished", [
    ({LABEL: "true"}, {}, "dra", ""), ({LABEL: "false"}, {}, "device_plugin", ""), ({}, None, "device_plugin", ""),
    ({LABEL: "true"}, {"gpufleet.nvidia.com/gpu-path-move": '{"to": "dra", "cordoned": true}'}, "dra",
     '{"to": "dra", "cordoned": true}'),
])
def test_the_label_says_which_path_a_node_is_on_and_the_annotation_a_move_left_unfinished(
        labels, annotations, current, unfinished):
    decide = task(PATH_CHECK, "Say which path the node is on now, and whether a move was left unfinished")
    values = decide["ansible.builtin.set_fact"]
    variables = dict(gpufleet_path_label=LABEL, __gpufleet_labels=labels, __gpufleet_annotations=annotations or {})
    assert rendered(PATH_CHECK, values["gpufleet_path_current"], **variables) == current
    found = rendered(PATH_CHECK, values["gpufleet_path_unfinished"], **variables)
    # ansible-core before 2.19 makes a dict of JSON text; the tasks that read it take either.
    assert (found if isinstance(found, dict) else json.loads(found) if found else "") == (
        json.loads(unfinished) if unfinished else "")
    node = {"metadata": {"name": "n", "labels": labels, "annotations": annotations}}
    assert rendered(PATH_CHECK, decide["vars"]["__gpufleet_labels"], gpufleet_path_read={"resources": [node]}) == labels
    assert rendered(PATH_CHECK, decide["vars"]["__gpufleet_annotations"],
                    gpufleet_path_read={"resources": [node]}) == (annotations or {})


def test_the_plan_says_which_nodes_move_and_the_driver_runs_only_for_a_move_to_dra():
    hosts = {"a": ("dra", "device_plugin", ""), "b": ("dra", "dra", ""), "c": ("device_plugin", "dra", ""),
             "d": ("device_plugin", "device_plugin", ""), "e": ("dra", "dra", '{"to": "dra", "cordoned": true}')}
    hostvars = dict((host, {"gpufleet_path_target": t, "gpufleet_path_current": c, "gpufleet_path_unfinished": u})
                    for host, (t, c, u) in hosts.items())
    plan_task = task(PATH_CHECK, "Plan the moves")
    plan = rendered(PATH_CHECK, plan_task["ansible.builtin.set_fact"]["gpufleet_path_plan"],
                    ansible_play_hosts=sorted(hosts), hostvars=hostvars)
    # An unfinished move (e) is moved again, not counted among the nodes on the DRA path.
    assert plan == {"to_dra": ["a", "e"], "back": ["c"], "on_dra": ["b"]}
    assert (plan_task["delegate_facts"], plan_task["run_once"]) == (True, True)
    driver = task(PATH_DRIVER, "Run gpu_dra_driver for the hosts already on the DRA path")
    assert rendered(PATH_DRIVER, driver["vars"]["gpu_dra_driver_hosts"], gpufleet_path_plan=plan) == ["b"]
    assert holds(PATH_DRIVER, driver["when"], gpufleet_path_plan=plan)
    assert not holds(PATH_DRIVER, driver["when"], gpufleet_path_plan=dict(plan, to_dra=[]))


def pod_on_node(name, owner=None, limits=None, claims=None, phase="Running", mirror=False):
    metadata = {"name": name, "namespace": "ns"}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner, "name": "x"}]
    if mirror:
        metadata["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    spec = {"containers": [{"name": "c", "resources": {"limits": limits} if limits else {}}]}
    if claims:
        spec["resourceClaims"] = claims
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def test_a_pod_the_drain_keeps_that_holds_gpus_stops_the_move():
    check = task(PATH_MOVE, "Refuse to move GPUs a pod still holds")
    pods = [pod_on_node("plugin", "DaemonSet"), pod_on_node("done", "DaemonSet", {"nvidia.com/gpu": 1}, phase="Succeeded"),
            pod_on_node("web", "ReplicaSet", {"nvidia.com/gpu": 1}),
            pod_on_node("dcgm", "DaemonSet", {"nvidia.com/gpu": 1}),
            pod_on_node("mig", None, {"nvidia.com/mig-1g.10gb": 1}, mirror=True),
            pod_on_node("claims", "DaemonSet", claims=[{"name": "gpu", "resourceClaimTemplateName": "t"}]),
            pod_on_node("nic", "DaemonSet", {"nvidia.com/rdma_shared_device_a": 1})]
    holders = rendered(PATH_MOVE, check["vars"]["__gpufleet_holders"], gpufleet_path_pods={"resources": pods})
    # A ReplicaSet's pod is the drain's to evict (in check mode it is still there): not counted.
    assert holders == ["ns/dcgm", "ns/mig", "ns/claims"]
    assert not holds(PATH_MOVE, check["ansible.builtin.assert"]["that"], __gpufleet_holders=holders)
    assert holds(PATH_MOVE, check["ansible.builtin.assert"]["that"], __gpufleet_holders=[])


@pytest.mark.parametrize("target,label", [("dra", "true"), ("device_plugin", None)])
def test_the_move_sets_or_removes_the_label(target, label):
    patch = task(PATH_MOVE, "Label the node for the path it goes to")["kubernetes.core.k8s"]["definition"]
    labels = rendered(PATH_MOVE, patch["metadata"]["labels"], gpufleet_path_target=target, gpufleet_path_label=LABEL)
    # A merge patch: null removes the label; the label patch leaves the annotation alone.
    assert patch["metadata"] == {"labels": patch["metadata"]["labels"]} and labels == {LABEL: label}
    done = task(PATH_MOVE, "Say the move is done")["kubernetes.core.k8s"]["definition"]
    assert done["metadata"]["annotations"] == {"gpufleet.nvidia.com/gpu-path-move": None}


def imported_vars(play, name):
    """The variables an import_tasks task gives the tasks it imports."""
    found = [t for t in all_tasks(play["tasks"]) if t.get("ansible.builtin.import_tasks") == name]
    assert len(found) == 1
    return found[0].get("vars") or {}


@pytest.mark.parametrize("cordoned", [True, False])
def test_the_move_is_said_done_in_the_write_that_uncordons_the_node(cordoned):
    # A run stopped between an uncordon and a later removal of the annotation would leave a node taking work
    # whose next run drains it again: one merge patch does both.
    uncordon = task(PATH_MOVE, "Uncordon the node this run cordoned")
    patch = uncordon["kubernetes.core.k8s"]["definition"]
    given = imported_vars(PATH_MOVE, "tasks/return_node.yml")
    assert patch["spec"] == {"unschedulable": False}
    annotations = rendered(PATH_MOVE, patch["metadata"]["annotations"], **given)
    assert annotations == {"gpufleet.nvidia.com/gpu-path-move": None, "gpufleet.nvidia.com/cordoned-by": None}
    assert holds(PATH_MOVE, uncordon["when"], gpufleet_upgrade_cordoned=cordoned) is cordoned
    # A node the move found cordoned stays so, and loses the annotation by a write of its own.
    done = task(PATH_MOVE, "Say the move is done")
    assert holds(PATH_MOVE, done["when"], gpufleet_upgrade_cordoned=cordoned) is not cordoned
    names = [t.get("name") for t in all_tasks(PATH_MOVE["tasks"])]
    assert names.index("Smoke-test the node before it takes work again") < names.index(
        "Uncordon the node this run cordoned") < names.index("Say the move is done")


def unschedulable(flag):
    return {"resources": [{"metadata": {"name": "dra-a"}, "spec": {"unschedulable": True} if flag else {}}]}


@pytest.mark.parametrize("unfinished,was_cordoned,cordons", [
    # A fresh move cordons (and so uncordons) only a node that was schedulable.
    ("", False, True), ("", True, False),
    # A move left unfinished keeps the answer of the run that began it, whatever the node is now.
    ('{"to": "dra", "cordoned": true}', True, True), ({"to": "dra", "cordoned": True}, True, True),
    ('{"to": "dra", "cordoned": false}', True, False), ('{"to": "dra", "cordoned": true}', False, True),
    # The operator uncordoned it since: this run cordons it, so this run uncordons it.
    ('{"to": "dra", "cordoned": false}', False, True), ({"to": "dra", "cordoned": False}, False, True),
])
def test_the_annotation_is_written_before_the_cordon_and_says_whose_cordon_it_is(unfinished, was_cordoned, cordons):
    names = [t.get("name") for t in all_tasks(PATH_MOVE["tasks"])]
    # A run stopped between the cordon and the label leaves the annotation, so the next one uncordons.
    assert names.index("Say a move is under way") < names.index("Cordon the node") < names.index(
        "Label the node for the path it goes to")
    decide = task(PATH_MOVE, "Say whether the move cordons the node")["ansible.builtin.set_fact"]["gpufleet_path_cordons"]
    found = rendered(PATH_MOVE, decide, gpufleet_path_unfinished=unfinished, gpufleet_path_before=unschedulable(was_cordoned))
    assert str(found) == str(cordons)
    note = task(PATH_MOVE, "Say a move is under way")["kubernetes.core.k8s"]["definition"]["metadata"]["annotations"]
    written = rendered(PATH_MOVE, note["gpufleet.nvidia.com/gpu-path-move"], gpufleet_path_target="dra",
                       gpufleet_path_cordons=found)
    assert (written if isinstance(written, dict) else json.loads(written)) == {"to": "dra", "cordoned": cordons}
    after = task(PATH_MOVE, "Say the move uncordons the node it cordoned")["ansible.builtin.set_fact"]
    assert str(rendered(PATH_MOVE, after["gpufleet_upgrade_cordoned"], gpufleet_path_cordons=found)) == str(cordons)
    assert names.index("Cordon the node") < names.index("Say the move uncordons the node it cordoned") < names.index(
        "Uncordon the node this run cordoned")


@pytest.mark.parametrize("allocatable,gone", [
    ({"cpu": "8", "nvidia.com/gpu": "0"}, True), ({"cpu": "8"}, True), ({"nvidia.com/gpu": "1"}, False),
    ({"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"}, False),
])
def test_a_node_moving_to_dra_waits_until_the_device_plugin_offers_nothing(allocatable, gone):
    wait = task(PATH_MOVE, "Wait until the device plugin offers none of the node's GPUs")
    read = {"resources": [{"metadata": {"name": "dra-a"}, "status": {"allocatable": allocatable}}]}
    assert holds(PATH_MOVE, wait["until"], gpufleet_path_left=read) is gone


def test_a_node_moving_back_waits_until_its_slices_are_gone():
    wait = task(PATH_MOVE, "Wait until the node publishes no ResourceSlice of the DRA driver")
    assert wait["gpufleet.nvidia.internal.api_list"]["field_selectors"][1] == "spec.nodeName={{ gpufleet_upgrade_node }}"
    assert holds(PATH_MOVE, wait["until"], gpufleet_path_unpublished={"resources": []})
    assert not holds(PATH_MOVE, wait["until"], gpufleet_path_unpublished={"resources": [{"metadata": {"name": "s"}}]})
    assert not holds(PATH_MOVE, wait["until"], gpufleet_path_unpublished={"failed": True, "msg": "no answer"})


def dra_facts():
    from ansible_collections.gpufleet.nvidia.tests.unit.plugins.filter.test_dra import H100, published
    return H100, published


@pytest.mark.parametrize("path,groups,labels,dra", [
    (None, {"gpu_dra_nodes": ["dra-a"]}, None, True), (None, {}, None, False),
    ("device_plugin", {"gpu_dra_nodes": ["dra-a"]}, None, False), ("dra", {}, None, True),
    # The Node as the drain read it says more than the inventory.
    (None, {"gpu_dra_nodes": ["dra-a"]}, {}, False), (None, {}, {LABEL: "true"}, True),
])
def test_a_node_given_back_waits_for_the_path_it_is_on(path, groups, labels, dra):
    decide = task(UPGRADE, "Say which path gives the node its GPUs")
    variables = dict(inventory_hostname="dra-a", groups=groups, **({"gpufleet_rolling_path": path} if path else {}))
    if labels is not None:
        variables["gpufleet_upgrade_before"] = {"resources": [{"metadata": {"name": "dra-a", "labels": labels}}]}
    variables["gpufleet_rolling_dra_label"] = LABEL
    decide = decide["ansible.builtin.set_fact"]["gpufleet_rolling_on_dra"]
    on_dra = rendered(UPGRADE, decide, **variables)
    assert on_dra in (True, False, "True", "False") and str(on_dra) == str(dra)
    device_plugin_wait = task(UPGRADE, "Wait for the device plugin to advertise the node's GPUs again")
    slices_wait = task(UPGRADE, "Wait for the DRA kubelet plugin to publish the node's GPUs again")
    assert holds(UPGRADE, device_plugin_wait["when"], gpufleet_rolling_on_dra=on_dra, ansible_check_mode=False) is not dra
    assert holds(UPGRADE, slices_wait["when"], gpufleet_rolling_on_dra=on_dra, ansible_check_mode=False) is dra


def test_the_dra_label_of_a_node_given_back_is_the_api_hosts():
    decide = task(UPGRADE, "Say which label marks a node on the DRA path")["ansible.builtin.set_fact"]
    label = decide["gpufleet_rolling_dra_label"]
    api = {"api": {"gpu_dra_driver_node_label": "example.com/dra"}}
    # gpu_path.yml's label, else the API host's gpu_dra_driver_node_label (where the role runs), else the host's own.
    assert rendered(UPGRADE, label, gpufleet_path_label="x/y", gpufleet_upgrade_api="api", hostvars=api) == "x/y"
    assert rendered(UPGRADE, label, gpufleet_upgrade_api="api", hostvars=api,
                    gpu_dra_driver_node_label="other/label") == "example.com/dra"
    assert rendered(UPGRADE, label, gpufleet_upgrade_api="api", hostvars={"api": {}},
                    gpu_dra_driver_node_label="other/label") == "other/label"
    assert rendered(UPGRADE, label, gpufleet_upgrade_api="api", hostvars={"api": {}}) == LABEL
    # upgrade_driver.yml's API host defaults to localhost, site.yml's (where gpu_dra_driver runs) to kube_control_plane's first.
    assert rendered(UPGRADE, label, gpufleet_upgrade_api="localhost", groups={"kube_control_plane": ["cp-1"]},
                    hostvars={"localhost": {}, "cp-1": {"gpu_dra_driver_node_label": "example.com/dra"}}) == "example.com/dra"
    smoke = task(UPGRADE, "Smoke-test the node before it takes work again")
    assert smoke["vars"]["gpu_smoke_test_dra_node_label"] == "{{ gpufleet_rolling_dra_label }}"


def test_the_path_plays_read_the_api_hosts_settings_one_key_at_a_time():
    decide = task(PATH_CHECK, "Decide the node's path")["ansible.builtin.set_fact"]
    api = {"api": {"gpu_dra_driver_node_label": "example.com/dra", "gpu_dra_driver_require_cdi": False,
                   "gpu_device_plugin_namespace": "gpus"}}
    variables = dict(gpufleet_kube_api_host="api", hostvars=api)
    assert rendered(PATH_CHECK, decide["gpufleet_path_label"], **variables) == "example.com/dra"
    assert str(rendered(PATH_CHECK, decide["gpufleet_path_cdi_needed"], **variables)) == "False"
    assert rendered(PATH_CHECK, decide["gpufleet_path_device_plugin_namespace"], **variables).strip() == "gpus"
    assert rendered(PATH_CHECK, decide["gpufleet_path_label"], gpufleet_kube_api_host="api",
                    hostvars={"api": {}}) == LABEL
    # The play on the API host runs where the checks kept their plan (a play's hosts read hostvars, not a host's
    # inventory variables); without that fact, on the host the other plays would pick.
    remember = task(PATH_CHECK, "Say which host the next play runs on")
    assert (remember["delegate_to"], remember["delegate_facts"], remember["run_once"]) == ("localhost", True, True)
    assert rendered(PATH_CHECK, remember["ansible.builtin.set_fact"]["gpufleet_path_api"],
                    gpufleet_upgrade_api="cp-2") == "cp-2"
    hosts = PATH_DRIVER["hosts"]
    groups = {"kube_control_plane": ["cp-1", "cp-2"]}
    assert rendered(PATH_DRIVER, hosts, groups=groups, hostvars={"localhost": {"gpufleet_path_api": "cp-2"}}).strip() == "cp-2"
    assert rendered(PATH_DRIVER, hosts, groups=groups, hostvars={"localhost": {}}).strip() == "cp-1"
    assert rendered(PATH_DRIVER, hosts, groups={}, hostvars={"localhost": {}}).strip() == "localhost"
    assert rendered(PATH_CHECK, PATH_CHECK["vars"]["gpufleet_upgrade_api"], groups={}) == "localhost"
    # The kubernetes.core check comes before the play that runs the DRA driver.
    assert "Check the controller's kubernetes.core drains without evicting DaemonSet pods" in [
        t.get("name") for t in all_tasks(PATH_CHECK["tasks"])]


def test_a_dra_node_given_back_waits_for_slices_that_match_its_facts():
    facts, published = dra_facts()
    wait = task(UPGRADE, "Wait for the DRA kubelet plugin to publish the node's GPUs again")
    fail = task(UPGRADE, "Fail when the node does not publish what its hardware has")
    variables = dict(inventory_hostname="dra-a", gpufleet_upgrade_node="dra-a", ansible_facts={"nvidia": facts})
    slices = [published(facts, "dra-a")]
    assert holds(UPGRADE, wait["until"], gpufleet_upgrade_published={"resources": slices}, **variables)
    # Another node's slice, or one GPU short, is not this node publishing its GPUs.
    assert not holds(UPGRADE, wait["until"], gpufleet_upgrade_published={"resources": [published(facts, "dra-b")]},
                     **variables)
    short = published(facts, "dra-a")
    short["spec"]["devices"] = short["spec"]["devices"][1:]
    assert not holds(UPGRADE, wait["until"], gpufleet_upgrade_published={"resources": [short]}, **variables)
    variables["gpufleet_upgrade_published"] = {"resources": [short], "failed": True}
    published_row = rendered(UPGRADE, fail["vars"]["__gpufleet_published"], **variables)
    assert holds(UPGRADE, fail["when"], gpufleet_rolling_on_dra=True, ansible_check_mode=False, **variables)
    message = rendered(UPGRADE, fail["ansible.builtin.fail"]["msg"], gpufleet_ready_timeout=60,
                       __gpufleet_published=published_row, **variables)
    assert message.startswith("dra-a does not publish its GPUs through DRA after 60 s: does not publish GPU GPU-")


# mig.yml

MIG_CHECK = playbook("mig.yml")[0]


@pytest.mark.parametrize("groups, slices, changes, words", [
    ({"gpu_dra_nodes": ["dra-a"]}, [], ["GPU 0: MIG mode off -> on"], "(in gpu_dra_nodes)"),
    # Moved to DRA by gpu_path.yml before the inventory says so: what its plugin publishes says it.
    ({}, ["00000-gpu.nvidia.com-dra-a-x7k2p"], ["GPU 0: MIG mode off -> on"],
     "(it publishes its GPUs through NVIDIA's DRA driver)"),
    ({}, [], ["GPU 0: MIG mode off -> on"], None),
    # Nothing changes: the rollout leaves the node alone, and the others go on.
    ({"gpu_dra_nodes": ["dra-a"]}, None, [], None),
])
def test_mig_refuses_a_node_on_the_dra_path_whose_layout_changes(groups, slices, changes, words):
    read = task(MIG_CHECK, "Read what NVIDIA's DRA driver publishes for the node")
    check = task(MIG_CHECK, "Check the node is not on the DRA path with a layout to change")
    variables = dict(inventory_hostname="dra-a", groups=groups, gpufleet_mig_plan={"changes": changes},
                     gpufleet_mig_dra_slices={"skipped": True} if slices is None else
                     {"resources": [{"metadata": {"name": name}} for name in slices]})
    assert holds(MIG_CHECK, read["when"], **variables) is bool(changes)
    assert read["kubernetes.core.k8s_info"]["field_selectors"][0] == "spec.driver=gpu.nvidia.com"
    assert holds(MIG_CHECK, check["ansible.builtin.assert"]["that"], **variables) is (words is None)
    if words:
        message = rendered(MIG_CHECK, check["ansible.builtin.assert"]["fail_msg"], **variables)
        assert message.startswith("No node was changed: dra-a is on the DRA path " + words)
    names = [t.get("name") for t in MIG_CHECK["tasks"]]
    assert names.index("Plan the node's MIG layout") < names.index(read["name"]) < names.index(check["name"])


# One rule for the API host in every playbook: gpufleet_kube_api_host wherever the inventory sets it (group_vars
# too), else kube_control_plane's first host, else localhost.
API_HOST_TASK = load_yaml(LOADER, os.path.join(COLLECTION, "playbooks", "tasks", "api_host.yml"))[0]


@pytest.mark.parametrize("variables,chosen", [
    ({"gpufleet_kube_api_host": "api-1", "groups": {"kube_control_plane": ["cp-1"]}}, "api-1"),
    ({"groups": {"kube_control_plane": ["cp-1", "cp-2"]}}, "cp-1"),
    # Neither: the rolling playbooks' fallback (localhost), else none.
    ({"groups": {"kube_control_plane": []}, "gpufleet_api_host_fallback": "localhost"}, "localhost"),
    ({"groups": {}, "gpufleet_api_host_fallback": "localhost"}, "localhost"),
    ({"groups": {}}, ""),
    # The example inventory's own value, templated in group_vars/all.yml.
    ({"gpufleet_kube_api_host": "", "groups": {"kube_control_plane": ["cp-1"]}}, "cp-1"),
])
def test_the_api_host_rule(variables, chosen):
    fact = API_HOST_TASK["ansible.builtin.set_fact"]["gpufleet_api_host"]
    assert Templar(loader=LOADER, variables=variables).template(fact).strip() == chosen
    assert (API_HOST_TASK["delegate_to"], API_HOST_TASK["delegate_facts"], API_HOST_TASK["run_once"]) == ("localhost", True, True)


@pytest.mark.parametrize("name", ["site.yml", "health.yml", "mig.yml"])
def test_every_cluster_play_runs_on_the_host_the_first_play_chose(name):
    plays = playbook(name)
    first = plays[0]
    assert any(t.get("ansible.builtin.import_tasks") == "tasks/api_host.yml" for t in all_tasks(first["tasks"]))
    cluster = [play for play in plays if "gpufleet_api_host" in str(play["hosts"])]
    assert cluster, "no play of %s runs on the chosen API host" % name
    for play in cluster:
        # A play's hosts: sees the fact kept on localhost, not the inventory's group_vars.
        hosts = Templar(loader=LOADER, variables={"hostvars": {"localhost": {"gpufleet_api_host": "cp-9"}}}).template(
            play["hosts"])
        assert hosts == "cp-9"
        # None chosen (no API host, or the first play had no host under --limit): as before, -e or the pattern.
        for chosen, extra, pattern in (("", {}, "kube_control_plane[0]"), (None, {"gpufleet_kube_api_host": "api"}, "api")):
            variables = dict({"hostvars": {"localhost": {} if chosen is None else {"gpufleet_api_host": chosen}}}, **extra)
            assert Templar(loader=LOADER, variables=variables).template(play["hosts"]) == pattern
    assert not [play["name"] for play in plays if "gpufleet_kube_api_host | default('kube_control_plane[0]')" in str(play["hosts"])
                and "gpufleet_api_host" not in str(play["hosts"])]


# site.yml: where the cluster part keeps its results, checked before any change

RESULTS_CHECK = load_yaml(LOADER, os.path.join(COLLECTION, "playbooks", "tasks", "results_store_check.yml"))[0]


@pytest.mark.parametrize("settings, words", [
    ({}, None),
    ({"gpufleet_cluster_results": "/srv/results.json", "gpufleet_results_namespace": "gpu-ops"}, None),
    ({"gpufleet_cluster_results": "results.json"},
     'gpufleet_cluster_results must be an absolute path of a file on the controller (or empty, for the ConfigMap), '
     'got "results.json"'),
    ({"gpufleet_cluster_results": ["/srv/a.json"]}, 'gpufleet_cluster_results must be an absolute path'),
    ({"gpufleet_results_namespace": "GPU_Ops"},
     'gpufleet_results_namespace must be a namespace name (lower-case letters, digits and -, at most 63), got "GPU_Ops"'),
    ({"gpufleet_results_namespace": 7}, None),
    ({"gpufleet_results_namespace": ["gpu-ops"]}, 'gpufleet_results_namespace must be a namespace name'),
    ({"gpufleet_results_configmap": "results/fleet"}, 'gpufleet_results_configmap must be a ConfigMap name'),
])
def test_site_checks_where_the_results_go_before_any_change(settings, words):
    play = {"vars": RESULTS_CHECK["vars"]}
    # From the API host's variables (the cluster part runs there), as -e or group_vars give them.
    variables = {"hostvars": {"localhost": {"gpufleet_api_host": "cp-1"}, "cp-1": settings, "gpu-a": {}},
                 "inventory_hostname": "gpu-a"}
    errors = rendered(play, trusted("{{ __gpufleet_results_errors }}"), **variables)
    assert errors == ([] if words is None else [errors[0]]) and (words is None or errors[0].startswith(words))
    # No API host: as the play sees them (-e, the vars of a playbook that imports site.yml, this host's).
    variables = dict(settings, hostvars={"localhost": {}, "gpu-a": {}}, inventory_hostname="gpu-a")
    assert len(rendered(play, trusted("{{ __gpufleet_results_errors }}"), **variables)) == (0 if words is None else 1)
    assert RESULTS_CHECK["run_once"] is True
