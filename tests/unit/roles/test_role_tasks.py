# Copyright: gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role tasks' own expressions, templated by the ansible-core these tests run on (make units runs
them on every minor from 2.16 to 2.21): what a task hands a filter keeps its type everywhere."""

from __future__ import annotations

import base64
import os
import re

import pytest

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import driver_plan, kubelet_plan
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
    install = "Install the driver packages at the pinned version, a few minutes per installed kernel where DKMS builds the module"
    assert names.index(install) < names.index(
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


def block_task(role, tasks_file, name):
    """A task inside the one block of a task file, with the block's condition."""
    blocks = [t for t in load_yaml(LOADER, os.path.join(ROLES, role, "tasks", tasks_file)) if "block" in t]
    assert len(blocks) == 1
    found = [t for t in blocks[0]["block"] if t.get("name") == name]
    assert len(found) == 1, "no single task named %r in %s's block" % (name, tasks_file)
    return blocks[0], found[0]


WRITE_500 = {"failed": True,
             "msg": ('Failed to apply object: b\'{"kind":"Status","apiVersion":"v1","status":"Failure",'
                     '"message":"etcdserver: request timed out","reason":"InternalError","code":500}\'')}


@pytest.mark.parametrize("failed, conflicts, force, applies", [
    ([], [], False, True),
    # An object before it failed (an outage longer than the retries): nothing after it is written.
    ([{"object": "RuntimeClass nvidia"}], [], False, False),
    ([{"object": "RuntimeClass nvidia"}], [], True, False),
    # Another manager holds a field of an object before it: stop, unless the role takes it over.
    ([], [{"object": "Namespace nvidia-device-plugin"}], False, False),
    ([], [{"object": "Namespace nvidia-device-plugin"}], True, True),
])
def test_gpu_device_plugin_writes_nothing_after_an_object_that_was_not_applied(failed, conflicts, force, applies):
    block, dummy = block_task("gpu_device_plugin", "write_object.yml", "Apply the object")
    variables = {"gpu_device_plugin_force_conflicts": force,
                 "__gpu_device_plugin_writes": {"done": [], "conflicts": conflicts, "failed": failed, "forced": []}}
    templar = Templar(loader=LOADER, variables=variables)
    assert evaluate_conditional(templar, block["when"]) is applies
    # write.yml hands every object to write_object.yml, one at a time, in order.
    loop = load_yaml(LOADER, os.path.join(ROLES, "gpu_device_plugin", "tasks", "write.yml"))
    assert [t["ansible.builtin.include_tasks"] for t in loop] == ["write_object.yml"]


@pytest.mark.parametrize("result, started_ago, seconds, again", [
    (WRITE_500, 1, 20, True),
    (WRITE_500, 21, 20, False),
    # 0: one try only
    (WRITE_500, 0, 0, False),
    ({"changed": True, "result": {}, "method": "apply"}, 0, 20, False),
    # a refusal is never tried again
    ({"failed": True, "msg": "Failed to apply object: b'{\"kind\":\"Status\",\"code\":422,\"reason\":\"Invalid\"}'"}, 0, 20, False),
])
def test_gpu_device_plugin_tries_an_object_again_for_the_seconds_asked(result, started_ago, seconds, again):
    import time
    dummy, task = block_task("gpu_device_plugin", "write_object.yml", "Apply the object")
    variables = {"gpu_device_plugin_api_retry_seconds": seconds, "__gpu_device_plugin_applied": result,
                 "__gpu_device_plugin_first_try": time.time() - started_ago}
    templar = Templar(loader=LOADER, variables=variables)
    assert evaluate_conditional(templar, task["until"]) is not again
    # 2 s apart, the count never ends the tries before the seconds do (which would fail the task).
    assert task["delay"] == 2
    assert int(templar.template(task["retries"])) * task["delay"] >= seconds + task["delay"]


