# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A system unit's file and drop-ins as they are on disk: what systemd loads at its next reload.

``systemctl show`` answers with what systemd loaded (its FragmentPath and DropInPaths), which
stays as it was until ``systemctl daemon-reload`` (NeedDaemonReload=yes says a reload is due). A
drop-in written without a reload is on disk but not in DropInPaths, and it is what the unit runs
with after the next reload. This finds the files as systemd's unit loader does (systemd.unit(5),
"Unit File Load Path" and the drop-in rules):

* the fragment is the first ``<dir>/<unit>`` in the load path, in priority order;
* drop-ins are the ``*.conf`` files of ``<dir>/<unit>.d/`` and of the dash-truncated
  ``<prefix>-.<type>.d/`` (``foo-bar-.service.d`` for ``foo-bar-baz.service``) in every
  directory of the load path, then of the type-wide ``<type>.d/`` (``service.d``) in every
  one; of the files of one name the first in that order is used (systemd's
  unit_file_find_dropin_paths and conf_files_list_strv); one that is empty or a link to
  /dev/null masks that name; the rest are applied in the lexical order of their names,
  whichever folder each is in.

No Ansible imports: the collection's modules import it, and unit tests drive it with a folder
as the file system's root.
"""

from __future__ import annotations

import os

# The system manager's unit load path (systemd.unit(5), "System Unit Search Path"), highest
# priority first. /lib/systemd/system is read on systems whose /lib is not /usr/lib.
SYSTEM_UNIT_PATH = (
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/run/systemd/generator.early",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/run/systemd/system.attached",
    "/run/systemd/generator",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
    "/run/systemd/generator.late",
)


def unit_name(name):
    """'kubelet' -> 'kubelet.service'; a name with a unit type suffix stays as it is."""
    base, dot, suffix = name.rpartition(".")
    if dot and suffix in ("service", "socket", "target", "timer", "mount", "path", "slice", "scope", "device",
                          "swap", "automount"):
        return name
    return name + ".service"


def dropin_folders(name):
    """The names of the drop-in folders of unit ``name``, the most specific first."""
    name = unit_name(name)
    prefix, dummy, unit_type = name.rpartition(".")
    folders = [name + ".d"]
    parts = prefix.split("-")
    # foo-bar-baz.service: foo-bar-.service.d, then foo-.service.d
    for count in range(len(parts) - 1, 0, -1):
        if all(parts[:count]):
            folders.append("-".join(parts[:count]) + "-." + unit_type + ".d")
    folders.append(unit_type + ".d")
    return folders


def _masks(path):
    """A drop-in that is a link to /dev/null or an empty file masks its name."""
    try:
        if os.path.islink(path) and os.path.realpath(path) == "/dev/null":
            return True
        return os.path.getsize(path) == 0
    except OSError:
        return True


def _under(root, path):
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path


def unit_files_on_disk(name, root="/", search_path=SYSTEM_UNIT_PATH):
    """``(fragment or None, [drop-in paths in the order systemd applies them])`` of unit ``name``.

    Paths are given as on the node (without ``root``, which tests set to a folder standing for /).
    A fragment that is a link to /dev/null or empty is a masked unit: ``(None, [])``.
    """
    name = unit_name(name)
    fragment = None
    for folder in search_path:
        candidate = folder + "/" + name
        if os.path.lexists(_under(root, candidate)):
            if _masks(_under(root, candidate)):
                return None, []
            fragment = candidate
            break
    # systemd's order (unit_file_find_dropin_paths): in each directory of the load path the unit's own
    # folder, then its dash-truncated ones; the type-wide folder of every directory last. Of the files
    # of one name the first in this order is used.
    folders = dropin_folders(name)
    directories = [folder + "/" + each for folder in search_path for each in folders[:-1]]
    directories += [folder + "/" + folders[-1] for folder in search_path]
    chosen = {}
    for directory in directories:
        try:
            entries = os.listdir(_under(root, directory))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith(".conf") or entry in chosen:
                continue
            path = directory + "/" + entry
            if os.path.isdir(_under(root, path)):
                continue
            chosen[entry] = path
    dropins = [chosen[entry] for entry in sorted(chosen) if not _masks(_under(root, chosen[entry]))]
    return fragment, dropins
