#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: converged
version_added: 0.4.0
short_description: Tell in one call whether a node is still as a role's last complete run left it
description:
  - Reads, in one call, everything a role's outcome depends on that lives on the node - the files it writes and
    reads, the packages it installs and holds, the systemd units it manages - and compares it, with the digest of
    the role's inputs, with the record the role's last complete run left on the node.
  - With O(record=false) (the default) it returns C(current=true) only when nothing differs, so that the role can
    skip its work; otherwise C(differs) names what changed since, and the role runs in full.
  - With O(record=true) it writes the record, at the end of a complete run that left the node converged.
  - The record is the role's own bookkeeping in O(directory), like a fact cache; writing it is not reported as a
    change.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  name:
    description: The record's name, the role's.
    type: str
    required: true
  inputs:
    description:
      - Digest of the role's inputs (its variables, the facts it reads and its own code), made on the controller by
        the P(gpufleet.nvidia.converged_digest#filter) filter.
    type: str
    required: true
  paths:
    description:
      - Files and folders whose state is read, as paths or shell patterns (C(/etc/apt/sources.list.d/*)).
      - For each file its type, mode, owner, group and content (its SHA-256; for files over 1 MiB, such as
        binaries, the size and modification time); a path that is absent is recorded as absent.
    type: list
    elements: str
    default: []
  exclude:
    description:
      - Shell patterns of paths left out of O(paths)' matches, such as the files of another role that O(paths) would
        otherwise take in.
    type: list
    elements: str
    default: []
  packages:
    description:
      - A regular expression (Python, searched in the package name); each dpkg package it matches is read with its
        version, its selection (hold) and its status.
    type: str
  units:
    description:
      - systemd units whose state is read - load, enablement and active state - with the content of their unit
        file, drop-ins and environment files and the state of the program each C(ExecStart) runs.
    type: list
    elements: str
    default: []
  record:
    description: Write the record of the node's state now instead of comparing with it.
    type: bool
    default: false
  directory:
    description: Where the records are kept.
    type: path
    default: /var/lib/gpufleet/converged
attributes:
  check_mode:
    description: Can run in check mode.
    support: full
    details: The comparison only reads; in check mode no record is written.
  diff_mode:
    description: Would show a diff of what changed.
    support: none
    details: The record is bookkeeping; the role's own tasks show their diffs when they run.
  idempotent:
    description: A second run with the same arguments reports no change.
    support: full
    details: The module never reports a change.
  platform:
    description: Targets the module runs on.
    support: full
    platforms: debian
notes:
  - Needs C(dpkg-query) when O(packages) is given and C(systemctl) when O(units) is.
  - The record holds checksums, versions and unit states, no file content.
"""

EXAMPLES = r"""
- name: Compare the node with what the last complete run left
  gpufleet.nvidia.converged:
    name: gpu_kubelet
    inputs: "{{ {'vars': {'gpu_kubelet_taints': gpu_kubelet_taints}} | gpufleet.nvidia.converged_digest('gpu_kubelet') }}"
    paths: [/etc/systemd/system/kubelet.service.d/*]
    packages: ^kube
    units: [kubelet]
  register: converged

- name: Converge in full when something differs
  ansible.builtin.include_tasks: converge.yml
  when: not converged.current
"""

RETURN = r"""
current:
  description: Whether the node is as the record says, with the same inputs. Always false when O(record=true).
  returned: always
  type: bool
recorded:
  description: Whether a record was there to compare with (or was written, with O(record=true)).
  returned: always
  type: bool
differs:
  description: What differs from the record, one entry each (C(inputs), C(file /etc/x), C(package containerd), ...).
  returned: always
  type: list
  elements: str
  sample: ["file /etc/apt/preferences.d/gpufleet-nvidia-driver.pref", "package nvidia-driver"]
record_file:
  description: The record's file.
  returned: always
  type: str
"""

import fnmatch
import glob
import hashlib
import json
import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule

BIG = 1 << 20
PATTERN = re.compile(r"[*?[]")


def file_state(path):
    """What the record keeps of one path: None when absent."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    state = [stat.filemode(info.st_mode), info.st_uid, info.st_gid]
    if stat.S_ISLNK(info.st_mode):
        state.append(os.readlink(path))
    elif stat.S_ISREG(info.st_mode):
        if info.st_size > BIG:
            state.append("size %d mtime %d" % (info.st_size, info.st_mtime_ns))
        else:
            digest = hashlib.sha256()
            try:
                with open(path, "rb") as handle:
                    for chunk in iter(lambda: handle.read(65536), b""):
                        digest.update(chunk)
                state.append(digest.hexdigest())
            except OSError as error:
                state.append("unreadable: %s" % error.strerror)
    return state


def read_paths(patterns, exclude=()):
    files = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if PATTERN.search(pattern) else [pattern]
        for path in matches:
            if not any(fnmatch.fnmatchcase(path, excluded) for excluded in exclude):
                files[path] = file_state(path)
    return files


def read_packages(module, expression):
    if expression is None:
        return {}
    dpkg_query = module.get_bin_path("dpkg-query")
    if dpkg_query is None:
        return {"(dpkg-query)": "not found"}
    rc, out, err = module.run_command(
        [dpkg_query, "--show", "--showformat=${binary:Package}\t${Version}\t${Status}\n"],
        environ_update={"LC_ALL": "C"})
    if rc != 0:
        return {"(dpkg-query)": "rc=%d %s" % (rc, err.strip())}
    found = re.compile(expression)
    packages = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and found.search(fields[0]):
            packages[fields[0]] = "%s %s" % (fields[1], fields[2])
    return packages


def parse_show(text):
    """systemctl show of several units: one dict per unit, in order."""
    units = [{}]
    for line in text.splitlines():
        if not line.strip():
            if units[-1]:
                units.append({})
            continue
        key, dummy, value = line.partition("=")
        units[-1][key] = value
    return [unit for unit in units if unit]


def read_units(module, names):
    if not names:
        return {}, {}
    properties = "Id,LoadState,UnitFileState,ActiveState,FragmentPath,DropInPaths,EnvironmentFiles,ExecStart"
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        return {"(systemctl)": "not found"}, {}
    rc, out, err = module.run_command([systemctl, "show", "--property=" + properties, "--"] + names,
                                      environ_update={"LC_ALL": "C"})
    if rc != 0:
        return {"(systemctl)": "rc=%d %s" % (rc, err.strip())}, {}
    units, files = {}, {}
    for name, unit in zip(names, parse_show(out)):
        units[name] = " ".join("%s=%s" % (key, unit.get(key, "")) for key in ("LoadState", "UnitFileState", "ActiveState"))
        paths = [unit.get("FragmentPath", "")] + unit.get("DropInPaths", "").split()
        paths += [entry.split(" (")[0] for entry in unit.get("EnvironmentFiles", "").split("\n") if entry]
        paths += re.findall(r"path=(\S+)", unit.get("ExecStart", ""))
        for path in paths:
            if path:
                files[path] = file_state(path)
    return units, files


def differences(old, new):
    differs = []
    if old.get("inputs") != new["inputs"]:
        differs.append("inputs")
    for kind, label in (("files", "file"), ("packages", "package"), ("units", "unit")):
        before, now = old.get(kind, {}), new[kind]
        differs.extend("%s %s" % (label, key) for key in sorted(set(before) | set(now)) if before.get(key) != now.get(key))
    return differs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            inputs=dict(type="str", required=True),
            paths=dict(type="list", elements="str", default=[]),
            exclude=dict(type="list", elements="str", default=[]),
            packages=dict(type="str"),
            units=dict(type="list", elements="str", default=[]),
            record=dict(type="bool", default=False),
            directory=dict(type="path", default="/var/lib/gpufleet/converged"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not re.match(r"^[A-Za-z0-9_.-]+$", params["name"]):
        module.fail_json(msg="name must be letters, digits, '_', '.' or '-', got %s" % json.dumps(params["name"]))
    path = os.path.join(params["directory"], params["name"] + ".json")
    units, unit_files = read_units(module, params["units"])
    files = read_paths(params["paths"], params["exclude"])
    files.update(unit_files)
    state = {"inputs": params["inputs"], "files": files, "packages": read_packages(module, params["packages"]),
             "units": units}
    if params["record"]:
        if not module.check_mode:
            os.makedirs(params["directory"], mode=0o700, exist_ok=True)
            scratch = path + ".tmp"
            with open(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
                json.dump(state, handle, sort_keys=True, indent=1)
            os.replace(scratch, path)
        module.exit_json(changed=False, current=False, recorded=not module.check_mode, differs=[], record_file=path)
    try:
        with open(path) as handle:
            old = json.load(handle)
    except (OSError, ValueError):
        module.exit_json(changed=False, current=False, recorded=False, differs=["no record"], record_file=path)
    differs = differences(old if isinstance(old, dict) else {}, state)
    module.exit_json(changed=False, current=not differs, recorded=True, differs=differs, record_file=path)


if __name__ == "__main__":
    main()