@pytest.mark.parametrize("role, value, error", [
    ("gpu_device_plugin", 20, None),
    ("gpu_device_plugin", 0, None),
    ("gpu_device_plugin", 601, "gpu_device_plugin_api_retry_seconds is 601; give how long"),
    ("gpu_device_plugin", -1, "gpu_device_plugin_api_retry_seconds is -1; give how long"),
    ("gpu_device_plugin", "soon", 'gpu_device_plugin_api_retry_seconds is "soon"; give how long'),
    ("gpu_dra_driver", 600, None),
    ("gpu_dra_driver", 1.5, "gpu_dra_driver_api_retry_seconds is 1.5; give how long"),
])
def test_api_retry_seconds_are_checked_before_any_change(role, value, error):
    task, variables = role_task(role, "preflight.yml", "Check the settings")
    variables.update(task["vars"])
    variables.update({role + "_api_retry_seconds": value, role + "_hosts": [], "hostvars": {}})
    errors = Templar(loader=LOADER, variables=variables).template(task["vars"]["__%s_errors" % role])
    retry_errors = [e for e in errors if e.startswith(role + "_api_retr")]
    if error is None:
        assert retry_errors == []
    else:
        assert len(retry_errors) == 1 and retry_errors[0].startswith(error), errors
        assert retry_errors[0].endswith("in whole seconds from 0 to 600")
    # The count of tries this setting replaced is refused, not silently left unread.
    variables.update({role + "_api_retry_seconds": 20, role + "_api_retries": 1})
    errors = Templar(loader=LOADER, variables=variables).template(task["vars"]["__%s_errors" % role])
    assert [e for e in errors if e.startswith(role + "_api_retr")] == [
        "%s_api_retries is 1, a count of tries the role no longer reads; set %s_api_retry_seconds (how long the tries "
        "go on; default 20) and remove it" % (role, role)]


# The input checks are one task: a passing run prints none of their texts, a failing one names every bad value.
@pytest.mark.parametrize("given,errors", [
    ({}, []),
    ({"gpu_container_toolkit_version": "1.17", "gpu_container_toolkit_settle_seconds": -1},
     ['gpu_container_toolkit_version must be an upstream version such as "1.17.8" (no packaging suffix), got "1.17"',
      "gpu_container_toolkit_settle_seconds must be 0 or more, got -1"]),
    ({"__gpu_container_toolkit_arch": ""},
     ["Architecture x86_64 has no NVIDIA container toolkit packages (x86_64 and aarch64 do)"]),
])
def test_container_toolkit_input_checks_say_only_what_failed(given, errors):
    check, variables = role_task("gpu_container_toolkit", "preflight.yml", "Check the input values")
    variables.update({"ansible_facts": {"architecture": "x86_64"}, "__gpu_container_toolkit_arch": "amd64",
                      "__gpu_container_toolkit_known_runtimes": {"containerd": {}, "docker": {}, "crio": {}}})
    variables.update(given)
    variables.update(check["vars"])
    found = Templar(loader=LOADER, variables=variables).template(check["vars"]["__errors"])
    assert found == errors
    assert "loop" not in check and "loop_control" not in check
    assert evaluate_conditional(Templar(loader=LOADER, variables=dict(variables, __errors=found)),
                                check["ansible.builtin.assert"]["that"]) is (not errors)


@pytest.mark.parametrize("given,error", [
    ({}, None),
    ({"__gpu_driver_requested_branch": "535", "__gpu_driver_requested_version": "550.163.01"},
     'gpu_driver_version "550.163.01" is not in gpu_driver_branch "535"'),
    ({"__gpu_driver_requested_branch": "5x5"}, 'gpu_driver_branch must be a three-digit branch such as "550", got "5x5"'),
])
def test_gpu_driver_input_checks_say_only_what_failed(given, error):
    check, variables = role_task("gpu_driver", "preflight.yml", "Check the input values")
    variables.update({"ansible_facts": {"distribution": "Debian"}, "__gpu_driver_requested_branch": "",
                      "__gpu_driver_requested_version": "", "__gpu_driver_requested_fm_version": "",
                      "__gpu_driver_fm_mode": "auto"})
    variables.update(given)
    variables.update(check["vars"])
    found = Templar(loader=LOADER, variables=variables).template(check["vars"]["__errors"])
    assert found == ([error] if error else [])


def test_a_failed_driver_install_holds_again_every_package_held_before():
    # apt moves held packages under allow_change_held_packages; one dpkg then leaves half-configured keeps the
    # selection install unless the rescue holds again all that was held, not only what the install was to replace.
    blocks = [t for t in load_yaml(LOADER, os.path.join(ROLES, "gpu_driver", "tasks", "install.yml")) if "rescue" in t]
    rehold = [t for t in blocks[0]["rescue"] if t.get("name") == "Hold again what was held before the install"][0]
    variables = dict(blocks[0]["vars"], __gpu_driver_held={"libnvidia-ml1": "535.261.03-1~deb12u1",
                                                           "nvidia-smi": "535.261.03-1~deb12u1"},
                     __gpu_driver_install_specs=["nvidia-smi=535.999.01-*", "libnvidia-ml1=535.999.01-*"],
                     __gpu_driver_fm_packages={"own_version": []}, __gpu_driver_fm=False)
    held = Templar(loader=LOADER, variables=variables).template(rehold["loop"])
    assert sorted(held) == ["libnvidia-ml1", "nvidia-smi"]
    assert rehold["ansible.builtin.dpkg_selections"]["selection"] == "hold"


