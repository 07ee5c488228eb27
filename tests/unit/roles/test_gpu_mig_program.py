# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_mig's gpufleet-mig program against the STAND-IN nvidia-smi of tests/standins, which keeps
MIG state the way the driver does and prints it in the real tool's formats; and what nvml_facts
reads from that stand-in."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import mig
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROGRAM = os.path.join(COLLECTION, "roles", "gpu_mig", "files", "gpufleet_mig.py")
STANDIN = os.path.join(COLLECTION, "tests", "standins", "nvidia_smi.py")
CAPTURE = os.path.join(COLLECTION, "tests", "unit", "plugins", "module_utils", "fixtures", "nvidia-smi",
                       "telegraf-a100-sxm4-80gb-mig-4x1g.20gb-driver-535.54.03-v12.xml")


@pytest.fixture
def node(tmp_path):
    os.makedirs(str(tmp_path / "usr" / "share" / "gpufleet-test"))
    os.makedirs(str(tmp_path / "var" / "lib" / "gpufleet-test"))
    shutil.copy(CAPTURE, str(tmp_path / "usr" / "share" / "gpufleet-test" / "nvidia-smi-q-x.xml"))
    # The capture says 4 GPUs attached and prints one: this node has that one GPU.
    (tmp_path / "usr" / "share" / "gpufleet-test" / "attached-gpus").write_text("1\n")
    return tmp_path


# The stand-in imported as a module, so that its bytecode is compiled once and not at each of the
# hundreds of calls these tests make; isolated (-I) and without site (-S): it needs only the
# standard library.
STANDIN_COMMAND = [sys.executable, "-I", "-S", "-c",
                   "import sys; sys.path.insert(0, %r); import nvidia_smi; sys.exit(nvidia_smi.main(sys.argv[1:]))"
                   % os.path.dirname(STANDIN)]


def env(node):
    # The stand-in as the program runs nvidia-smi: one word, an executable that runs nvidia_smi.py.
    wrapper = node / "nvidia-smi"
    if not wrapper.exists():
        wrapper.write_text("#!/bin/sh\nexec %s \"$@\"\n" % " ".join(shlex.quote(word) for word in STANDIN_COMMAND))
        wrapper.chmod(0o755)
    return dict(os.environ, GPUFLEET_STANDIN_ROOT=str(node), GPUFLEET_NVIDIA_SMI=str(wrapper))


def smi(node, *args):
    result = subprocess.run(STANDIN_COMMAND + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, env=env(node), check=False)
    return result.returncode, result.stdout


def apply(node, layout, *flags):
    result = subprocess.run([sys.executable, PROGRAM, "--layout-json", json.dumps(layout)] + list(flags),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env(node),
                            check=False)
    return result.returncode, json.loads(result.stdout)


def layout_of(*gpu_instances, mig_on=True):
    return {"version": 1, "gpus": [{"index": 0, "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298", "mig": mig_on,
                                    "gpu_instances": [{"profile": p, "compute_instances": c or [p]}
                                                      for p, c in gpu_instances]}]}


BALANCED = layout_of(("3g.40gb", None), ("2g.20gb", None), ("1g.10gb", None), ("1g.10gb", None))


def facts(node):
    """What nvml_facts reads from the stand-in: -q -x, -L and mig -lgip."""
    def run(argv):
        return smi(node, *argv[1:]) + ("",)
    answer = inv.query_nvidia_smi(run, "nvidia-smi")
    inv.add_mig_profiles(run, "nvidia-smi", answer["gpus"])
    return {"state": "ok", "gpus": answer["gpus"]}


def listed(node):
    return smi(node, "-L")[1]


def test_the_layout_is_made_once_and_then_left_alone(node):
    rc, result = apply(node, BALANCED)
    assert rc == 0 and result["status"] == "ok" and result["changed"]
    actions = result["gpus"][0]["actions"]
    # The stand-in places each instance at the lowest free slice, as the driver did in NVIDIA's example:
    # largest first leaves no room for the second 1g.10gb, so the GPU is emptied and another order tried.
    assert actions[:3] == ["nvidia-smi mig -i 0 -dci", "nvidia-smi mig -i 0 -dgi", "nvidia-smi mig -i 0 -cgi 3g.40gb -C"]
    assert actions.count("nvidia-smi mig -i 0 -dgi") >= 2
    before = listed(node)
    assert sorted(line.split()[1] for line in before.splitlines()[1:]) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    rc, again = apply(node, BALANCED)
    assert rc == 0 and not again["changed"] and again["gpus"][0]["actions"] == []
    assert listed(node) == before
    # What nvml_facts reads back from the stand-in is what gpu_mig asked for.
    assert mig.mig_plan(facts(node), "balanced")["changes"] == []


