# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""service_settled: reading systemctl show, the verdict on samples, the watch loop, the module shell.

watch() gets a unit object and a clock that are stand-ins (its probe seam); the module
runs real executables named systemctl and journalctl through run_command.
"""

from __future__ import annotations

import stat

import pytest

from ansible_collections.gpufleet.nvidia.plugins.modules.internal import service_settled
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module as run

# systemctl show containerd -p ActiveState -p SubState -p Result -p MainPID -p NRestarts -p InvocationID
# (systemd prints the properties in its own order).
SHOW_RUNNING = """\
MainPID=312
Result=success
NRestarts=0
ActiveState=active
SubState=running
InvocationID=4f1c2b6a0d5e4f8e9a7b3c1d2e0f9a8b
"""

RUNNING = {"ActiveState": "active", "SubState": "running", "Result": "success", "MainPID": "312", "NRestarts": "0",
           "InvocationID": "4f1c2b6a0d5e4f8e9a7b3c1d2e0f9a8b"}


def state(**changes):
    return dict(RUNNING, **changes)


AUTO_RESTART = state(ActiveState="activating", SubState="auto-restart", Result="exit-code", MainPID="0")
FAILED = state(ActiveState="failed", SubState="failed", Result="exit-code", MainPID="0")
RESTARTED = state(MainPID="401", NRestarts="1", InvocationID="9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b")


# --------------------------------------------------------------------------
# parse_show
# --------------------------------------------------------------------------

@pytest.mark.parametrize("text,parsed", [
    (SHOW_RUNNING, RUNNING),
    ("ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nMainPID=0\nNRestarts=3\nInvocationID=\n",
     {"ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code", "MainPID": "0", "NRestarts": "3",
      "InvocationID": ""}),
    ("ActiveState=inactive\nSubState=dead\nResult=success\nMainPID=0\nNRestarts=[not set]\nInvocationID=\n",
     {"ActiveState": "inactive", "SubState": "dead", "Result": "success", "MainPID": "0", "NRestarts": "[not set]",
      "InvocationID": ""}),
    ("Environment=A=1 B=2\n", {"Environment": "A=1 B=2"}),
    ("ActiveState=active\r\nno equals sign here\n\n", {"ActiveState": "active"}),
    ("", {}),
    (None, {}),
])
def test_parse_show(text, parsed):
    assert service_settled.parse_show(text) == parsed


# --------------------------------------------------------------------------
# verdict
# --------------------------------------------------------------------------

@pytest.mark.parametrize("samples,reason", [
    ([RUNNING], None),
    ([RUNNING] * 6, None),
    ([state(SubState="reload")] * 2, None),                                        # active is active
    ([state(NRestarts="[not set]")] * 2, None),
    ([], "the unit was not observed"),
    ([RUNNING, AUTO_RESTART, RUNNING], "it is activating (auto-restart, result exit-code)"),
    ([AUTO_RESTART], "it is activating (auto-restart, result exit-code)"),
    ([RUNNING, RUNNING, FAILED], "it is failed (failed, result exit-code)"),
    ([RUNNING, {}], "it is unknown (?, result ?)"),
    ([RUNNING, RESTARTED], "it was restarted while being watched (main PID 312, then 401)"),
    ([RUNNING, state(InvocationID="0123456789abcdef0123456789abcdef")],            # same PID, new invocation
     "it was restarted while being watched (main PID 312, then 312)"),
    ([RUNNING, state(MainPID="313")], "it was restarted while being watched (main PID 312, then 313)"),
    ([RUNNING, state(NRestarts="2")], "systemd restarted it 2 times while being watched"),
    ([state(NRestarts="5"), state(NRestarts="6")], "systemd restarted it 1 times while being watched"),
])
def test_verdict(samples, reason):
    assert service_settled.verdict(samples) == reason


# --------------------------------------------------------------------------
# watch
# --------------------------------------------------------------------------

class ScriptedUnit:
    """What systemctl show would say, one state per look; the last one repeats."""

    def __init__(self, *states):
        self.states = list(states)
        self.looks = 0

    def show(self):
        current = self.states[min(self.looks, len(self.states) - 1)]
        self.looks += 1
        return dict(current)


class Clock:
    """A monotonic clock that only sleeping moves."""

    def __init__(self, now=1000.0):
        self.now = now
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("seconds,interval,slept", [
    (5, 1.0, [1.0] * 5),
    (5, 2.0, [2.0, 2.0, 1.0]),          # the last look is at the deadline, not past it
    (10, 3.0, [3.0, 3.0, 3.0, 1.0]),
    (1, 0.25, [0.25] * 4),
    (0, 1.0, []),
])
def test_a_steady_unit_is_watched_until_the_deadline(seconds, interval, slept):
    unit, clock = ScriptedUnit(RUNNING), Clock()
    samples, reason = service_settled.watch(unit, seconds, interval, clock=clock, sleep=clock.sleep)
    assert reason is None
    assert clock.slept == slept
    assert clock.now == 1000.0 + seconds
    assert len(samples) == unit.looks == len(slept) + 1
    assert samples == [RUNNING] * len(samples)


@pytest.mark.parametrize("states,looks,words", [
    ((RUNNING, RUNNING, AUTO_RESTART), 3, "it is activating (auto-restart"),
    ((FAILED,), 1, "it is failed"),
    ((RUNNING, RESTARTED), 2, "restarted while being watched (main PID 312, then 401)"),
    ((RUNNING, RUNNING, RUNNING, state(NRestarts="1")), 4, "systemd restarted it 1 times"),
])
def test_a_failing_unit_stops_the_watch_at_once(states, looks, words):
    unit, clock = ScriptedUnit(*states), Clock()
    samples, reason = service_settled.watch(unit, 10, 1.0, clock=clock, sleep=clock.sleep)
    assert words in reason
    assert unit.looks == len(samples) == looks
    assert clock.slept == [1.0] * (looks - 1)
    assert samples[-1] == dict(states[looks - 1])


def test_a_unit_that_comes_back_is_still_a_failure():
    unit, clock = ScriptedUnit(RUNNING, AUTO_RESTART, RESTARTED), Clock()
    samples, reason = service_settled.watch(unit, 10, 1.0, clock=clock, sleep=clock.sleep)
    assert reason.startswith("it is activating")
    assert len(samples) == 2


# --------------------------------------------------------------------------
# the module, with executables named systemctl and journalctl
# --------------------------------------------------------------------------

def executable(directory, name, body):
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_module(args, capsys):
    return run(service_settled, args, capsys)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """Only the tools written into bindir are found."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setattr(service_settled.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, *a, **k: str(bindir / name) if (bindir / name).exists()
                        else self.fail_json(msg="%s not found" % name) if required else None)
    return bindir


