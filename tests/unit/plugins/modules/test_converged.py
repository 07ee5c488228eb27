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

from ansible_collections.gpufleet.nvidia.plugins.modules.internal import converged
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
    with open(os.path.join(os.path.dirname(converged.__file__), "..", "..", "..", "roles", "gpu_driver", "vars", "main.yml")) as handle:
        expression = yaml.safe_load(handle)["__gpu_driver_converged_packages"]
    assert bool(re.search(expression, package)) is watched


def test_a_link_is_watched_through_to_its_target(node, capsys):
    (node / "etc" / "managed").mkdir()
    (node / "etc" / "managed" / "config.toml").write_text("version = 2\n")
    (node / "etc" / "config.toml").symlink_to(node / "etc" / "managed" / "config.toml")
    watched = args(node, paths=[str(node / "etc" / "config.toml")])
    run(converged, dict(watched, record=True), capsys)
    assert run(converged, watched, capsys)["current"] is True
    (node / "etc" / "managed" / "config.toml").write_text("version = 3\n")
    assert run(converged, watched, capsys)["differs"] == ["file %s" % (node / "etc" / "config.toml")]


def test_a_dangling_link_is_a_state_of_its_own(node, capsys):
    (node / "etc" / "config.toml").symlink_to(node / "etc" / "gone.toml")
    watched = args(node, paths=[str(node / "etc" / "config.toml")])
    run(converged, dict(watched, record=True), capsys)
    (node / "etc" / "gone.toml").write_text("version = 2\n")
    assert run(converged, watched, capsys)["differs"] == ["file %s" % (node / "etc" / "config.toml")]


def test_a_pattern_matches_hidden_files_as_containerd_does(node, capsys):
    (node / "etc" / "conf.d" / ".hidden.conf").write_text("c = 1\n")
    run(converged, args(node, record=True), capsys)
    record = json.loads((node / "state" / "gpu_kubelet.json").read_text())
    assert str(node / "etc" / "conf.d" / ".hidden.conf") in record["files"]
    (node / "etc" / "conf.d" / ".hidden.conf").write_text("c = 2\n")
    assert run(converged, args(node), capsys)["differs"] == ["file %s" % (node / "etc" / "conf.d" / ".hidden.conf")]