# The long steps name what they wait for and for how long, from the role's own setting ("%s": its value),
# as Ansible shows the name when the task starts and on each "FAILED - RETRYING" line of a polled wait.
LONG_STEPS = [
    ("gpu_driver", "install.yml", None,
     "Install the driver packages at the pinned version, a few minutes per installed kernel where DKMS builds the module"),
    ("gpu_driver", "kernels.yml", None,
     "Build the module with DKMS for each installed kernel without it (a few minutes per kernel)"),
    ("gpu_driver", "apt-ready.yml", "gpu_driver_apt_lock_timeout", "Wait for apt's lock (up to %s s)"),
    ("gpu_driver", "reboot.yml", "gpu_driver_reboot_timeout",
     "Reboot into the new driver and wait for the node to come back (up to %s s)"),
    ("gpu_mig", "apply.yml", "gpu_mig_reboot_timeout",
     "Reboot for the pending MIG mode and wait for the node to come back (up to %s s)"),
    ("gpu_container_toolkit", "restart.yml", "gpu_container_toolkit_settle_seconds",
     "Make sure it stays up: containerd, watched for %s s"),
    ("gpu_container_toolkit", "restore.yml", "gpu_container_toolkit_settle_seconds",
     "Check it is up again: containerd, watched for %s s"),
    ("gpu_kubelet", "dropin.yml", "gpu_kubelet_settle_seconds", "Make sure kubelet stays up, watched for %s s"),
    ("gpu_kubelet", "dropin.yml", "gpu_kubelet_settle_seconds", "Check kubelet is up again, watched for %s s"),
    ("gpu_device_plugin", "apply.yml", "gpu_device_plugin_wait_timeout",
     "Install NVIDIA's chart and wait for its rollout (up to %s s)"),
    ("gpu_device_plugin", "apply.yml", "gpu_device_plugin_wait_timeout",
     "Wait for the device plugin's DaemonSet to roll out (up to %s s)"),
    ("gpu_device_plugin", "verify.yml", "gpu_device_plugin_wait_timeout",
     "Wait until every GPU node advertises what its hardware has (up to %s s)"),
    ("gpu_dra_driver", "apply.yml", "gpu_dra_driver_wait_timeout",
     "Install NVIDIA's chart and wait for its rollout (up to %s s)"),
    ("gpu_dra_driver", "apply.yml", "gpu_dra_driver_wait_timeout",
     "Wait for the DRA kubelet plugin's DaemonSet to roll out (up to %s s)"),
    ("gpu_dra_driver", "verify.yml", "gpu_dra_driver_wait_timeout",
     "Wait until every DRA node publishes what its hardware has (up to %s s)"),
    ("gpu_smoke_test", "stage.yml", "gpu_smoke_test_timeout",
     "Wait for every pod of the stage to finish, or its node, scheduler or kubelet to give it up (up to %s s)"),
]


@pytest.mark.parametrize("role, tasks_file, setting, shown", LONG_STEPS)
def test_long_steps_name_how_long_they_may_take(role, tasks_file, setting, shown):
    variables = {}
    for part in ("defaults", "vars"):
        path = os.path.join(ROLES, role, part, "main.yml")
        if os.path.exists(path):
            variables.update(load_yaml(LOADER, path) or {})
    variables["__service"] = "containerd"  # restart.yml's and restore.yml's include variable
    tasks = list(all_tasks(load_yaml(LOADER, os.path.join(ROLES, role, "tasks", tasks_file))))
    for value in ([variables[setting], 45] if setting else [None]):
        if setting:
            variables[setting] = value
        templar = Templar(loader=LOADER, variables=variables)
        expected = shown % value if setting else shown
        # Only the names that begin as expected are templated: others may need variables of a run.
        found = [t["name"] for t in tasks if t.get("name", "").split("{{")[0]
                 and expected.startswith(t["name"].split("{{")[0]) and templar.template(t["name"]) == expected]
        assert len(found) == 1, "no single task of %s/%s shown as %r" % (role, tasks_file, expected)
    # ansible-lint's name[template] (its own pattern): a template only at the end of the name, no word after it.
    assert not re.match(r".*\{\{.*\}\}.*\w.*$", found[0])
