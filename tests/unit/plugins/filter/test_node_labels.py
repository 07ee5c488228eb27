# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_labels over facts built from real captures and NVML readings."""

from __future__ import annotations

import os
import re

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.internal.node_labels import label_value, node_labels
from ansible_collections.gpufleet.nvidia.plugins.filter.node_labels import FilterModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "nvidia-smi")
XML_FILES = sorted(name for name in os.listdir(FIXTURES) if name.endswith(".xml"))
# Kubernetes label value: at most 63 characters, alphanumeric at both ends.
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def smi_facts(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        parsed = inv.parse_smi_xml(handle.read())
    answer = dict(parsed, outcome="ok", message=None)
    return inv.summarise(answer, [], driver_installed=True, module_version=None)


def nvml_facts(reading):
    return inv.summarise(inv.query_nvml(readings.RecordedNvml(reading)), [], driver_installed=True, module_version=None)


def test_h100_through_nvml():
    assert node_labels(nvml_facts(readings.H100)) == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver-version.major": "590",
        "nvidia.com/cuda.driver-version.minor": "48",
        "nvidia.com/cuda.driver-version.revision": "01",
        "nvidia.com/cuda.driver-version.full": "590.48.01",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "1",
        "nvidia.com/cuda.runtime-version.full": "13.1",
        "nvidia.com/mig.capable": "true",
    }


def test_ada_family_is_ada_lovelace_like_gpu_feature_discovery():
    labels = node_labels(nvml_facts(readings.RTX_4080_SUPER))
    assert labels["nvidia.com/gpu.family"] == "ada-lovelace"
    assert labels["nvidia.com/gpu.compute.minor"] == "9"
    assert labels["nvidia.com/mig.capable"] == "false"


def test_two_component_driver_version_has_an_empty_revision():
    labels = node_labels(nvml_facts(readings.QUADRO_P400_OLD_DRIVER))
    assert labels["nvidia.com/cuda.driver-version.revision"] == ""
    assert labels["nvidia.com/cuda.driver-version.full"] == "418.43"
    assert labels["nvidia.com/gpu.family"] == "pascal"


def test_nvidia_smi_facts_have_no_compute_labels():
    labels = node_labels(smi_facts("telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"))
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["nvidia.com/gpu.memory"] == "81920"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.2"
    assert not any(key.startswith(("nvidia.com/gpu.compute", "nvidia.com/gpu.family")) for key in labels)


def test_lost_gpu_is_not_counted():
    labels = node_labels(nvml_facts(readings.GPU_LOST))
    assert labels["nvidia.com/gpu.count"] == "3"


@pytest.mark.parametrize("name", XML_FILES)
def test_every_capture_gives_valid_label_values(name):
    labels = node_labels(smi_facts(name))
    assert labels["nvidia.com/gpu.present"] == "true"
    for key, value in labels.items():
        assert key.startswith("nvidia.com/")
        assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)


@pytest.mark.parametrize("name,value", [
    ("NVIDIA GeForce RTX 3060 Laptop GPU", "NVIDIA-GeForce-RTX-3060-Laptop-GPU"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"),
    ("GRID P4-1Q", "GRID-P4-1Q"),
    ("NVIDIA A100-SXM4-80GB (MIG)", "NVIDIA-A100-SXM4-80GB-MIG"),
    ("  Tesla  K80  ", "Tesla-K80"),
    ("Quadro RTX 8000/PCIe", "Quadro-RTX-8000PCIe"),
    ("X" * 70, "X" * 63),
])
def test_label_value(name, value):
    assert label_value(name) == value


def test_host_without_gpus_gets_no_labels():
    assert node_labels(nvml_facts(readings.NO_DEVICES)) == {}
    answer = inv.query_nvml(readings.RecordedNvml(readings.DRIVER_NOT_LOADED_HOST))
    assert node_labels(inv.summarise(answer, [], driver_installed=True, module_version=None)) == {}


@pytest.mark.parametrize("value,words", [
    ("not facts", "got str"),
    ({"state": "ok"}, "no 'gpus' key"),
    (None, "got NoneType"),
])
def test_wrong_input_names_what_it_got(value, words):
    with pytest.raises(AnsibleFilterError) as caught:
        node_labels(value)
    assert words in str(caught.value)


def test_filter_is_registered():
    assert FilterModule().filters()["node_labels"] is node_labels


@pytest.mark.parametrize("capability,expected", [
    ("3.7", "kepler"), ("6.1", "pascal"), ("7.0", "volta"), ("7.5", "turing"), ("8.0", "ampere"),
    ("8.6", "ampere"), ("8.9", "ada-lovelace"), ("9.0", "hopper"), ("10.0", "blackwell"), ("4.0", "undefined"),
])
def test_family_table(capability, expected):
    facts = nvml_facts(readings.H100)
    facts["gpus"][0]["compute_capability"] = capability
    assert node_labels(facts)["nvidia.com/gpu.family"] == expected
