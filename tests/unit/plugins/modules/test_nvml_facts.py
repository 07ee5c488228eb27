# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module shell: arguments, one exit path, never changed, failures carry rc/stdout/stderr.

nvidia-smi is a real executable on PATH that prints a real capture (or the
words a real nvidia-smi prints without a driver), run through run_command.
"""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.modules import nvml_facts
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module as run

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "nvidia-smi")


def fake_nvidia_smi(directory, body):
    path = directory / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_module(args, capsys):
    return run(nvml_facts, args, capsys)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """The fake tool is the only one the module finds; no pynvml importable."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setattr(nvml_facts.SystemProbe, "pynvml", lambda self: None)
    monkeypatch.setattr(nvml_facts.SystemProbe, "nvml_library_present", lambda self: False)
    monkeypatch.setattr(nvml_facts.SystemProbe, "pci_devices", lambda self: [])
    monkeypatch.setattr(nvml_facts.SystemProbe, "kernel_module_version", lambda self: None)
    monkeypatch.setattr(nvml_facts.AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **k: str(bindir / name) if (bindir / name).exists() else None)
    return bindir


def test_reads_nvidia_smi_and_never_changes(host, capsys):
    capture = os.path.abspath(os.path.join(FIXTURES, "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"))
    fake_nvidia_smi(host, 'cat "%s"\n' % capture)
    result = run_module({}, capsys)
    facts = result["ansible_facts"]["nvidia"]
    assert result["rc_exit"] == 0
    assert result["changed"] is False
    assert facts["source"] == "nvidia_smi"
    assert facts["state"] == "ok"
    assert facts["gpu_count"] == 2
    assert [gpu["name"] for gpu in facts["gpus"]] == ["NVIDIA RTX A5000", "NVIDIA RTX A5000"]


def test_driver_not_loaded_is_a_state(host, capsys):
    fake_nvidia_smi(host, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n")
    result = run_module({"source": "nvidia_smi"}, capsys)
    facts = result["ansible_facts"]["nvidia"]
    assert result["rc_exit"] == 0
    assert (facts["state"], facts["driver_installed"], facts["driver_loaded"]) == ("no_gpu", True, False)
    assert "couldn't communicate with the NVIDIA driver" in facts["message"]


def test_garbage_fails_with_rc_stdout_stderr(host, capsys):
    fake_nvidia_smi(host, "echo '<html>not xml'\necho 'oops' >&2\n")
    result = run_module({}, capsys)
    assert result["rc_exit"] == 1
    assert result["failed"] is True
    assert result["rc"] == 0
    assert result["stdout"].startswith("<html>")
    assert result["stderr"].strip() == "oops"
    assert "did not print XML" in result["msg"]


def test_nvidia_smi_runs_in_the_c_locale(host, capsys, tmp_path):
    seen = tmp_path / "env"
    capture = os.path.abspath(os.path.join(FIXTURES, "telegraf-tesla-t4-aws-driver-515.105.01-v11.xml"))
    fake_nvidia_smi(host, 'echo "$LC_ALL $LANG" > "%s"\ncat "%s"\n' % (seen, capture))
    result = run_module({}, capsys)
    assert result["ansible_facts"]["nvidia"]["state"] == "ok"
    assert seen.read_text().split() == ["C", "C"]


def test_bad_source_names_the_value(host, capsys):
    result = run_module({"source": "dcgm"}, capsys)
    assert result["failed"] is True
    assert "source" in result["msg"] and "dcgm" in result["msg"]


KERNEL_LOG = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "kernel-log", "xid-lines.log")


def test_kernel_log_path_and_unhealthy_xids_reach_the_facts(host, capsys):
    capture = os.path.abspath(os.path.join(FIXTURES, "telegraf-2x-rtx-a5000-driver-590.44.01-v13.xml"))
    fake_nvidia_smi(host, 'cat "%s"\n' % capture)
    result = run_module({"kernel_log_path": os.path.abspath(KERNEL_LOG), "unhealthy_xids": ["79", 62]}, capsys)
    facts = result["ansible_facts"]["nvidia"]
    assert result["changed"] is False
    assert facts["kernel_log"] == {"source": "file", "read": True, "message": None}
    assert len(facts["xid_events"]) == 16
    # None of the recorded lines is of the A5000 pair's buses (81:00, c1:00).
    assert [gpu["xids"] for gpu in facts["gpus"]] == [[], []]
    assert sorted(set(e["xid"] for e in facts["xid_events"] if e["fatal"])) == [62, 79]
    assert (facts["state"], facts["health"]["status"]) == ("ok", "unhealthy")


def test_a_kernel_log_that_cannot_be_read_is_a_fact(host, capsys):
    capture = os.path.abspath(os.path.join(FIXTURES, "telegraf-tesla-t4-aws-driver-515.105.01-v11.xml"))
    fake_nvidia_smi(host, 'cat "%s"\n' % capture)
    result = run_module({}, capsys)
    facts = result["ansible_facts"]["nvidia"]
    # The fake PATH has neither journalctl nor dmesg.
    assert facts["kernel_log"] == {"source": None, "read": False, "message": "journalctl not found; dmesg not found"}
    assert (facts["state"], facts["health"]["status"]) == ("ok", "healthy")


def test_attached_gpus_beyond_the_printed_ones_say_gpu_lost(host, capsys):
    capture = os.path.abspath(os.path.join(FIXTURES, "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml"))
    fake_nvidia_smi(host, 'case "$*" in *-x*) cat "%s" ;; *) exit 2 ;; esac\n' % capture)
    result = run_module({"kernel_log": "none"}, capsys)
    facts = result["ansible_facts"]["nvidia"]
    assert result["rc_exit"] == 0
    assert (facts["state"], len(facts["lost_gpus"]), facts["gpu_count"]) == ("gpu_lost", 3, 1)
    assert facts["kernel_log"]["read"] is False


def test_bad_unhealthy_xids_are_refused_by_the_argument_spec(host, capsys):
    result = run_module({"unhealthy_xids": ["seventy-nine"]}, capsys)
    assert result["failed"] is True
    assert "unhealthy_xids" in result["msg"]
