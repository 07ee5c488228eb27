# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A unit's file and drop-ins on disk, as systemd loads them at its next reload (systemd.unit(5)).

Each test lays the files out under a scratch folder that stands for the node's /.
"""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import systemd_units as su
from ansible_collections.gpufleet.nvidia.plugins.modules.internal import systemd_unit_files
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module as run


def lay_out(root, files):
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            os.symlink("/dev/null", str(target))
        else:
            target.write_text(content)


KUBEADM = {
    "/usr/lib/systemd/system/kubelet.service": "[Service]\nExecStart=/usr/bin/kubelet\n",
    "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet $A\n",
}


def test_kubeadms_layout(tmp_path):
    lay_out(tmp_path, KUBEADM)
    assert su.unit_files_on_disk("kubelet", root=str(tmp_path)) == (
        "/usr/lib/systemd/system/kubelet.service", ["/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"])


def test_drop_ins_in_name_order_whichever_folder_and_the_first_folder_wins_a_name(tmp_path):
    lay_out(tmp_path, dict(KUBEADM, **{
        "/etc/systemd/system/kubelet.service.d/90-gpu.conf": "[Service]\n",
        "/etc/systemd/system/kubelet.service.d/60-user.conf": "[Service]\n",
        "/run/systemd/system/kubelet.service.d/10-kubeadm.conf": "[Service]\n",   # over /usr/lib's of that name
        "/usr/lib/systemd/system/service.d/10-timeout-abort.conf": "[Service]\n",  # type-wide
        "/etc/systemd/system/kubelet.service.d/notes.txt": "not a drop-in\n",
        "/etc/systemd/system/kubelet.service.d/sub.conf/x.conf": "a folder is no drop-in\n",
    }))
    assert su.unit_files_on_disk("kubelet.service", root=str(tmp_path))[1] == [
        "/run/systemd/system/kubelet.service.d/10-kubeadm.conf",
        "/usr/lib/systemd/system/service.d/10-timeout-abort.conf",
        "/etc/systemd/system/kubelet.service.d/60-user.conf",
        "/etc/systemd/system/kubelet.service.d/90-gpu.conf",
    ]


def test_the_units_own_folder_wins_over_the_type_wide_one_of_a_higher_directory(tmp_path):
    lay_out(tmp_path, dict(KUBEADM, **{"/etc/systemd/system/service.d/10-kubeadm.conf": "[Service]\n"}))
    assert su.unit_files_on_disk("kubelet", root=str(tmp_path))[1] == [
        "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"]


def test_masked_drop_ins_and_units(tmp_path):
    lay_out(tmp_path, dict(KUBEADM, **{"/etc/systemd/system/kubelet.service.d/10-kubeadm.conf": None,
                                       "/etc/systemd/system/kubelet.service.d/20-empty.conf": ""}))
    assert su.unit_files_on_disk("kubelet", root=str(tmp_path)) == ("/usr/lib/systemd/system/kubelet.service", [])
    lay_out(tmp_path, {"/etc/systemd/system/kubelet.service": None})
    assert su.unit_files_on_disk("kubelet", root=str(tmp_path)) == (None, [])


def test_a_unit_file_in_etc_wins_and_none_anywhere_is_none(tmp_path):
    assert su.unit_files_on_disk("kubelet", root=str(tmp_path)) == (None, [])
    lay_out(tmp_path, dict(KUBEADM, **{"/etc/systemd/system/kubelet.service": "[Service]\nExecStart=/opt/kubelet\n"}))
    assert su.unit_files_on_disk("kubelet", root=str(tmp_path))[0] == "/etc/systemd/system/kubelet.service"


@pytest.mark.parametrize("name,folders", [
    ("kubelet", ["kubelet.service.d", "service.d"]),
    ("foo-bar-baz.service", ["foo-bar-baz.service.d", "foo-bar-.service.d", "foo-.service.d", "service.d"]),
    ("containerd.socket", ["containerd.socket.d", "socket.d"]),
    ("-x.service", ["-x.service.d", "service.d"]),
])
def test_drop_in_folders(name, folders):
    assert su.dropin_folders(name) == folders


def test_dash_truncated_folders_count_after_the_units_own(tmp_path):
    lay_out(tmp_path, {"/usr/lib/systemd/system/foo-bar.service": "[Service]\nExecStart=/bin/true\n",
                       "/etc/systemd/system/foo-.service.d/10-a.conf": "[Service]\n",
                       "/usr/lib/systemd/system/foo-bar.service.d/10-a.conf": "[Service]\n"})
    # /etc comes first in the load path: its foo-.service.d/10-a.conf is the one of that name.
    assert su.unit_files_on_disk("foo-bar", root=str(tmp_path))[1] == ["/etc/systemd/system/foo-.service.d/10-a.conf"]


def test_the_module_names_the_files_and_the_pending_reload(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(systemd_unit_files, "unit_files_on_disk",
                        lambda name: su.unit_files_on_disk(name, root=str(tmp_path)))
    lay_out(tmp_path, KUBEADM)
    stand_in = tmp_path / "systemctl"
    stand_in.write_text("#!/bin/sh\necho NeedDaemonReload=yes\n")
    stand_in.chmod(0o755)
    monkeypatch.setattr(systemd_unit_files.AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **k: str(stand_in) if name == "systemctl" else None)
    result = run(systemd_unit_files, {"name": "kubelet"}, capsys)
    assert (result["changed"], result["fragment_path"], result["need_daemon_reload"]) == (
        False, "/usr/lib/systemd/system/kubelet.service", True)
    assert result["dropin_paths"] == ["/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"]