def test_patterns_match_as_gos_glob_does(tmp_path):
    """containerd globs its imports with Go's filepath.Glob: '*' matches a leading '.', in every component."""
    for name in ("conf.d/10-user.toml", "conf.d/.hidden.toml", "conf.d/.toml", ".hd/.h.toml", "conf.d/x.conf",
                 ".conf.toml"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    assert converged.expand(str(tmp_path / "*" / "*.toml")) == [
        str(tmp_path / ".hd" / ".h.toml"), str(tmp_path / "conf.d" / ".hidden.toml"), str(tmp_path / "conf.d" / ".toml"),
        str(tmp_path / "conf.d" / "10-user.toml")]
    assert converged.expand(str(tmp_path / "conf*.toml")) == []
    assert converged.expand(str(tmp_path / "conf.d" / "?0-user.toml")) == [str(tmp_path / "conf.d" / "10-user.toml")]
    assert converged.expand(str(tmp_path / "absent" / "*")) == []
    assert converged.expand(str(tmp_path / "conf.d" / "x.conf")) == [str(tmp_path / "conf.d" / "x.conf")]


def test_a_big_file_rewritten_with_its_old_size_and_mtime_differs(node, capsys):
    binary = node / "containerd"
    binary.write_bytes(b"\0" * (converged.BIG + 1))
    watched = args(node, paths=[str(binary)])
    run(converged, dict(watched, record=True), capsys)
    before = os.stat(binary)
    with open(binary, "r+b") as handle:
        handle.write(b"\1")
    os.utime(binary, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(binary).st_size == before.st_size and os.stat(binary).st_mtime_ns == before.st_mtime_ns
    assert run(converged, watched, capsys)["differs"] == ["file %s" % binary]


def test_every_environment_file_and_program_of_a_unit_is_watched(node, capsys):
    env_files = [node / "kubeadm-flags.env", node / "default-kubelet"]
    for path in env_files:
        path.write_text("KUBELET_KUBEADM_ARGS=--node-ip=10.0.0.1\n")
    helper = node / "kubelet-helper"
    helper.write_text("helper\n")
    (node / "show.txt").write_text(
        show(node / "kubelet.service", node / "kubelet").replace(
            "EnvironmentFiles=\n",
            "EnvironmentFiles=%s (ignore_errors=yes)\nEnvironmentFiles=%s (ignore_errors=yes)\n" % tuple(env_files))
        + "ExecStart={ path=%s ; argv[]=%s ; ignore_errors=no }\n" % (helper, helper))
    run(converged, args(node, record=True), capsys)
    record = json.loads((node / "state" / "gpu_kubelet.json").read_text())
    assert {str(env_files[0]), str(env_files[1]), str(helper), str(node / "kubelet")} <= set(record["files"])
    env_files[0].write_text("KUBELET_KUBEADM_ARGS=--node-ip=10.0.0.2\n")
    helper.write_text("another helper\n")
    assert run(converged, args(node), capsys)["differs"] == ["file %s" % env_files[0], "file %s" % helper]


def test_the_record_keeps_the_paths_only_a_complete_run_knows(node, capsys):
    """A complete run names the files a runtime imports; every later comparison reads them too."""
    imports = node / "srv" / "containerd"
    imports.mkdir(parents=True)
    (imports / "10-user.toml").write_text("version = 2\n")
    run(converged, args(node, record=True, paths=args(node)["paths"] + [str(imports / "*.toml")]), capsys)
    assert run(converged, args(node), capsys)["current"] is True
    (imports / "10-user.toml").write_text("version = 3\n")
    (imports / "20-new.toml").write_text("version = 3\n")
    assert run(converged, args(node), capsys)["differs"] == ["file %s" % (imports / "10-user.toml"),
                                                             "file %s" % (imports / "20-new.toml")]


def test_each_input_that_changed_is_named(node, capsys):
    inputs = {"code": "c1", "vars.gpu_kubelet_taints": "t1", "facts.nvidia": "n1"}
    run(converged, args(node, record=True, inputs=json.dumps(inputs)), capsys)
    assert run(converged, args(node, inputs=json.dumps(inputs)), capsys)["current"] is True
    changed = dict(inputs, **{"vars.gpu_kubelet_taints": "t2", "vars.gpu_kubelet_labels": "l1"})
    assert run(converged, args(node, inputs=json.dumps(changed)), capsys)["differs"] == [
        "input vars.gpu_kubelet_labels", "input vars.gpu_kubelet_taints"]
    # a record of the single digest of earlier releases
    assert run(converged, args(node, inputs="d1"), capsys)["differs"] == ["inputs"]


def refused(result, directory):
    return (result["current"], result["recorded"]) == (False, False) and len(result["differs"]) == 1 \
        and result["differs"][0].startswith("record directory %s: " % directory)


def test_a_record_others_could_have_written_is_not_believed(node, capsys):
    state = node / "state"
    run(converged, args(node, record=True), capsys)
    state.chmod(0o777)
    assert refused(run(converged, args(node), capsys), state)
    written = run(converged, args(node, record=True), capsys)
    assert written["failed"] is True and str(state) in written["msg"] and "writable by others" in written["msg"]
    state.chmod(0o700)
    (state / "gpu_kubelet.json").chmod(0o666)
    assert refused(run(converged, args(node), capsys), state)
    (state / "gpu_kubelet.json").chmod(0o600)
    assert run(converged, args(node), capsys)["current"] is True


def test_a_forged_record_behind_a_link_is_not_believed(node, capsys):
    run(converged, args(node, record=True), capsys)
    forged = node / "forged.json"
    forged.write_text((node / "state" / "gpu_kubelet.json").read_text())
    (node / "state" / "gpu_kubelet.json").unlink()
    (node / "state" / "gpu_kubelet.json").symlink_to(forged)
    (node / "etc" / "main.conf").write_text("a = 2\n")
    assert refused(run(converged, args(node), capsys), node / "state")


def test_the_record_is_never_written_through_a_link(node, capsys):
    run(converged, args(node, record=True), capsys)
    victim = node / "victim"
    victim.write_text("keep\n")
    (node / "state" / "gpu_kubelet.json.tmp").symlink_to(victim)
    assert run(converged, args(node, record=True), capsys)["recorded"] is True
    assert victim.read_text() == "keep\n"
    assert not (node / "state" / "gpu_kubelet.json").is_symlink()
    assert sorted(path.name for path in (node / "state").iterdir()) == ["gpu_kubelet.json", "gpu_kubelet.json.tmp"]
    assert run(converged, args(node), capsys)["current"] is True


def test_the_record_folders_are_made_for_their_owner_whatever_the_umask(node, capsys):
    umask = os.umask(0o002)
    try:
        written = run(converged, args(node, record=True, directory=str(node / "var" / "gpufleet" / "converged")), capsys)
    finally:
        os.umask(umask)
    assert written["recorded"] is True
    assert stat.S_IMODE(os.stat(node / "var" / "gpufleet").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(node / "var" / "gpufleet" / "converged").st_mode) == 0o700


def test_inputs_as_ansible_core_before_2_19_hands_them_over(node, capsys):
    """Before 2.19 the filter's JSON text arrives as the dict it reads."""
    inputs = {"code": "c1", "vars.gpu_kubelet_taints": "t1"}
    run(converged, args(node, record=True, inputs=json.dumps(inputs)), capsys)
    assert run(converged, args(node, inputs=inputs), capsys)["current"] is True
    changed = dict(inputs, **{"vars.gpu_kubelet_taints": "t2"})
    assert run(converged, args(node, inputs=changed), capsys)["differs"] == ["input vars.gpu_kubelet_taints"]


def test_only_the_programs_a_unit_runs_are_watched_not_paths_in_their_arguments(node, capsys):
    pid = node / "containerd.pid"
    pid.write_text("1\n")
    (node / "show.txt").write_text(show(node / "kubelet.service", node / "kubelet").replace(
        "argv[]=%s ;" % (node / "kubelet"), "argv[]=%s --pid-path=%s --socket-path=/run/c.sock ;" % (node / "kubelet", pid)))
    run(converged, args(node, record=True), capsys)
    record = json.loads((node / "state" / "gpu_kubelet.json").read_text())
    assert str(node / "kubelet") in record["files"] and str(pid) not in record["files"]


CRI_FAILS = r"^io\.containerd\.(grpc\.v1\s+cri|cri\.v1\s+\S+)\s+\S+\s+(?!ok\s*$)\S+\s*$"
# ctr plugins ls, containerd 2.1: the CRI plugins loaded, then one that failed to.
PLUGINS_OK = ("TYPE                                   ID                       PLATFORMS      STATUS\n"
              "io.containerd.cri.v1                   images                   -              ok\n"
              "io.containerd.cri.v1                   runtime                  linux/amd64    ok\n"
              "io.containerd.grpc.v1                  cri                      -              ok\n")
PLUGINS_FAILED = PLUGINS_OK.replace("runtime                  linux/amd64    ok",
                                    "runtime                  linux/amd64    error").replace(
    "cri                      -              ok", "cri                      -              skip")


def cri_check(node, unit="kubelet"):
    return {"name": "containerd's CRI plugin", "argv": [str(node / "bin" / "ctr"), "plugins", "ls"],
            "fails": CRI_FAILS, "unit": unit}


def test_a_live_check_the_complete_run_chose_is_run_by_every_comparison(node, capsys):
    """containerd active, its files as recorded, its CRI plugin failed: the node differs, naming the plugin."""
    (node / "plugins.txt").write_text(PLUGINS_OK)
    executable(node / "bin", "ctr", 'cat "%s"\n' % (node / "plugins.txt"))
    run(converged, args(node, record=True, checks=[cri_check(node)]), capsys)
    record = json.loads((node / "state" / "gpu_kubelet.json").read_text())
    assert [check["name"] for check in record["checks"]] == ["containerd's CRI plugin"]
    assert run(converged, args(node), capsys)["current"] is True
    (node / "plugins.txt").write_text(PLUGINS_FAILED)
    result = run(converged, args(node), capsys)
    assert result["current"] is False
    assert result["differs"] == ["check containerd's CRI plugin: io.containerd.cri.v1                   runtime"
                                 "                  linux/amd64    error"]


def test_a_check_that_cannot_run_is_a_difference_and_one_of_a_stopped_unit_is_not_run(node, capsys):
    executable(node / "bin", "ctr", 'echo "ctr: failed to dial" >&2; exit 1\n')
    run(converged, args(node, record=True, checks=[cri_check(node)]), capsys)
    result = run(converged, args(node), capsys)
    assert result["differs"] == ["check containerd's CRI plugin: %s exited 1 ctr: failed to dial" % (node / "bin" / "ctr")]
    # The unit stopped: the unit's state differs, and the check is not run at all.
    (node / "show.txt").write_text(show(node / "kubelet.service", node / "kubelet", active="inactive"))
    assert run(converged, args(node), capsys)["differs"] == ["unit kubelet"]


def test_the_record_says_its_notices_again_and_none_without_a_record(node, capsys):
    notices = ["containerd on %s is not running; it reads the nvidia runtime's configuration when it starts." % node]
    assert run(converged, args(node), capsys)["notices"] == []
    assert run(converged, args(node, record=True, notices=notices + [""]), capsys)["notices"] == notices
    result = run(converged, args(node), capsys)
    assert (result["current"], result["notices"]) == (True, notices)
    # ansible-core 2.19 and later return each warning as a summary of its event, earlier ones as the text
    # (a module's warnings are kept for the process: those of the tests before are there too).
    warnings = [warning["event"]["msg"] if isinstance(warning, dict) else warning for warning in result["warnings"]]
    assert [warning for warning in warnings if warning in notices] == notices


def test_a_unit_drop_in_written_without_a_reload_differs(node, capsys, monkeypatch):
    """systemctl show names what systemd loaded; a drop-in written since, without daemon-reload, is what kubelet
    runs after the next reload: the comparison reads the unit's files on disk too."""
    root = node / "root"
    (root / "usr" / "lib" / "systemd" / "system" / "kubelet.service.d").mkdir(parents=True)
    (root / "usr" / "lib" / "systemd" / "system" / "kubelet.service").write_text("[Service]\nExecStart=/usr/bin/kubelet\n")
    (root / "usr" / "lib" / "systemd" / "system" / "kubelet.service.d" / "10-kubeadm.conf").write_text("[Service]\n")
    monkeypatch.setattr(converged, "UNIT_ROOT", str(root), raising=False)
    run(converged, args(node, record=True), capsys)
    assert run(converged, args(node), capsys)["current"] is True
    user = root / "etc" / "systemd" / "system" / "kubelet.service.d"
    user.mkdir(parents=True)
    (user / "60-user.conf").write_text("[Service]\nExecStart=\nExecStart=/usr/bin/kubelet --v=2\n")
    result = run(converged, args(node), capsys)
    assert result["current"] is False
    assert result["differs"] == ["file /etc/systemd/system/kubelet.service.d/60-user.conf"]
