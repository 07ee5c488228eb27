# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.nvidia.internal.converged's action: the comparison is made with this run's NVIDIA facts.

The node is played by a recorder of the module calls the action makes (nvml_facts, converged):
what is under test is which calls it makes, with which inputs, and what it returns."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task
from ansible_collections.gpufleet.nvidia.plugins.action.internal import converged
from ansible_collections.gpufleet.nvidia.plugins.filter.internal.converged import converged_digest

T4 = {"state": "ok", "driver_version": "550.54.15", "gpus": [{"name": "Tesla T4", "uuid": "GPU-1", "ecc": {"a": 1}}]}
V100 = {"state": "ok", "driver_version": "550.54.15", "gpus": [{"name": "Tesla V100-SXM2-16GB", "uuid": "GPU-1"}]}


def digests(nvidia):
    return converged_digest({"vars": {"gpu_kubelet_taints": []}, "facts": {"kernel": "6.1.0", "nvidia": nvidia}},
                            "gpu_kubelet")


def run(args, task_vars, node_facts=None, read_fails=False):
    """Run the action; return its result and the module calls it made, as (name, args)."""
    calls = []

    def execute(module_name=None, module_args=None, task_vars=None):
        calls.append((module_name, dict(module_args or {})))
        if module_name == converged.NVML_MODULE:
            if read_fails:
                return {"failed": True, "msg": "nvidia-smi: not found", "warnings": ["a warning of the failed read"]}
            return {"changed": False, "ansible_facts": {"nvidia": node_facts or T4}, "warnings": ["a warning of the read"]}
        return {"changed": False, "current": True, "recorded": True, "differs": [], "notices": [],
                "record_file": "/var/lib/gpufleet/converged/gpu_kubelet.json"}

    task = Task()
    task.args = args
    action = converged.ActionModule(task, connection=mock.MagicMock(), play_context=mock.MagicMock(),
                                    loader=mock.MagicMock(), templar=mock.MagicMock(), shared_loader_obj=None)
    with mock.patch.object(action, "_execute_module", side_effect=execute):
        result = action.run(task_vars=task_vars)
    return result, calls


def base(**extra):
    return dict({"name": "gpu_kubelet", "read_nvidia_facts": True, "inputs": digests(V100), "units": ["kubelet"]},
                **extra)


def test_facts_no_task_of_this_run_read_are_read_first_and_their_digest_replaces_the_cached_ones():
    # The play started with a fact cache's facts (another GPU): the inputs were made from them.
    result, calls = run(base(), {"ansible_facts": {"nvidia": V100}})
    assert [name for name, dummy in calls] == [converged.NVML_MODULE, converged.MODULE]
    sent = json.loads(calls[1][1]["inputs"])
    assert sent == json.loads(digests(T4))
    assert sent["facts.nvidia"] != json.loads(digests(V100))["facts.nvidia"]
    assert "read_nvidia_facts" not in calls[1][1] and "compare" not in calls[1][1]
    assert result["ansible_facts"] == {"nvidia": T4}
    assert result["current"] is True and "a warning of the read" in result["warnings"]


def test_facts_read_by_an_earlier_task_of_this_run_are_not_read_again():
    for marker in ("__gpufleet_nvml_run", "__gpu_mig_nvml_run", "__gpu_driver_converged"):
        result, calls = run(base(), {"ansible_facts": {"nvidia": V100},
                                     marker: {"changed": False, "ansible_facts": {"nvidia": V100}}})
        assert [name for name, dummy in calls] == [converged.MODULE], marker
        assert calls[0][1]["inputs"] == digests(V100)
        assert "ansible_facts" not in result