def test_a_layout_that_fits_in_no_order_fails_and_says_so(node):
    rc, result = apply(node, layout_of(("4g.40gb", None), ("4g.40gb", None)))
    assert rc == 2 and "no order of creation fits the layout on GPU 0" in result["message"]


def test_media_extension_instances_settle(node):
    layout = layout_of(("1g.10gb+me", None), ("3g.40gb", None), ("2g.20gb", None))
    rc, result = apply(node, layout)
    assert rc == 0, result
    # -L names the +me instance's device 1g.10gb; -lgi says 1g.10gb+me.
    assert "MIG 1g.10gb " in listed(node) and "MIG 1g.10gb+me" in smi(node, "mig", "-lgi")[1]
    rc, again = apply(node, layout)
    assert rc == 0 and not again["changed"]
    gpu = facts(node)["gpus"][0]
    assert sorted(d["gpu_instance_profile"] for d in gpu["mig"]["devices"]) == ["1g.10gb+me", "2g.20gb", "3g.40gb"]
    assert mig.mig_plan(facts(node), [{"instances": ["1g.10gb+me", "3g.40gb", "2g.20gb"]}])["changes"] == []
    assert len(mig.mig_plan(facts(node), [{"instances": ["1g.10gb", "3g.40gb", "2g.20gb"]}])["changes"]) == 1


def test_a_dry_run_says_what_it_would_do_and_changes_nothing(node):
    apply(node, BALANCED)
    before = listed(node)
    rc, result = apply(node, layout_of(("7g.80gb", None)), "--dry-run")
    assert rc == 0 and result["gpus"][0]["actions"] == [
        "nvidia-smi mig -i 0 -dci", "nvidia-smi mig -i 0 -dgi", "nvidia-smi mig -i 0 -cgi 7g.80gb -C"]
    assert result["gpus"][0]["after"] == "MIG enabled: 7g.80gb"
    assert listed(node) == before


def test_compute_instances_are_made_inside_their_gpu_instance(node):
    rc, result = apply(node, layout_of(("4g.40gb", None), ("3g.40gb", ["1c.3g.40gb", "2c.3g.40gb"])))
    assert rc == 0, result
    assert "nvidia-smi mig -i 0 -gi 2 -cci 1c.3g.40gb,2c.3g.40gb" in result["gpus"][0]["actions"]
    out = smi(node, "mig", "-lci")[1]
    assert "MIG 1c.3g.40gb" in out and "MIG 2c.3g.40gb" in out
    gpu = facts(node)["gpus"][0]
    groups = sorted(sorted(d["profile"] for d in gpu["mig"]["devices"] if d["gpu_instance_id"] == gi)
                    for gi in {d["gpu_instance_id"] for d in gpu["mig"]["devices"]})
    assert groups == [["1c.3g.40gb", "2c.3g.40gb"], ["4g.40gb"]]


def test_a_gpu_with_processes_is_not_touched(node):
    apply(node, BALANCED)
    before = listed(node)
    (node / "var" / "lib" / "gpufleet-test" / "processes.json").write_text(
        '[{"pid": 4242, "name": "python3", "gpu": 0}]')
    rc, result = apply(node, layout_of(("7g.80gb", None)))
    assert rc == 3 and result["status"] == "busy" and not result["changed"]
    assert "GPU 0 runs 1 process(es) (4242 python3)" in result["message"]
    assert listed(node) == before


def test_a_mode_change_held_by_a_client_waits_for_a_reset_or_a_reboot(node):
    held = node / "var" / "lib" / "gpufleet-test" / "mig-held"
    held.write_text("")
    rc, result = apply(node, layout_of(mig_on=False), "--allow-reset")
    # The capture's GPU is in MIG mode: turning it off stays pending while another client holds it,
    # and the reset is refused too.
    assert rc == 4 and result["status"] == "reset_needed"
    assert "MIG mode on GPU 0 is disabled from the next GPU reset" in result["message"]
    assert "the reset was refused" in result["message"]
    assert "<pending_mig>Disabled</pending_mig>" in smi(node, "-q", "-x")[1]
    # Once the client has gone, a reset makes it effective.
    held.unlink()
    rc, result = apply(node, layout_of(mig_on=False), "--allow-reset")
    assert rc == 0 and "nvidia-smi -i 0 -r" in result["gpus"][0]["actions"]
    assert "<current_mig>Disabled</current_mig>" in smi(node, "-q", "-x")[1]
    # Without a reset allowed, a pending enable takes effect at the next boot, and the layout is made then.
    held.write_text("")
    rc, result = apply(node, BALANCED)
    assert rc == 4 and "nvidia-smi -i 0 -r" not in result["gpus"][0]["actions"]
    shutil.rmtree(str(node / "run"))
    rc, result = apply(node, BALANCED)
    assert rc == 0 and result["gpus"][0]["after"] == "MIG enabled: 1g.10gb, 1g.10gb, 2g.20gb, 3g.40gb"


