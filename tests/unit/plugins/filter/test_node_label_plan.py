# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_label_plan: which GPU hosts site.yml labels, over facts built by nvml_facts' own code."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.internal.node_labels import (
    NOT_GATHERED, FilterModule, node_label_plan, node_labels)
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_nvml import H100_PCI


def nvml_facts(reading):
    return inv.summarise(inv.query_nvml(readings.RecordedNvml(reading)), [], driver_installed=True, module_version=None)


def row(host, facts, **extra):
    return dict({"host": host, "node": host, "facts": facts, "gpu_labels": True, "node_labels": {}}, **extra)


def by_host(plan):
    return ({entry["host"]: entry for entry in plan["label"]}, {entry["host"]: entry for entry in plan["skip"]})


def test_host_without_facts_is_skipped_and_the_others_labelled():
    # site.yml used to run node_labels on every host in gpu_nodes: a host outside --limit has no
    # ansible_facts['nvidia'] (it passed {}), node_labels raised, and no node got its labels.
    with pytest.raises(AnsibleFilterError):
        node_labels({})
    plan = node_label_plan([row("gpu-a", nvml_facts(readings.H100)), row("gpu-b", None)])
    label, skip = by_host(plan)
    assert list(label) == ["gpu-a"]
    assert label["gpu-a"]["labels"] == node_labels(nvml_facts(readings.H100))
    assert skip == {"gpu-b": {"host": "gpu-b", "node": "gpu-b", "reason": NOT_GATHERED}}
    assert "--limit" in NOT_GATHERED


@pytest.mark.parametrize("reading,pci,state", [
    (readings.NO_DEVICES, [], "no_gpu"),
    (readings.DRIVER_NOT_LOADED_HOST, [H100_PCI], "driver_not_loaded"),
    (readings.MISMATCH_HOST, [H100_PCI], "driver_mismatch"),
    (readings.GPU_LOST, [], "gpu_lost"),
])
def test_host_in_another_state_is_skipped_with_its_state_and_message(reading, pci, state):
    facts = inv.summarise(inv.query_nvml(readings.RecordedNvml(reading)), pci, driver_installed=True,
                          module_version=None)
    assert facts["state"] == state
    skip = by_host(node_label_plan([row("gpu-a", facts, node_labels={"pool": "training"})]))[1]
    assert skip["gpu-a"]["reason"].startswith("NVIDIA state is %s" % state)
    if facts.get("message"):
        assert facts["message"] in skip["gpu-a"]["reason"]


def test_labels_are_what_gpu_kubelet_gives_kubelet_user_labels_win():
    facts = nvml_facts(readings.H100)
    extra = {"pool": "training", "nvidia.com/gpu.product": "renamed"}
    label, skip = by_host(node_label_plan([row("gpu-a", facts, node="gpu-a.example", node_labels=extra)]))
    assert not skip
    expected = dict(node_labels(facts))
    expected.update(extra)
    assert label["gpu-a"] == {"host": "gpu-a", "node": "gpu-a.example", "labels": expected,
                              "name": "gpu-a.example", "patch": {"metadata": {"labels": expected}}}


def test_gpu_labels_off_keeps_only_the_users():
    label = by_host(node_label_plan([row("gpu-a", nvml_facts(readings.H100), gpu_labels="false",
                                         node_labels={"pool": "training"})]))[0]
    assert label["gpu-a"]["labels"] == {"pool": "training"}


def test_nothing_to_set_is_a_reason_not_an_empty_patch():
    skip = by_host(node_label_plan([row("gpu-a", nvml_facts(readings.H100), gpu_labels=False)]))[1]
    assert skip["gpu-a"]["reason"] == ("no labels to set: gpu_kubelet_gpu_labels is false and "
                                       "gpu_kubelet_node_labels is empty")


@pytest.mark.parametrize("facts,words", [
    ({}, "is not what gpufleet.nvidia.nvml_facts returns (keys: )"),
    ({"state": "ok"}, "(keys: state)"),
    ("ok", "(str)"),
])
def test_facts_that_are_not_nvml_facts_output_skip_that_host_only(facts, words):
    plan = node_label_plan([row("gpu-a", facts), row("gpu-b", nvml_facts(readings.H100))])
    label, skip = by_host(plan)
    assert list(label) == ["gpu-b"]
    assert words in skip["gpu-a"]["reason"]


@pytest.mark.parametrize("extra,words", [
    ({"node_labels": ["pool=training"]}, "gpu_kubelet_node_labels of gpu-a is a list"),
    ({"gpu_labels": "maybe"}, "gpu_kubelet_gpu_labels of gpu-a is 'maybe'"),
])
def test_bad_variables_of_one_host_skip_that_host_only(extra, words):
    plan = node_label_plan([row("gpu-a", nvml_facts(readings.H100), **extra), row("gpu-b", nvml_facts(readings.H100))])
    label, skip = by_host(plan)
    assert list(label) == ["gpu-b"]
    assert words in skip["gpu-a"]["reason"]


def test_node_defaults_to_the_host_and_order_is_kept():
    hosts = [{"host": name, "facts": nvml_facts(readings.H100)} for name in ("gpu-c", "gpu-a", "gpu-b")]
    plan = node_label_plan(hosts)
    assert [(entry["host"], entry["node"]) for entry in plan["label"]] == [
        ("gpu-c", "gpu-c"), ("gpu-a", "gpu-a"), ("gpu-b", "gpu-b")]
    assert node_label_plan([]) == {"label": [], "skip": [], "same": []}


@pytest.mark.parametrize("value,words", [
    ({"host": "gpu-a"}, "expects a list of hosts"),
    (["gpu-a"], "each host as a dict"),
    ([{"facts": None}], "each host as a dict"),
])
def test_wrong_input_names_what_it_got(value, words):
    with pytest.raises(AnsibleFilterError) as caught:
        node_label_plan(value)
    assert words in str(caught.value)


def test_filter_is_registered():
    assert FilterModule().filters()["node_label_plan"] is node_label_plan


def test_with_the_nodes_only_what_differs_is_sent():
    facts = nvml_facts(readings.H100)
    labels = node_labels(facts)
    nodes = [{"metadata": {"name": "gpu-a", "labels": dict(labels, team="ml")}},              # converged
             {"metadata": {"name": "gpu-b", "labels": dict(labels, **{"nvidia.com/gpu.count": "7"})}},  # drifted
             {"metadata": {"name": "gpu-c"}}]                                                  # joined, unlabelled
    plan = node_label_plan([row("gpu-a", facts), row("gpu-b", facts), row("gpu-c", facts), row("gpu-d", facts)],
                           nodes)
    assert plan["same"] == [{"host": "gpu-a", "node": "gpu-a"}]
    label, skip = by_host(plan)
    assert label["gpu-b"]["labels"] == {"nvidia.com/gpu.count": labels["nvidia.com/gpu.count"]}
    # what --diff shows: the label's value now, and the patch
    assert label["gpu-b"]["before"] == {"metadata": {"labels": {"nvidia.com/gpu.count": "7"}}}
    assert label["gpu-c"]["before"] == {"metadata": {"labels": {}}}
    assert label["gpu-c"]["labels"] == labels
    assert skip == {"gpu-d": {"host": "gpu-d", "node": "gpu-d", "reason": "not in the cluster (no Node named gpu-d)"}}
    # without the nodes, every labelled host is sent all its labels, as before
    assert [e["host"] for e in node_label_plan([row("gpu-a", facts)])["label"]] == ["gpu-a"]