@pytest.mark.parametrize("marker", [
    {"__gpufleet_nvml_run": {"unreachable": True, "msg": "Failed to connect"}},
    {"__gpufleet_nvml_run": {"failed": True, "msg": "boom"}},
    {"__gpu_kubelet_nvml_run": {"skipped": True}},
    # A comparison that found the facts read already holds none of its own.
    {"__gpu_driver_converged": {"current": True}},
    {"__gpufleet_nvml_run_old": {"ansible_facts": {"nvidia": V100}}},
])
def test_a_registered_result_without_facts_is_no_read_of_this_run(marker):
    dummy, calls = run(base(), dict(marker, ansible_facts={"nvidia": V100}))
    assert [name for name, dummy in calls] == [converged.NVML_MODULE, converged.MODULE]


def test_inputs_ansible_core_handed_over_as_a_dict_get_the_facts_too():
    dummy, calls = run(base(inputs=json.loads(digests(V100))), {})
    assert json.loads(calls[1][1]["inputs"]) == json.loads(digests(T4))


@pytest.mark.parametrize("inputs", ["0123456789abcdef", {"vars.gpu_kubelet_taints": "0123456789abcdef"},
                                    '{"vars.gpu_kubelet_taints":"0123456789abcdef"}'])
def test_inputs_without_the_facts_digest_are_kept_as_they_are(inputs):
    # The record is written with the same inputs: a digest added here would never match it.
    result, calls = run(base(inputs=inputs), {})
    assert [name for name, dummy in calls] == [converged.NVML_MODULE, converged.MODULE]
    assert calls[1][1]["inputs"] == inputs and result["ansible_facts"] == {"nvidia": T4}


def test_facts_the_modules_discovered_are_kept_beside_the_nvidia_facts():
    interpreter = {"discovered_interpreter_python": "/usr/bin/python3"}
    result, dummy = run(base(), {}, node_facts=dict(T4))
    assert result["ansible_facts"] == {"nvidia": T4}
    with mock.patch.object(converged.ActionModule, "_execute_module",
                           side_effect=[{"ansible_facts": dict(interpreter, nvidia=T4)},
                                        {"current": True, "differs": [], "ansible_facts": interpreter}]):
        task = Task()
        task.args = base()
        action = converged.ActionModule(task, connection=mock.MagicMock(), play_context=mock.MagicMock(),
                                        loader=mock.MagicMock(), templar=mock.MagicMock(), shared_loader_obj=None)
        result = action.run(task_vars={})
    assert result["ansible_facts"] == dict(interpreter, nvidia=T4) and result["current"] is True


def test_no_comparison_only_reads_the_facts_and_says_not_current():
    result, calls = run(base(compare=False, inputs=""), {})
    assert [name for name, dummy in calls] == [converged.NVML_MODULE]
    assert (result["current"], result["differs"], result["ansible_facts"]) == (False, [], {"nvidia": T4})
    # Facts of this run already: nothing at all on the node.
    result, calls = run(base(compare=False, inputs=""), {"__gpufleet_nvml_run": {"ansible_facts": {"nvidia": T4}}})
    assert calls == [] and result["current"] is False and not result.get("failed")


def test_a_read_that_fails_fails_the_task_before_any_comparison():
    result, calls = run(base(), {}, read_fails=True)
    assert [name for name, dummy in calls] == [converged.NVML_MODULE]
    assert result["failed"] is True and "nvidia-smi: not found" in result["msg"]
    assert "gpufleet.nvidia.nvml_facts" in result["msg"] and "ansible_facts" not in result
    assert result["warnings"] == ["a warning of the failed read"]


def test_recording_and_a_plain_comparison_never_read_the_facts():
    dummy, calls = run(base(record=True), {})
    assert [name for name, dummy in calls] == [converged.MODULE] and calls[0][1]["record"] is True
    dummy, calls = run(base(read_nvidia_facts=False), {})
    assert [(name, module_args["inputs"]) for name, module_args in calls] == [(converged.MODULE, digests(V100))]


def test_an_option_that_is_not_a_boolean_is_refused_by_name():
    with pytest.raises(AnsibleActionFail) as caught:
        run(base(compare="sometimes"), {})
    assert 'compare must be a boolean, got "sometimes"' in str(caught.value)