def test_one_gpu_that_cannot_be_done_leaves_the_others_to_be_done(node):
    layout = layout_of(("7g.80gb", None))
    layout["gpus"].insert(0, {"index": 3, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "mig": True,
                              "gpu_instances": []})
    rc, result = apply(node, layout)
    assert rc == 2 and result["status"] == "error"
    assert [row["after"] for row in result["gpus"]] == [None, "MIG enabled: 7g.80gb"]


def test_instances_do_not_survive_a_reboot_and_the_mode_does(node):
    apply(node, BALANCED)
    shutil.rmtree(str(node / "run"))
    assert listed(node).count("MIG ") == 0
    assert "<current_mig>Enabled</current_mig>" in smi(node, "-q", "-x")[1]
    rc, result = apply(node, BALANCED)
    assert rc == 0 and result["changed"] and listed(node).count("MIG ") == 4


def test_a_gpu_the_layout_names_but_the_node_lacks_is_an_error(node):
    layout = layout_of(("7g.80gb", None))
    layout["gpus"][0]["uuid"] = "GPU-00000000-0000-0000-0000-000000000000"
    rc, result = apply(node, layout)
    assert rc == 2 and "which nvidia-smi does not list" in result["message"] and not result["changed"]
    rc, result = apply(node, {"gpus": []})
    assert rc == 2 and "not a gpufleet MIG layout" in result["message"]


def test_the_standin_prints_the_formats_of_the_real_tool(node):
    apply(node, BALANCED)
    rc, out = smi(node, "mig", "-lgip")
    lines = out.splitlines()
    assert rc == 0 and {len(line) for line in lines} == {79}
    assert lines[5] == "|   0  MIG 1g.10gb       19     0/7        9.75       No     14     0     0   |"
    profiles = inv.parse_smi_profiles(out)[0]
    assert [(p["name"], p["id"], p["instances_total"]) for p in profiles] == [
        ("1g.10gb", 19, 7), ("1g.10gb+me", 20, 1), ("1g.20gb", 15, 4), ("2g.20gb", 14, 3), ("3g.40gb", 9, 2),
        ("4g.40gb", 5, 1), ("7g.80gb", 0, 1)]
    assert {len(line) for line in smi(node, "mig", "-lgi")[1].splitlines()} == {57}
    assert {len(line) for line in smi(node, "mig", "-lci")[1].splitlines()} == {70}
    assert smi(node, "mig", "-cgi", "5g.40gb")[1].splitlines() == [
        "Unable to create a GPU instance on GPU  0 using profile 5g.40gb: Invalid Argument",
        "Failed to create GPU instances: Invalid Argument"]
    assert inv.parse_smi_list(listed(node))[0]["mig_devices"][0]["profile"] == "3g.40gb"


def test_profiles_parse_from_both_table_widths():
    wide = ("|   0  MIG 1g.18gb         19     5/7        16.00      No     16     1     0   |\n"
            "|                                                               1     1     0   |\n"
            "|   0  MIG 7g.141gb         0     0/1        140.00     No     132    7     0   |\n")
    assert inv.parse_smi_profiles(wide) == {0: [
        {"name": "1g.18gb", "id": 19, "instances_free": 5, "instances_total": 7, "memory_gib": 16.0},
        {"name": "7g.141gb", "id": 0, "instances_free": 0, "instances_total": 1, "memory_gib": 140.0}]}
    assert inv.parse_smi_profiles("No MIG-enabled devices found.\n") == {}


def test_the_standin_prints_the_capture_as_it_is_unless_told_the_gpu_count(node):
    os.remove(str(node / "usr" / "share" / "gpufleet-test" / "attached-gpus"))
    with open(CAPTURE, encoding="utf-8") as handle:
        captured = handle.read()
    printed = smi(node, "-q", "-x")[1]
    assert "<attached_gpus>4</attached_gpus>" in printed

    def without_mig_devices(text):
        return re.sub(r"<mig_devices>.*?</mig_devices>", "", text, flags=re.S)

    # Only the MIG devices are the stand-in's own (none yet, as after a boot).
    assert without_mig_devices(printed) == without_mig_devices(captured)
    assert "<mig_devices>None</mig_devices>" in printed
