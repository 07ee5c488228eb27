#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: converged
version_added: 0.2.0
short_description: "Internal: Tell in one call whether a node is still as a role's last complete run left it"
description:
  - Reads, in one call, everything a role's outcome depends on that lives on the node - the files it writes and
    reads, the packages it installs and holds, the systemd units it manages - and compares it, with the digest of
    the role's inputs, with the record the role's last complete run left on the node.
  - With O(record=false) (the default) it returns C(current=true) only when nothing differs, so that the role can
    skip its work; otherwise C(differs) names what changed since, and the role runs in full.
  - With O(record=true) it writes the record, at the end of a complete run that left the node converged.
  - The record is the role's own bookkeeping in O(directory), like a fact cache; writing it is not reported as a
    change.
  - Internal to the roles gpufleet.nvidia.gpu_driver, gpufleet.nvidia.gpu_container_toolkit and
    gpufleet.nvidia.gpu_kubelet (their fast re-run), not part of the collection's public interface; its options and
    results may change in any release.
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
        the P(gpufleet.nvidia.internal.converged_digest#filter) filter - a JSON object of one digest per input, so that a
        difference names the input (C(input vars.gpu_kubelet_taints)), or a single digest.
    type: raw
    required: true
  paths:
    description:
      - Files and folders whose state is read, as paths or shell patterns (C(/etc/apt/sources.list.d/*)).
      - For each file its type, mode, owner, group and content (its SHA-256; for files over 1 MiB, such as
        binaries, the size, inode and modification and change times, the last of which the kernel sets at every
        write and no one can set back); for a symbolic link its target's text and the state of the file it leads
        to; a path that is absent is recorded as absent. Patterns match hidden files too, as containerd's
        imports do.
      - The record keeps the patterns; a later comparison reads the record's patterns as well as these, so that
        files only a complete run knows of (the imports a runtime's configuration names) are watched by every
        comparison.
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
      - The unit file and drop-ins are those systemd loaded and those on disk, which it loads at its next reload (a
        drop-in written without C(systemctl daemon-reload) is on disk only).
    type: list
    elements: str
    default: []
  checks:
    description:
      - Live checks a comparison makes, of what a file's or a unit's state does not show (containerd active whose CRI
        plugin failed to load). A check that fails makes the node differ (C(check <name>)), so the role runs in full and
        its own checks say why.
      - With O(record=true) they are not run but kept in the record, as the complete run chose them for the node (the
        runtimes it configured); every comparison runs the record's checks as well as these.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: What the check is of, for C(differs).
        type: str
        required: true
      argv:
        description: The command, run without a shell; it fails when it exits other than 0.
        type: list
        elements: str
        required: true
      fails:
        description: A regular expression (Python, multiline); a match in the command's output is a failure.
        type: str
      unit:
        description: Run the check only while this unit (one of O(units)) is active.
        type: str
  notices:
    description:
      - With O(record=true), what the complete run said that holds while the node stays as recorded (no CDI spec while
        the driver does not answer, a runtime not running); a comparison that finds the node as recorded returns them
        and shows each as a warning, so that every run that skips the role's work says them again.
    type: list
    elements: str
    default: []
  record:
    description: Write the record of the node's state now instead of comparing with it.
    type: bool
    default: false
  compare:
    description:
      - Compare the node with the record. V(false) makes no comparison (C(current=false), as for a role that always runs
        in full) and only reads the NVIDIA facts when O(read_nvidia_facts) asks for them.
    type: bool
    default: true
  read_nvidia_facts:
    description:
      - Make the comparison with this run's NVIDIA facts. When no task of this run has read them (registered a
        C(__gpufleet_nvml_run), C(__gpu_<role>_nvml_run) or C(__gpu_<role>_converged) result that holds them), they
        are read first with M(gpufleet.nvidia.nvml_facts), returned as the C(nvidia) fact, and their digest takes the
        place of O(inputs)' C(facts.nvidia) (inputs made by P(gpufleet.nvidia.internal.converged_digest#filter) with a
        C(facts.nvidia) entry; other inputs are used as they are), which the controller made from the facts the play
        started with (a fact cache may have kept them from an earlier run).
      - Not with O(record=true).
    type: bool
    default: false
  directory:
    description: Where the records are kept.
    type: path
    default: /var/lib/gpufleet/converged
attributes:
  action:
    description: Indicates this has a corresponding action plugin, which reads the NVIDIA facts first (O(read_nvidia_facts)).
    support: full
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
  - A record is only believed when it is a regular file owned by the user the module runs as, writable by no one
    else, in a folder that is owned by that user or root and writable by no one else, as are the folders above it
    (a folder with the sticky bit, such as C(/tmp), excepted). Otherwise the comparison names the folder and the
    role runs in full, and writing a record fails with the folder named.
"""

EXAMPLES = r"""
- name: Compare the node with what the last complete run left, with this run's NVIDIA facts
  gpufleet.nvidia.internal.converged:
    name: gpu_kubelet
    read_nvidia_facts: true
    inputs: >-
      {{ {'vars': {'gpu_kubelet_taints': gpu_kubelet_taints}, 'facts': {'nvidia': ansible_facts['nvidia'] | default(none)}}
         | gpufleet.nvidia.internal.converged_digest('gpu_kubelet') }}
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
  description:
    - What differs from the record, one entry each (C(input vars.gpu_driver_branch), C(file /etc/x),
      C(package containerd), C(record directory /x ...), ...).
  returned: always
  type: list
  elements: str
  sample: ["input facts.nvidia", "file /etc/apt/preferences.d/gpufleet-nvidia-driver.pref", "package nvidia-driver"]
notices:
  description: The record's O(notices), from the last complete run; empty without a record.
  returned: always
  type: list
  elements: str
record_file:
  description: The record's file.
  returned: when compared or recorded
  type: str
ansible_facts:
  description: The NVIDIA facts read for this run, with O(read_nvidia_facts), as M(gpufleet.nvidia.nvml_facts) returns them.
  returned: when they were read
  type: dict
  contains:
    nvidia:
      description: The node's NVIDIA inventory.
      type: dict
"""

import fnmatch
import hashlib
import json
import os
import re
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.systemd_units import unit_files_on_disk

BIG = 1 << 20
# The file system's root the units' files on disk are looked for under (tests set a folder).
UNIT_ROOT = "/"
PATTERN = re.compile(r"[*?[]")


def _target_state(info, path):
    """Type, mode, owner, group and content of what lstat/stat gave for path."""
    state = [stat.filemode(info.st_mode), info.st_uid, info.st_gid]
    if stat.S_ISREG(info.st_mode):
        if info.st_size > BIG:
            state.append("size %d inode %d mtime %d ctime %d"
                         % (info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns))
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


def file_state(path):
    """What the record keeps of one path: None when absent. A link: its text, then what it leads to."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISLNK(info.st_mode):
        return _target_state(info, path)
    state = [stat.filemode(info.st_mode), info.st_uid, info.st_gid, os.readlink(path)]
    target = os.path.realpath(path)
    try:
        state.append(_target_state(os.stat(target), target))
    except OSError as error:
        state.append("unresolved: %s" % error.strerror)
    return state


def expand(pattern):
    """A shell pattern's matches, one path component at a time, hidden files included: a leading '.' needs no
    '.' in the pattern, as with Go's filepath.Glob that containerd resolves its imports with (and Python's glob
    with include_hidden, which Python before 3.11 lacks)."""
    if not PATTERN.search(pattern):
        return [pattern]
    parts = pattern.split(os.sep)
    found = [os.sep if pattern.startswith(os.sep) else ""]
    for index, part in enumerate(parts):
        if part == "" and index == 0:
            continue
        last = index == len(parts) - 1
        matches = []
        for folder in found:
            if not PATTERN.search(part):
                path = os.path.join(folder, part) if folder else part
                if last and os.path.lexists(path) or not last and os.path.isdir(path):
                    matches.append(path)
                continue
            try:
                names = os.listdir(folder or ".")
            except OSError:
                continue
            for name in sorted(names):
                path = os.path.join(folder, name) if folder else name
                if fnmatch.fnmatchcase(name, part) and (last or os.path.isdir(path)):
                    matches.append(path)
        found = matches
    return sorted(found)


def read_paths(patterns, exclude=()):
    files = {}
    for pattern in patterns:
        for path in expand(pattern):
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
        # EnvironmentFiles= and ExecStart= come once per entry: every entry is kept, one a line
        units[-1][key] = units[-1][key] + "\n" + value if key in units[-1] else value
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
        paths += re.findall(r"^\{ path=(\S+) ;", unit.get("ExecStart", ""), re.MULTILINE)
        for path in paths:
            if path:
                files[path] = file_state(path)
        # What systemd loaded stays as it was until a daemon-reload; the unit file and drop-ins on disk are
        # what it runs after the next one (a drop-in written without a reload, a unit file that now wins).
        # The same file under two names (/lib is /usr/lib where /usr is merged) is kept once.
        fragment, dropins = unit_files_on_disk(name, root=UNIT_ROOT)
        known = set(os.path.realpath(path) for path in paths if path)
        for path in ([fragment] if fragment else []) + dropins:
            if os.path.realpath(os.path.join(UNIT_ROOT, path.lstrip("/"))) not in known:
                files[path] = file_state(os.path.join(UNIT_ROOT, path.lstrip("/")))
    return units, files


def parse_inputs(value):
    """The inputs' digests: a dict of one per input, or the text itself for a single digest. ansible-core before
    2.19 hands over the filter's JSON text as the dict it reads, later releases as the text."""
    if isinstance(value, dict):
        return dict((str(key), str(digest)) for key, digest in value.items())
    try:
        inputs = json.loads(value)
    except (TypeError, ValueError):
        return str(value)
    return parse_inputs(inputs) if isinstance(inputs, dict) else str(value)


def differences(old, new):
    differs = []
    before, now = old.get("inputs"), new["inputs"]
    if isinstance(before, dict) and isinstance(now, dict):
        differs.extend("input %s" % key for key in sorted(set(before) | set(now)) if before.get(key) != now.get(key))
    elif before != now:
        differs.append("inputs")
    for kind, label in (("files", "file"), ("packages", "package"), ("units", "unit")):
        before, now = old.get(kind, {}), new[kind]
        differs.extend("%s %s" % (label, key) for key in sorted(set(before) | set(now)) if before.get(key) != now.get(key))
    return differs


def run_checks(module, checks, units):
    """What fails of the live checks: 'check <name>: <why>' each. A check of a unit that is not active is not run."""
    failed = []
    for check in checks:
        unit = check.get("unit")
        if unit and "ActiveState=active" not in units.get(unit, ""):
            continue
        rc, out, err = module.run_command(check["argv"], environ_update={"LC_ALL": "C"})
        if rc != 0:
            failed.append("check %s: %s exited %d %s" % (check["name"], check["argv"][0], rc, (err or out).strip()[:200]))
            continue
        match = re.search(check["fails"], out, re.MULTILINE) if check.get("fails") else None
        if match:
            failed.append("check %s: %s" % (check["name"], match.group(0).strip()))
    return failed


def writable_by_others(info):
    """Writable by anyone but its owner and root: by all, or by a group other than root's."""
    return bool(info.st_mode & stat.S_IWOTH or info.st_mode & stat.S_IWGRP and info.st_gid != 0)


def unsafe_above(folder, uid):
    """Why a folder and those above it let others replace what is in it, or None. A folder must be owned by the
    module's user or root and writable by no one else, unless root owns it and it has the sticky bit (/tmp)."""
    while True:
        try:
            info = os.stat(folder)
        except OSError as error:
            return "%s: %s" % (folder, error.strerror)
        if info.st_uid not in (uid, 0) or (writable_by_others(info) and not (info.st_mode & stat.S_ISVTX and info.st_uid == 0)):
            return "%s is writable by others (mode %s, uid %d)" % (folder, stat.filemode(info.st_mode), info.st_uid)
        if folder == os.path.dirname(folder):
            return None
        folder = os.path.dirname(folder)


def unsafe(path, uid, folder):
    """Why a record folder (folder=True) or file cannot be believed, or None: it must be owned by the module's user
    (a folder may be root's too) and writable by no one else, and so every folder above it and above what it
    resolves to."""
    real = os.path.realpath(path)
    try:
        info = os.lstat(real if folder else path)
    except OSError as error:
        return "%s: %s" % (path, error.strerror)
    if not (stat.S_ISDIR if folder else stat.S_ISREG)(info.st_mode):
        return "%s is not a %s" % (path, "folder" if folder else "regular file")
    if info.st_uid not in ((uid, 0) if folder else (uid,)):
        return "%s is owned by uid %d" % (path, info.st_uid)
    if writable_by_others(info):
        return "%s is writable by others (mode %s)" % (path, stat.filemode(info.st_mode))
    return unsafe_above(os.path.dirname(real), uid) or unsafe_above(os.path.dirname(path), uid)


def write_record(path, state):
    """The record, written to a scratch file of a name no one can guess or link in advance (mkstemp: O_EXCL,
    mode 0600), then moved into place."""
    descriptor, scratch = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".",
                                           suffix=".tmp")
    try:
        with open(descriptor, "w") as handle:
            json.dump(state, handle, sort_keys=True, indent=1)
        os.replace(scratch, path)
    except BaseException:
        os.unlink(scratch)
        raise


def read_record(path):
    """The record's content, read through no link; None when there is none or it is damaged."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with open(descriptor) as handle:
            old = json.load(handle)
    except (OSError, ValueError):
        return None
    return old if isinstance(old, dict) else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            inputs=dict(type="raw", required=True),
            paths=dict(type="list", elements="str", default=[]),
            exclude=dict(type="list", elements="str", default=[]),
            packages=dict(type="str"),
            units=dict(type="list", elements="str", default=[]),
            checks=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                argv=dict(type="list", elements="str", required=True),
                fails=dict(type="str"),
                unit=dict(type="str"),
            )),
            notices=dict(type="list", elements="str", default=[]),
            record=dict(type="bool", default=False),
            # Taken by the action plugin (plugins/action/internal/converged.py), which never hands them over.
            compare=dict(type="bool", default=True),
            read_nvidia_facts=dict(type="bool", default=False),
            directory=dict(type="path", default="/var/lib/gpufleet/converged"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not re.match(r"^[A-Za-z0-9_.-]+$", params["name"]):
        module.fail_json(msg="name must be letters, digits, '_', '.' or '-', got %s" % json.dumps(params["name"]))
    directory = os.path.normpath(params["directory"])
    path = os.path.join(directory, params["name"] + ".json")
    uid = os.geteuid()
    old = None
    if not params["record"]:
        problem = unsafe(directory, uid, True) if os.path.lexists(directory) else None
        if problem is None and os.path.lexists(path):
            problem = unsafe(path, uid, False)
            old = None if problem else read_record(path)
        if problem:
            module.exit_json(changed=False, current=False, recorded=False, record_file=path, notices=[],
                             differs=["record directory %s: %s; the record is not believed" % (directory, problem)])
        if old is None:
            module.exit_json(changed=False, current=False, recorded=False, differs=["no record"], record_file=path,
                             notices=[])
    patterns = sorted(set(params["paths"]) | set(old.get("patterns") or [] if old else []))
    units, unit_files = read_units(module, params["units"])
    files = read_paths(patterns, params["exclude"])
    files.update(unit_files)
    state = {"inputs": parse_inputs(params["inputs"]), "patterns": sorted(set(params["paths"])), "files": files,
             "packages": read_packages(module, params["packages"]), "units": units}
    if params["record"]:
        state["notices"] = [notice for notice in params["notices"] if notice]
        state["checks"] = params["checks"]
    if params["record"]:
        if not module.check_mode:
            umask = os.umask(0o022)  # the folders above the record's made writable by their owner only
            try:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            except OSError as error:
                module.fail_json(msg="Cannot make the record directory %s: %s" % (directory, error.strerror))
            finally:
                os.umask(umask)
            problem = unsafe(directory, uid, True)
            if problem:
                module.fail_json(msg="The record directory %s cannot be trusted: %s. A record there could be forged to "
                                     "make the role skip its work; make it owned by uid %d and writable by no one else "
                                     "(chmod go-w), or choose another directory." % (directory, problem, uid))
            try:
                write_record(path, state)
            except OSError as error:
                module.fail_json(msg="Cannot write the record %s: %s" % (path, error))
        module.exit_json(changed=False, current=False, recorded=not module.check_mode, differs=[], record_file=path,
                         notices=state["notices"])
    checks = dict((check["name"], check) for check in (old.get("checks") or []) + params["checks"]
                  if isinstance(check, dict) and check.get("name") and check.get("argv"))
    differs = differences(old, state) + run_checks(module, [checks[name] for name in sorted(checks)], units)
    notices = [str(notice) for notice in old.get("notices") or [] if notice]
    if not differs:
        # Said again on every run that skips the role's work, while the node stays as the record says.
        for notice in notices:
            module.warn(notice)
    module.exit_json(changed=False, current=not differs, recorded=True, differs=differs, record_file=path,
                     notices=notices)


if __name__ == "__main__":
    main()
