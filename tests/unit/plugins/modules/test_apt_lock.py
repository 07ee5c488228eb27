# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt_lock: /proc/locks read as the kernel writes it, and the module against a lock a real process holds."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.nvidia.plugins.modules.internal import apt_lock
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module as run

# /proc/locks with unattended-upgrades holding dpkg's frontend lock and apt-get waiting on it (the "->" line).
PROC_LOCKS = """\
1: POSIX  ADVISORY  WRITE 4211 08:01:393231 0 EOF
1: -> POSIX  ADVISORY  WRITE 5120 08:01:393231 0 EOF
2: FLOCK  ADVISORY  WRITE 880 00:19:1021 0 EOF
3: OFDLCK ADVISORY  READ  -1 00:06:9 0 EOF
"""


def test_parse_locks_leaves_out_waiters():
    assert apt_lock.parse_locks(PROC_LOCKS) == [(4211, 393231), (880, 1021), (-1, 9)]


def test_holders_and_words():
    inodes = {"/var/lib/dpkg/lock-frontend": 393231, "/var/lib/dpkg/lock": 393232}
    found = apt_lock.holders(["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock"],
                             PROC_LOCKS, inodes.get, {4211: "unattended-upgr"}.get)
    assert found == [{"path": "/var/lib/dpkg/lock-frontend", "pid": 4211, "command": "unattended-upgr"}]
    assert apt_lock.words(found) == "unattended-upgr (pid 4211) holds /var/lib/dpkg/lock-frontend"


def test_wait_looks_until_free_or_timeout():
    now = [0.0]
    looks = iter([["held"], ["held"], []])
    first, last, waited = apt_lock.wait([], 60, 2, look_fn=lambda paths: next(looks), clock=lambda: now[0],
                                        sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert (first, last, waited) == (["held"], [], 4.0)
    now[0] = 0.0
    first, last, waited = apt_lock.wait([], 5, 2, look_fn=lambda paths: ["held"], clock=lambda: now[0],
                                        sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert (last, waited) == (["held"], 5.0)


HOLD = "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(float(sys.argv[2]))"


def holder(path, seconds):
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    return child


def test_module_names_a_real_holder_and_waits_for_it(tmp_path, capsys):
    lock = tmp_path / "lock-frontend"
    lock.write_text("")
    child = holder(lock, 1.5)
    try:
        result = run(apt_lock, {"paths": [str(lock)], "timeout": 30, "interval": 0.2}, capsys)
    finally:
        child.wait()
    assert result["rc_exit"] == 0 and result["changed"] is False
    assert [(h["path"], h["pid"]) for h in result["holders"]] == [(str(lock), child.pid)]
    assert result["holders"][0]["command"].startswith("python")
    assert 0.5 <= result["waited"] < 30


def test_module_fails_naming_the_holder_after_its_timeout(tmp_path, capsys):
    lock = tmp_path / "lock"
    lock.write_text("")
    child = holder(lock, 30)
    try:
        start = time.monotonic()
        result = run(apt_lock, {"paths": [str(lock), str(tmp_path / "absent")], "timeout": 1, "interval": 0.2}, capsys)
        assert time.monotonic() - start < 10
    finally:
        child.kill()
        child.wait()
    assert result["failed"] is True
    assert "apt's lock is still held after" in result["msg"]
    assert "(pid %d) holds %s" % (child.pid, lock) in result["msg"]


def test_module_looks_once_with_no_timeout(tmp_path, capsys):
    lock = tmp_path / "lock"
    lock.write_text("")
    result = run(apt_lock, {"paths": [str(lock)]}, capsys)
    assert (result["rc_exit"], result["holders"], result["waited"]) == (0, [], 0.0)
    # Held: named, and no failure - the role says who holds it before it waits.
    child = holder(lock, 30)
    try:
        result = run(apt_lock, {"paths": [str(lock)]}, capsys)
    finally:
        child.kill()
        child.wait()
    assert result["rc_exit"] == 0 and result.get("failed") is not True
    assert [h["pid"] for h in result["holders"]] == [child.pid] and result["waited"] == 0.0


@pytest.mark.parametrize("args", [{"timeout": -1}, {"interval": 0}])
def test_module_refuses_bad_numbers(args, capsys):
    result = run(apt_lock, args, capsys)
    assert result["failed"] is True and "timeout must be 0 or more" in result["msg"]
