#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_lock
version_added: 0.2.0
short_description: "Internal: Say which processes hold apt's and dpkg's locks, and wait until they are free"
description:
  - Reads the POSIX locks the kernel lists in C(/proc/locks) on apt's and dpkg's lock files (C(/var/lib/dpkg/lock-frontend),
    C(/var/lib/dpkg/lock), C(/var/lib/apt/lists/lock), C(/var/cache/apt/archives/lock)), and names each holder by
    its process id and command (C(unattended-upgr), C(apt-get), C(packagekitd)).
  - With O(timeout) above 0, waits until no lock is held, looking every O(interval) seconds, and fails naming the
    holders when they still hold a lock after O(timeout) seconds. With O(timeout=0) it looks once and only says who
    holds what.
  - Changes nothing. Only locks that processes of the target's own PID namespace hold are seen, as C(/proc/locks)
    shows them.
  - Internal to the role gpufleet.nvidia.gpu_driver, not part of the collection's public interface; its options and
    results may change in any release.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  timeout:
    description: Seconds to wait for the locks to be free; 0 only looks, and never fails for a lock held.
    type: int
    default: 0
  interval:
    description: Seconds between two looks.
    type: float
    default: 2.0
  paths:
    description: The lock files to look at.
    type: list
    elements: path
    default: [/var/lib/dpkg/lock-frontend, /var/lib/dpkg/lock, /var/lib/apt/lists/lock, /var/cache/apt/archives/lock]
attributes:
  check_mode:
    description: Can run in check mode.
    support: full
    details: The module only reads; it waits in check mode too, as apt's own reads would.
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
  - Linux only (C(/proc/locks)).
"""

EXAMPLES = r"""
- name: Wait up to 10 minutes for unattended-upgrades to let go of apt
  gpufleet.nvidia.internal.apt_lock:
    timeout: 600
"""

RETURN = r"""
holders:
  description: The processes that held a lock at the first look, one per lock and process.
  returned: always
  type: list
  elements: dict
  sample: [{path: /var/lib/dpkg/lock-frontend, pid: 4211, command: unattended-upgr}]
waited:
  description: Seconds waited until the locks were free.
  returned: always
  type: float
  sample: 12.0
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule


def parse_locks(text):
    """``/proc/locks`` as (pid, inode) pairs of the POSIX and OFD locks it lists (blocked waiters, ``->``, left out)."""
    found = []
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 6 or "->" in fields[1:2]:
            continue
        kind, pid, where = fields[1], fields[4], fields[5]
        if kind not in ("POSIX", "OFDLCK", "FLOCK"):
            continue
        parts = where.split(":")
        try:
            found.append((int(pid), int(parts[-1])))
        except (ValueError, IndexError):
            continue
    return found


def holders(paths, locks_text, inode_of, command_of):
    """Who holds each of ``paths``: [{path, pid, command}], in the order of ``paths``.

    ``inode_of(path)`` gives a path's inode (None when absent), ``command_of(pid)`` a process's command.
    """
    locks = parse_locks(locks_text)
    found = []
    for path in paths:
        inode = inode_of(path)
        if inode is None:
            continue
        for pid, locked in locks:
            if locked == inode and pid > 0:
                found.append({"path": path, "pid": pid, "command": command_of(pid)})
    return found


def words(found):
    """The holders as a sentence: 'unattended-upgr (pid 4211) holds /var/lib/dpkg/lock-frontend, ...'."""
    by_process = {}
    for entry in found:
        by_process.setdefault((entry["command"], entry["pid"]), []).append(entry["path"])
    return "; ".join("%s (pid %s) holds %s" % (command or "?", pid, ", ".join(paths))
                     for (command, pid), paths in by_process.items())


def _inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _command(pid):
    try:
        with open("/proc/%d/comm" % pid) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _locks():
    with open("/proc/locks") as handle:
        return handle.read()


def look(paths):
    return holders(paths, _locks(), _inode, _command)


def wait(paths, timeout, interval, look_fn=look, clock=time.monotonic, sleep=time.sleep):
    """(holders at the first look, holders at the last, seconds waited)."""
    start = clock()
    first = current = look_fn(paths)
    while current and clock() - start < timeout:
        sleep(min(interval, max(timeout - (clock() - start), 0)))
        current = look_fn(paths)
    return first, current, round(clock() - start, 1)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            timeout=dict(type="int", default=0),
            interval=dict(type="float", default=2.0),
            paths=dict(type="list", elements="path",
                       default=["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock",
                                "/var/cache/apt/archives/lock"]),
        ),
        supports_check_mode=True,
    )
    if module.params["timeout"] < 0 or module.params["interval"] <= 0:
        module.fail_json(msg="apt_lock: timeout must be 0 or more and interval above 0, got timeout %r, interval %r"
                         % (module.params["timeout"], module.params["interval"]))
    try:
        first, last, waited = wait(module.params["paths"], module.params["timeout"], module.params["interval"])
    except OSError as err:
        module.fail_json(msg="apt_lock: cannot read /proc/locks: %s" % err)
    if last and module.params["timeout"] > 0:
        module.fail_json(msg="apt's lock is still held after %s s: %s" % (waited, words(last)),
                         holders=first, still=last, waited=waited)
    module.exit_json(changed=False, holders=first, waited=waited)


if __name__ == "__main__":
    main()
