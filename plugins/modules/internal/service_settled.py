#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: service_settled
version_added: 0.1.0
short_description: "Internal: Check that a systemd service stays up after a restart"
description:
  - Watches a systemd unit for O(seconds) after it was (re)started and fails unless it stayed active the whole
    time without being restarted (C(Restart=always) units that crash come back under a new invocation).
  - On failure the result carries the unit's state and its last journal lines, so that a role can put the
    previous configuration back and fail with the reason.
  - Changes nothing.
  - Internal to the roles gpufleet.nvidia.gpu_container_toolkit and gpufleet.nvidia.gpu_kubelet, not part of the
    collection's public interface; its options and results may change in any release.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  name:
    description: The systemd unit.
    type: str
    required: true
  seconds:
    description: How long the unit must stay active.
    type: int
    default: 10
  interval:
    description: Seconds between two looks at the unit.
    type: float
    default: 1.0
  journal_lines:
    description: Journal lines of the unit returned on failure.
    type: int
    default: 30
attributes:
  check_mode:
    description: Can run in check mode.
    support: full
    details: Nothing is restarted in check mode, so nothing is watched; the module looks once and returns at once.
  diff_mode:
    description: Would show a diff of what changed.
    support: none
    details: The module never changes anything.
  idempotent:
    description: A second run with the same arguments reports no change.
    support: full
    details: The module never reports a change.
  platform:
    description: Targets the module runs on.
    support: full
    platforms: posix
notes:
  - Needs C(systemctl); C(journalctl) is used for the journal excerpt when present.
"""

EXAMPLES = r"""
- name: Restart containerd
  ansible.builtin.systemd_service:
    name: containerd
    state: restarted

- name: Make sure containerd stays up
  gpufleet.nvidia.internal.service_settled:
    name: containerd
    seconds: 10
"""

RETURN = r"""
state:
  description: The unit's last observed properties.
  returned: always
  type: dict
  sample: {ActiveState: active, SubState: running, MainPID: "312", NRestarts: "0", InvocationID: "4f1c..."}
journal:
  description: The unit's last journal lines, when it did not settle.
  returned: failure
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

PROPERTIES = ("ActiveState", "SubState", "Result", "MainPID", "NRestarts", "InvocationID")


def parse_show(text):
    """``systemctl show -p ...`` output as a dict."""
    state = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            state[key.strip()] = value.strip()
    return state


def verdict(samples):
    """None when the unit stayed active and was not restarted over the samples, else why not."""
    if not samples:
        return "the unit was not observed"
    first, last = samples[0], samples[-1]
    for sample in samples:
        if sample.get("ActiveState") != "active":
            return "it is %s (%s, result %s)" % (sample.get("ActiveState", "unknown"), sample.get("SubState", "?"), sample.get("Result", "?"))
        if sample.get("InvocationID") != first.get("InvocationID") or sample.get("MainPID") != first.get("MainPID"):
            return "it was restarted while being watched (main PID %s, then %s)" % (first.get("MainPID"), sample.get("MainPID"))
    try:
        if int(last.get("NRestarts", "0")) > int(first.get("NRestarts", "0")):
            return "systemd restarted it %s times while being watched" % (int(last["NRestarts"]) - int(first.get("NRestarts", "0")))
    except ValueError:
        pass
    return None


class Unit:
    """The few systemd calls the module needs."""

    def __init__(self, module, name):
        self.module = module
        self.name = name
        self.systemctl = module.get_bin_path("systemctl", required=True)
        self.journalctl = module.get_bin_path("journalctl")

    def show(self):
        args = [self.systemctl, "show", self.name]
        for prop in PROPERTIES:
            args += ["-p", prop]
        rc, out, err = self.module.run_command(args)
        if rc != 0:
            self.module.fail_json(msg="systemctl show %s failed: %s" % (self.name, err.strip()), rc=rc, stdout=out, stderr=err)
        return parse_show(out)

    def journal(self, lines):
        if not self.journalctl:
            return ["(journalctl is not installed)"]
        rc, out, err = self.module.run_command([self.journalctl, "-u", self.name, "-n", str(lines), "--no-pager", "-o", "short-iso"])
        if rc != 0:
            return ["(journalctl failed: %s)" % err.strip()]
        return out.splitlines()


def watch(unit, seconds, interval, clock=time.monotonic, sleep=time.sleep):
    """Look at the unit until ``seconds`` passed or it is clearly down; return (samples, reason)."""
    samples = [unit.show()]
    deadline = clock() + seconds
    while True:
        reason = verdict(samples)
        if reason or clock() >= deadline:
            return samples, reason
        sleep(max(0.0, min(interval, deadline - clock())))
        samples.append(unit.show())


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            seconds=dict(type="int", default=10),
            interval=dict(type="float", default=1.0),
            journal_lines=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C", "SYSTEMD_PAGER": ""}
    name = module.params["name"]
    if module.params["seconds"] < 0 or module.params["interval"] <= 0:
        module.fail_json(msg="seconds must be >= 0 and interval > 0, got %s and %s" % (module.params["seconds"], module.params["interval"]))
    unit = Unit(module, name)
    if module.check_mode:
        module.exit_json(changed=False, state=unit.show(), msg="not watched in check mode")
    samples, reason = watch(unit, module.params["seconds"], module.params["interval"])
    if reason:
        module.fail_json(msg="%s did not stay up: %s" % (name, reason), state=samples[-1], journal=unit.journal(module.params["journal_lines"]))
    module.exit_json(changed=False, state=samples[-1], msg="%s stayed active for %s s" % (name, module.params["seconds"]))


if __name__ == "__main__":
    main()
