# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""converged_digest: what changes the digest of a role's inputs, and what does not."""

from __future__ import annotations

import copy
import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import converged


def facts():
    gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "architecture": "Hopper", "uuid": "GPU-1",
           "pci_bus_id": "00000000:18:00.0", "mig": {"capable": True, "current_mode": "disabled"},
           "ecc": {"volatile_correctable": 0}, "health": {"remapped_rows_pending": False}, "xids": [],
           "power_limit_w": 700.0, "fabric": {"state": "completed", "health": None}}
    return {"vars": {"gpu_kubelet_taints": ["nvidia.com/gpu=present:NoSchedule"]},
            "facts": {"distribution": "Debian", "nvidia": {
                "state": "ok", "driver_version": "580.95.05", "gpu_count": 1, "gpus": [gpu], "nvswitches": [],
                "health": {"status": "healthy", "problems": []}, "xid_events": [], "lost_gpus": [],
                "kernel_log": {"read": True}, "message": "1 GPU, driver 580.95.05"}}}


def digest(data):
    return converged.converged_digest(data, "gpu_kubelet")


def test_the_same_inputs_give_the_same_digest():
    assert digest(facts()) == digest(facts())
    digests = json.loads(digest(facts()))
    assert sorted(digests) == ["code", "facts.distribution", "facts.nvidia", "vars.gpu_kubelet_taints"]
    assert len(digests["code"]) == 64 and all(len(value) == 16 for key, value in digests.items() if key != "code")


def test_a_change_names_its_input():
    changed = facts()
    changed["vars"]["gpu_kubelet_taints"] = []
    before, after = json.loads(digest(facts())), json.loads(digest(changed))
    assert [key for key in sorted(before) if before[key] != after[key]] == ["vars.gpu_kubelet_taints"]


def test_the_role_variables_are_its_argument_specs_options():
    names = converged.role_variables("gpu_kubelet")
    assert names == sorted(names) and "gpu_kubelet_taints" in names and "gpu_kubelet_skip_when_converged" in names
    assert not [name for name in names if not name.startswith("gpu_kubelet_")]
    with pytest.raises(AnsibleFilterError, match="is not a role of this collection"):
        converged.role_variables("../gpu_kubelet")
    with pytest.raises(AnsibleFilterError, match="cannot read the argument spec"):
        converged.role_variables("no_such_role")


@pytest.mark.parametrize("path, value", [
    (("gpus", 0, "ecc", "volatile_correctable"), 3),
    (("gpus", 0, "xids"), [{"xid": 79}]),
    (("gpus", 0, "health", "remapped_rows_pending"), True),
    (("gpus", 0, "power_limit_w"), 450.0),
    (("gpus", 0, "fabric", "health"), {"bandwidth": "degraded"}),
    (("health",), {"status": "unhealthy", "problems": ["xid"]}),
    (("xid_events",), [{"xid": 79}]),
    (("message",), "1 GPU, driver 580.95.05, 1 XID"),
])
def test_readings_of_the_moment_leave_the_digest_alone(path, value):
    changed = facts()
    target = changed["facts"]["nvidia"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert digest(changed) == digest(facts())


@pytest.mark.parametrize("change", [
    lambda data: data["vars"].update(gpu_kubelet_taints=[]),
    lambda data: data["vars"].update(gpu_kubelet_reserved_cpus="0-1"),
    lambda data: data["facts"].update(distribution="Ubuntu"),
    lambda data: data["facts"]["nvidia"].update(driver_version="580.105.08"),
    lambda data: data["facts"]["nvidia"]["gpus"][0]["mig"].update(current_mode="enabled"),
    lambda data: data["facts"]["nvidia"]["gpus"][0].update(name="NVIDIA H200"),
    lambda data: data["facts"]["nvidia"]["gpus"][0]["fabric"].update(state="in progress"),
    lambda data: data["facts"]["nvidia"].update(gpu_count=2),
])
def test_what_a_role_reads_changes_the_digest(change):
    changed = copy.deepcopy(facts())
    change(changed)
    assert digest(changed) != digest(facts())


def test_the_roles_code_is_part_of_the_digest(tmp_path, monkeypatch):
    (tmp_path / "roles" / "gpu_kubelet" / "tasks").mkdir(parents=True)
    (tmp_path / "plugins" / "modules").mkdir(parents=True)
    task = tmp_path / "roles" / "gpu_kubelet" / "tasks" / "main.yml"
    task.write_text("---\n")
    monkeypatch.setattr(converged, "ROOT", str(tmp_path))
    before = digest(facts())
    task.write_text("---\n- name: One more task\n")
    assert digest(facts()) != before
    task.write_text("---\n")
    assert digest(facts()) == before
    (tmp_path / "plugins" / "modules" / "converged.py").write_text("# a new release\n")
    assert digest(facts()) != before


@pytest.mark.parametrize("data, role, message", [
    ("text", "gpu_kubelet", "expects a dict"),
    ({}, "no_such_role", "is not a role of this collection"),
    ({}, "../roles", "is not a role of this collection"),
])
def test_bad_input_is_refused(data, role, message):
    with pytest.raises(AnsibleFilterError, match=message):
        converged.converged_digest(data, role)


@pytest.mark.parametrize("given", ["true", "True", "yes", "on", "1", 1])
def test_a_boolean_given_as_text_is_the_same_input(given):
    # -e gpu_kubelet_skip_when_converged=true hands the role the text "true": the same input as a YAML true, so a
    # run given it on the command line still takes the fast path.
    assert digest(dict(facts(), vars={"gpu_kubelet_gpu_labels": given})) == digest(
        dict(facts(), vars={"gpu_kubelet_gpu_labels": True}))
    assert digest(dict(facts(), vars={"gpu_kubelet_gpu_labels": given})) != digest(
        dict(facts(), vars={"gpu_kubelet_gpu_labels": False}))


def test_only_boolean_settings_are_read_as_booleans():
    # A list or a text setting keeps its value; a boolean setting that is no boolean is refused earlier, not here.
    assert digest(dict(facts(), vars={"gpu_kubelet_service": "true"})) != digest(
        dict(facts(), vars={"gpu_kubelet_service": True}))
    assert digest(dict(facts(), vars={"gpu_kubelet_gpu_labels": "maybe"})) != digest(
        dict(facts(), vars={"gpu_kubelet_gpu_labels": True}))