def test_a_running_unit_passes_and_changes_nothing(host, capsys, tmp_path):
    argv = tmp_path / "argv"
    executable(host, "systemctl", 'echo "$@" > "%s"\ncat <<EOF\n%sEOF\n' % (argv, SHOW_RUNNING))
    result = run_module({"name": "containerd", "seconds": 0}, capsys)
    assert result["rc_exit"] == 0
    assert result["changed"] is False
    assert result["state"] == RUNNING
    assert result["msg"] == "containerd stayed active for 0 s"
    assert argv.read_text().split() == ["show", "containerd", "-p", "ActiveState", "-p", "SubState", "-p", "Result",
                                        "-p", "MainPID", "-p", "NRestarts", "-p", "InvocationID"]


def test_a_crashing_unit_fails_with_its_journal(host, capsys, tmp_path):
    # The second look finds the unit waiting to be restarted; the module stops there, long before 30 s.
    looks = tmp_path / "looks"
    executable(host, "systemctl", 'echo x >> "%s"\nif [ "$(wc -l < "%s")" -gt 1 ]; then\n'
                                  'printf "ActiveState=activating\\nSubState=auto-restart\\nResult=exit-code\\nMainPID=0\\n"\n'
                                  'else\ncat <<EOF\n%sEOF\nfi\n' % (looks, looks, SHOW_RUNNING))
    executable(host, "journalctl", 'echo "$@"\necho "containerd[312]: failed to load plugin io.containerd.grpc.v1.cri"\n')
    result = run_module({"name": "containerd", "seconds": 30, "interval": 0.05, "journal_lines": 7}, capsys)
    assert result["rc_exit"] == 1
    assert result["failed"] is True
    assert result["msg"] == "containerd did not stay up: it is activating (auto-restart, result exit-code)"
    assert result["state"]["SubState"] == "auto-restart"
    assert result["journal"] == ["-u containerd -n 7 --no-pager -o short-iso",
                                 "containerd[312]: failed to load plugin io.containerd.grpc.v1.cri"]
    assert len(looks.read_text().split()) == 2


def test_without_journalctl_the_failure_says_so(host, capsys):
    executable(host, "systemctl", 'printf "ActiveState=failed\\nSubState=failed\\nResult=exit-code\\n"\n')
    result = run_module({"name": "docker", "seconds": 5}, capsys)
    assert result["failed"] is True
    assert result["journal"] == ["(journalctl is not installed)"]


def test_systemctl_failing_fails_with_its_output(host, capsys):
    executable(host, "systemctl", 'echo "Failed to connect to bus: No such file or directory" >&2\nexit 1\n')
    result = run_module({"name": "crio"}, capsys)
    assert result["failed"] is True
    assert result["rc"] == 1
    assert result["msg"] == "systemctl show crio failed: Failed to connect to bus: No such file or directory"


def test_check_mode_looks_once_and_waits_for_nothing(host, capsys, tmp_path):
    looks = tmp_path / "looks"
    executable(host, "systemctl", 'echo x >> "%s"\ncat <<EOF\n%sEOF\n' % (looks, SHOW_RUNNING))
    result = run_module({"name": "containerd", "seconds": 600, "_ansible_check_mode": True}, capsys)
    assert result["rc_exit"] == 0
    assert result["msg"] == "not watched in check mode"
    assert result["state"] == RUNNING
    assert len(looks.read_text().split()) == 1


@pytest.mark.parametrize("args", [{"seconds": -1}, {"interval": 0}, {"interval": -0.5}])
def test_bad_timing_is_refused(host, capsys, args):
    executable(host, "systemctl", "exit 0\n")
    result = run_module(dict({"name": "containerd"}, **args), capsys)
    assert result["failed"] is True
    assert "seconds must be >= 0 and interval > 0" in result["msg"]
