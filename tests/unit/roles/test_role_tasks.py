# Copyright: gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role tasks' own expressions, templated by the ansible-core these tests run on (make units runs
them on every minor from 2.16 to 2.21): what a task hands a filter keeps its type everywhere."""

from __future__ import annotations

import base64
import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.filter import driver_plan, kubelet_plan
from ansible_collections.gpufleet.nvidia.tests.unit.templating import DataLoader, Templar, evaluate_conditional, load_yaml

ROLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles"))
LOADER = DataLoader()


def role_task(role, tasks_file, name):
    variables = {}
    for part in ("defaults", "vars"):
        path = os.path.join(ROLES, role, part, "main.yml")
        if os.path.exists(path):
            variables.update(load_yaml(LOADER, path) or {})
    found = [t for t in load_yaml(LOADER, os.path.join(ROLES, role, "tasks", tasks_file)) if t.get("name") == name]
    assert len(found) == 1, "no single task named %r in %s" % (name, tasks_file)
    return found[0], variables


@pytest.mark.parametrize("gpu_count", [0, 1, 8])
def test_kubelet_settings_keep_the_gpu_count_a_number(gpu_count):
    # On ansible-core 2.16 to 2.18 a "{{ n | int }}" value inside a YAML mapping came out as text,
    # which the flag check refused ("gpu_count must be the number of GPUs ... got '1'").
    task, variables = role_task("gpu_kubelet", "preflight.yml", "Gather the settings")
    variables.update(ansible_facts={"nvidia": {"gpu_count": gpu_count}}, gpu_kubelet_gpu_labels=False,
                     gpu_kubelet_node_labels={"example.com/pool": "a100"},
                     __gpu_kubelet_version={"stdout": "Kubernetes v1.31.4"})
    facts = Templar(loader=LOADER, variables=variables).template(task["ansible.builtin.set_fact"])
    settings = facts["__gpu_kubelet_settings"]
    assert settings["gpu_count"] == gpu_count and isinstance(settings["gpu_count"], int)
    assert settings["labels"] == {"example.com/pool": "a100"}
    assert settings["taints"] == variables["gpu_kubelet_taints"]
    assert kubelet_plan.kubelet_flag_errors(settings) == []


def all_tasks(tasks):
    for entry in tasks:
        yield entry
        for part in ("block", "rescue", "always"):
            yield from all_tasks(entry.get(part) or [])


@pytest.mark.parametrize("efivar, enabled", [(b"\x06\x00\x00\x00\x01", True), (b"\x06\x00\x00\x00\x00", False)])
def test_secure_boot_check_reads_the_last_byte(efivar, enabled):
    tasks = load_yaml(LOADER, os.path.join(ROLES, "gpu_driver", "tasks", "preflight.yml"))
    (check,) = [t for t in all_tasks(tasks) if t.get("name") == "Check Secure Boot will not refuse an unsigned module"]
    templar = Templar(loader=LOADER, variables={
        "__gpu_driver_sb_var": {"stat": {"exists": True}},
        "__gpu_driver_sb_value": {"content": base64.b64encode(efivar).decode()}})
    assert evaluate_conditional(templar, check["ansible.builtin.assert"]["that"]) is not enabled


@pytest.mark.parametrize("modules", [["ib_umad"], ["ib_umad", "ib_uverbs"]])
def test_nvlink5_modules_one_a_line(modules):
    tasks = load_yaml(LOADER, os.path.join(ROLES, "gpu_driver", "tasks", "fabric-manager.yml"))
    (load,) = [t for t in tasks if t.get("name", "").startswith("Load ib_umad at boot")]
    templar = Templar(loader=LOADER, variables=dict(load.get("vars", {}), __gpu_driver_nvlink5_modules=modules))
    content = templar.template(load["ansible.builtin.copy"]["content"])
    assert content.splitlines()[1:] == modules
    assert content.endswith("\n")


# set_fact of ansible-core 2.16 to 2.18 turns a text true, false, yes or no into a boolean.
SET_FACT_BOOLEAN_TEXTS = ("true", "false", "yes", "no")


@pytest.mark.parametrize("setting, mode", [(True, "always"), ("true", "always"), ("yes", "always"), (False, "never"),
                                           ("false", "never"), ("auto", "auto"), ("sometimes", "invalid")])
def test_fabric_manager_mode_is_no_text_set_fact_makes_a_boolean(setting, mode):
    task, variables = role_task("gpu_driver", "preflight.yml",
                                "Read the branch and versions as text (an unquoted 550 is a number in YAML)")
    variables.update(task.get("vars", {}), gpu_driver_fabric_manager=setting, gpu_driver_branch=570,
                     gpu_driver_version="", gpu_driver_fabric_manager_version="")
    facts = Templar(loader=LOADER, variables=variables).template(task["ansible.builtin.set_fact"])
    assert facts["__gpu_driver_fm_mode"] == mode
    assert facts["__gpu_driver_requested_branch"] == "570"
    assert not [name for name, value in facts.items()
                if isinstance(value, str) and value.strip().lower() in SET_FACT_BOOLEAN_TEXTS]


@pytest.mark.parametrize("text", ['{\n  "runtimes": {"runc": {}},\n  "log-level": "warn"\n}\n', "[1, 2]\n", "true"])
def test_rollback_puts_the_exact_text_back(text):
    # ansible-core 2.16 to 2.18 turn a result that looks like a dict, a list or a boolean into one;
    # copy would then write daemon.json back as compact JSON.
    tasks = load_yaml(LOADER, os.path.join(ROLES, "gpu_container_toolkit", "tasks", "restore.yml"))
    (put,) = [t for t in tasks if t.get("name") == "Put the previous files back"]
    item = {"path": "/etc/docker/daemon.json", "content": base64.b64encode(text.encode()).decode()}
    content = Templar(loader=LOADER, variables={"item": item}).template(put["ansible.builtin.copy"]["content"])
    assert content == text


def slices_read(names):
    if names is None:
        return {"changed": False, "skipped": True}
    published = [{"metadata": {"name": name}, "spec": {"driver": "gpu.nvidia.com"}} for name in names]
    return {"api_found": True, "resources": published}


@pytest.mark.parametrize("changes, check_pods, slices, refused", [
    (["GPU 0: MIG mode off -> on"], True, ["00000-gpu.nvidia.com-dra-a-x7k2p"], True),
    # Not published (yet): a new DRA host gets its layout before site.yml deploys the DRA driver.
    (["GPU 0: MIG mode off -> on"], True, [], False),
    # A cluster without resource.k8s.io/v1: k8s_info finds no API and returns no resources.
    (["GPU 0: MIG mode off -> on"], True, {"api_found": False, "resources": []}, False),
    (["GPU 0: MIG mode off -> on"], False, None, False),
    ([], True, None, False),
])
def test_gpu_mig_refuses_a_layout_change_under_nvidias_dra_driver(changes, check_pods, slices, refused):
    task, variables = role_task("gpu_mig", "apply.yml", "Refuse to change the layout of a node that publishes its GPUs through DRA")
    read = role_task("gpu_mig", "apply.yml", "Read what NVIDIA's DRA driver publishes for the node")[0]
    variables.update(inventory_hostname="dra-a", gpu_mig_node_name="dra-a", gpu_mig_check_pods=check_pods,
                     __gpu_mig_plan={"changes": changes},
                     __gpu_mig_dra_slices=slices if isinstance(slices, dict) else slices_read(slices))
    templar = Templar(loader=LOADER, variables=variables)
    reads = all(evaluate_conditional(templar, c) for c in read["when"])
    assert reads is bool(changes and check_pods)
    selectors = ["spec.driver=gpu.nvidia.com", "spec.nodeName={{ gpu_mig_node_name }}"]
    assert read["kubernetes.core.k8s_info"]["field_selectors"] == selectors
    checked = evaluate_conditional(templar, task["when"])
    assert (checked and not evaluate_conditional(templar, task["ansible.builtin.assert"]["that"])) is refused
    if refused:
        message = templar.template(task["ansible.builtin.assert"]["fail_msg"])
        assert message.startswith("Nothing was changed: node dra-a publishes its GPUs through NVIDIA's DRA driver "
                                  "(ResourceSlices 00000-gpu.nvidia.com-dra-a-x7k2p)")
        assert "ansible-playbook gpufleet.nvidia.mig --limit dra-a" in message
    # Before any change, and before the pods' refusal.
    names = [t.get("name") for t in load_yaml(LOADER, os.path.join(ROLES, "gpu_mig", "tasks", "apply.yml"))]
    assert names.index("Read what NVIDIA's DRA driver publishes for the node") < names.index(task["name"]) < names.index(
        "Refuse to change the layout under GPU pods") < names.index("Install the program that applies the layout")


MIXED = {"nvidia-smi": [{"version": "535.261.03-1~deb12u1"}], "libnvidia-ml1": [{"version": "535.261.03-1~deb12u1"}],
         "libcuda1": [{"version": "535.216.01-1~deb12u1"}]}


def install_block():
    tasks = load_yaml(LOADER, os.path.join(ROLES, "gpu_driver", "tasks", "install.yml"))
    (block,) = [t for t in tasks if t.get("name") == "Install, pin and hold the driver packages"]
    return tasks, block


@pytest.mark.parametrize("packages, refused", [(MIXED, True), (dict(MIXED, libcuda1=MIXED["nvidia-smi"]), False)])
def test_gpu_driver_never_holds_packages_that_disagree(packages, refused):
    # Issue 47: with a branch-only pin, libcuda1 of one release beside nvidia-smi of another was held as it was.
    tasks, block = install_block()
    names = [t["name"] for t in block["block"]]
    assert names.index("Install the driver packages at the pinned version") < names.index(
        "Read the driver packages apt left") < names.index("Bring the driver packages to one version") < names.index(
        "Check the driver packages agree before holding them") < names.index(
        "Hold the driver packages so apt upgrade leaves them alone")
    variables = role_task("gpu_driver", "install.yml", "Report the driver packages this run brings to one version")[1]
    variables.update(block["vars"], ansible_facts={"packages": packages, "distribution": "Debian"},
                     __gpu_driver_install_packages=["nvidia-smi", "libnvidia-ml1", "libcuda1"],
                     __gpu_driver_version_glob="535.*", __gpu_driver_unversioned_packages="^linux-headers-",
                     __gpu_driver_branch_only_packages=["nvidia-persistenced"], __gpu_driver_install_specs=[],
                     __gpu_driver_held={}, __gpu_driver_fm=False, __gpu_driver_after={"changed": False})
    templar = Templar(loader=LOADER, variables=variables)
    bring = [t for t in block["block"] if t["name"] == "Bring the driver packages to one version"][0]
    assert evaluate_conditional(templar, bring["when"]) is refused
    check = [t for t in block["block"] if t["name"] == "Check the driver packages agree before holding them"][0]
    assert evaluate_conditional(templar, check["ansible.builtin.assert"]["that"]) is not refused
    # ansible-core 2.19 and newer template the message whether the check passes or not.
    message = " ".join(templar.template(check["ansible.builtin.assert"]["fail_msg"]).split())
    if refused:
        assert templar.template(bring["ansible.builtin.apt"]["name"]) == [
            "nvidia-smi=535.261.03-*", "libnvidia-ml1=535.261.03-*", "libcuda1=535.261.03-*"]
        assert message.startswith("The driver's packages are at versions that disagree: nvidia-smi 535.261.03-1~deb12u1, "
                                  "libnvidia-ml1 535.261.03-1~deb12u1, libcuda1 535.216.01-1~deb12u1 (pin 535.*). "
                                  "This run holds none of them")
    report = [t for t in tasks if t.get("name") == "Report the driver packages this run brings to one version"][0]
    variables["__gpu_driver_version_mix"] = driver_plan.driver_version_mix(
        ["nvidia-smi", "libnvidia-ml1", "libcuda1"], packages, "535.*")
    templar = Templar(loader=LOADER, variables=variables)
    assert evaluate_conditional(templar, report["when"]) is refused
    if refused:
        assert templar.template(report["ansible.builtin.debug"]["msg"]).endswith(
            "libcuda1 535.216.01-1~deb12u1): this run installs them all at 535.261.03 before holding them.")
