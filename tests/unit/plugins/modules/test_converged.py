# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""converged: the record of a node's state, and every kind of difference named.

Files are real files in a scratch folder; dpkg-query and systemctl are STAND-IN
executables printing what the real ones print (the formats the module asks for).
"""

from __future__ import annotations

import json
import os
import re
import stat

import yaml

import pytest

from ansible_collections.gpufleet.nvidia.plugins.modules import converged
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module as run

DPKG = ("containerd\t1.7.24~ds1-6+b4\tinstall ok installed\n"
        "nvidia-container-toolkit\t1.17.8-1\thold ok installed\n"
        "bash\t5.2.37-2+b5\tinstall ok installed\n")


def executable(folder, name, body):
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def show(unit_file, binary, active="active"):
    return ("Id=kubelet.service\nLoadState=loaded\nActiveState=%s\nUnitFileState=enabled\nFragmentPath=%s\n"
            "DropInPaths=\nEnvironmentFiles=\nExecStart={ path=%s ; argv[]=%s ; ignore_errors=no }\n"
            % (active, unit_file, binary, binary))


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A scratch node: bin/ holds the stand-ins, etc/ the files, state/ the records."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "etc" / "conf.d").mkdir(parents=True)
    (tmp_path / "etc" / "main.conf").write_text("a = 1\n")
    (tmp_path / "etc" / "conf.d" / "10-user.conf").write_text("b = 2\n")
    (tmp_path / "kubelet.service").write_text("[Service]\nExecStart=/usr/bin/kubelet\n")
    (tmp_path / "kubelet").write_text("binary\n")
    (tmp_path / "dpkg.txt").write_text(DPKG)
    (tmp_path / "show.txt").write_text(show(tmp_path / "kubelet.service", tmp_path / "kubelet"))
    executable(bindir, "dpkg-query", 'cat "%s"\n' % (tmp_path / "dpkg.txt"))
    executable(bindir, "systemctl", 'cat "%s"\n' % (tmp_path / "show.txt"))
    monkeypatch.setattr(converged.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, *a, **k: str(bindir / name) if (bindir / name).exists()
                        else None)
    return tmp_path


def args(node, **changes):
    base = {"name": "gpu_kubelet", "inputs": "d1", "directory": str(node / "state"), "packages": "nvidia|^containerd",
            "units": ["kubelet"], "paths": [str(node / "etc" / "main.conf"), str(node / "etc" / "conf.d" / "*"),
                                            str(node / "etc" / "absent.conf")]}
    base.update(changes)
    return base


def test_no_record_means_a_full_run(node, capsys):
    result = run(converged, args(node), capsys)
    assert (result["rc_exit"], result["changed"], result["current"], result["recorded"]) == (0, False, False, False)
    assert result["differs"] == ["no record"]


def test_a_node_as_recorded_is_current(node, capsys):
    recorded = run(converged, args(node, record=True), capsys)
    assert (recorded["changed"], recorded["recorded"]) == (False, True)
    record = json.loads((node / "state" / "gpu_kubelet.json").read_text())
    assert stat.S_IMODE(os.stat(node / "state" / "gpu_kubelet.json").st_mode) == 0o600
    assert record["packages"] == {"containerd": "1.7.24~ds1-6+b4 install ok installed",
                                  "nvidia-container-toolkit": "1.17.8-1 hold ok installed"}
    assert record["files"][str(node / "etc" / "absent.conf")] is None
    assert record["units"] == {"kubelet": "LoadState=loaded UnitFileState=enabled ActiveState=active"}
    assert str(node / "kubelet.service") in record["files"] and str(node / "kubelet") in record["files"]
    result = run(converged, args(node), capsys)
    assert (result["current"], result["recorded"], result["differs"]) == (True, True, [])


def test_every_difference_is_named(node, capsys):
    run(converged, args(node, record=True), capsys)
    (node / "etc" / "main.conf").write_text("a = 2\n")
    (node / "etc" / "conf.d" / "10-user.conf").chmod(0o600)
    (node / "etc" / "conf.d" / "20-new.conf").write_text("c = 3\n")
    (node / "etc" / "absent.conf").write_text("")
    (node / "dpkg.txt").write_text(DPKG.replace("hold ok", "install ok"))
    (node / "show.txt").write_text(show(node / "kubelet.service", node / "kubelet", active="failed"))
    (node / "kubelet").write_text("another binary\n")
    result = run(converged, args(node, inputs="d2"), capsys)
    assert result["current"] is False
    assert result["differs"] == [
        "inputs",
        "file %s" % (node / "etc" / "absent.conf"),
        "file %s" % (node / "etc" / "conf.d" / "10-user.conf"),
        "file %s" % (node / "etc" / "conf.d" / "20-new.conf"),
        "file %s" % (node / "etc" / "main.conf"),
        "file %s" % (node / "kubelet"),
        "package nvidia-container-toolkit",
        "unit kubelet",
    ]


def test_a_removed_file_and_package_are_differences(node, capsys):
    run(converged, args(node, record=True), capsys)
    (node / "etc" / "conf.d" / "10-user.conf").unlink()
    (node / "dpkg.txt").write_text(DPKG.replace("containerd\t", "runc\t"))
    result = run(converged, args(node), capsys)
    assert result["differs"] == ["file %s" % (node / "etc" / "conf.d" / "10-user.conf"), "package containerd"]


def test_check_mode_writes_no_record(node, capsys):
    result = run(converged, dict(args(node, record=True), _ansible_check_mode=True), capsys)
    assert (result["changed"], result["recorded"]) == (False, False)
    assert not (node / "state").exists()


def test_a_missing_tool_is_a_difference_not_a_pass(node, capsys, monkeypatch):
    run(converged, args(node, record=True), capsys)
    monkeypatch.setattr(converged.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    result = run(converged, args(node), capsys)
    assert result["current"] is False
    assert "package (dpkg-query)" in result["differs"] and "unit (systemctl)" in result["differs"]


def test_a_damaged_record_means_a_full_run(node, capsys):
    (node / "state").mkdir()
    (node / "state" / "gpu_kubelet.json").write_text("{not json")
    result = run(converged, args(node), capsys)
    assert (result["current"], result["differs"]) == (False, ["no record"])


def test_a_name_that_is_no_file_name_is_refused(node, capsys):
    result = run(converged, args(node, name="../etc/passwd"), capsys)
    assert result["failed"] is True and '"../etc/passwd"' in result["msg"]


def test_systemctl_show_of_several_units():
    text = "Id=a.service\nActiveState=active\n\nId=b.service\nActiveState=inactive\n"
    assert converged.parse_show(text) == [{"Id": "a.service", "ActiveState": "active"},
                                          {"Id": "b.service", "ActiveState": "inactive"}]


def test_excluded_paths_are_not_read(node, capsys):
    excluded = args(node, exclude=["*/10-user.*"], record=True)
    run(converged, excluded, capsys)
    record = json.loads((node / "state" / "gpu_kubelet.json").read_text())
    assert str(node / "etc" / "conf.d" / "10-user.conf") not in record["files"]
    (node / "etc" / "conf.d" / "10-user.conf").write_text("b = 3\n")
    assert run(converged, dict(excluded, record=False), capsys)["current"] is True


@pytest.mark.parametrize("package, watched", [
    ("nvidia-driver", True), ("libnvidia-ml1", True), ("nvidia-open-kernel-dkms", True), ("libcuda1", True),
    ("glx-alternative-nvidia", True), ("linux-headers-6.1.0-40-amd64", True), ("dkms", True), ("nvlsm", True),
    ("nvidia-container-toolkit", False), ("libnvidia-container1", False), ("containerd", False), ("bash", False),
])
def test_the_driver_watches_its_packages_not_the_toolkits(package, watched):
    with open(os.path.join(os.path.dirname(converged.__file__), "..", "..", "roles", "gpu_driver", "vars", "main.yml")) as handle:
        expression = yaml.safe_load(handle)["__gpu_driver_converged_packages"]
    assert bool(re.search(expression, package)) is watched
