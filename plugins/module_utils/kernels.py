# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernels: the loaded NVIDIA module and the installed kernels' modules.

``kernel_module_version`` reads the loaded module's version from procfs;
``scan_kernels`` lists the installed kernels, whether each has an NVIDIA
kernel module, and which one the node boots next (grubenv, /etc/default/grub).
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.inventory_values import (
    _read,
)


def kernel_module_version(path="/proc/driver/nvidia/version"):
    """Version of the loaded nvidia kernel module (None when not loaded)."""
    text = _read(path)
    if not text:
        return None
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


# The names the NVIDIA kernel module is installed under: NVIDIA's and Ubuntu's
# nvidia.ko, Debian's renamed nvidia-current.ko and nvidia-tesla(-<branch>).ko,
# compressed or not.
_NVIDIA_KO_RE = re.compile(r"^nvidia(-current|-tesla(-[0-9]+)?)?\.ko(\.(gz|xz|zst))?$")
# Kernel images as Debian and Ubuntu install them (vmlinux on some architectures), less what
# grub-mkconfig takes for garbage (grub_file_is_not_garbage: dpkg's and rpm's leftovers, backups,
# signatures).
_KERNEL_IMAGE_RE = re.compile(r"^vmlinu[xz]-(?P<release>[0-9][^/]*)$")
_GARBAGE_RE = re.compile(r"(\.dpkg-[a-z]+|\.rpmsave|\.rpmnew|\.bak|\.sig|\.old|~)$")
# A GRUB entry named by its place (0, 1>2): which kernel that is depends on grub.cfg's menu.
_ENTRY_NUMBER_RE = re.compile(r"^[0-9]+(>[0-9]+)*$")
# A grubenv or /etc/default/grub assignment.
_ASSIGNMENT_RE = re.compile(r"""^\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*?)\s*$""")


def version_key(release):
    """A kernel release as GRUB and linux-version order them: numbers as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"([0-9]+)", str(release)) if part]


def nvidia_module_of(release, modules="/lib/modules"):
    """Path of the NVIDIA kernel module installed for a kernel release, or None.

    DKMS installs it under updates/ (Debian, Ubuntu, NVIDIA's packages), some
    builds under extra/, Ubuntu's precompiled packages under kernel/nvidia-*/,
    NVIDIA's .run installer in kernel/drivers/video/.
    """
    base = os.path.join(modules, release)
    tops = [os.path.join(base, "updates"), os.path.join(base, "extra"), os.path.join(base, "kernel", "drivers", "video")]
    try:
        tops += sorted(os.path.join(base, "kernel", name) for name in os.listdir(os.path.join(base, "kernel"))
                       if name.startswith("nvidia"))
    except OSError:
        pass
    for top in tops:
        for folder, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                if _NVIDIA_KO_RE.match(name):
                    return os.path.join(folder, name)
    return None


def _assignments(text):
    values = {}
    for line in (text or "").splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = _ASSIGNMENT_RE.match(line)
        if match:
            values[match.group("key")] = match.group("value").strip().strip("\"'")
    return values


def _release_in(entry, releases):
    """The installed release a GRUB menu entry (title or id) names: the longest that occurs in it."""
    named = [release for release in releases if release in (entry or "")]
    return max(named, key=len) if named else None


def scan_kernels(boot="/boot", modules="/lib/modules", running=None, grub_default="/etc/default/grub"):
    """The kernels installed to boot (a kernel image in ``boot``), each with its NVIDIA module.

    The next boot's kernel: a one-time ``next_entry`` of GRUB's environment block, else its
    ``saved_entry`` under ``GRUB_DEFAULT=saved``, else an entry ``GRUB_DEFAULT`` names,
    else the newest installed (GRUB's first entry, as update-grub sorts them, and Debian's
    /vmlinuz link). An entry named by its place other than the first (``1>2``), or Ubuntu's
    ``GRUB_FLAVOUR_ORDER`` (which reorders the menu), cannot be told from here: the next boot is
    then None, with the reason in ``next_boot_source``, and any installed kernel may be it.
    """
    releases = []
    try:
        names = os.listdir(boot)
    except OSError:
        names = []
    for name in names:
        match = _KERNEL_IMAGE_RE.match(name)
        if match and not _GARBAGE_RE.search(name) and os.path.isfile(os.path.join(boot, name)) and match.group("release") not in releases:
            releases.append(match.group("release"))
    releases.sort(key=version_key, reverse=True)
    next_boot, source = None, None
    if releases:
        grubenv = _assignments(_read(os.path.join(boot, "grub", "grubenv")))
        defaults = {}
        for path in [grub_default] + sorted(glob.glob(grub_default + ".d/*.cfg")):
            defaults.update(_assignments(_read(path)))
        default = defaults.get("GRUB_DEFAULT", "0")
        # GRUB boots next_entry when it is set (a name it does not find: its first entry), else
        # GRUB_DEFAULT, which "saved" makes saved_entry (GRUB's 00_header).
        if grubenv.get("next_entry"):
            what, entry = "grub next_entry", grubenv["next_entry"]
        elif default == "saved":
            what, entry = "grub saved_entry", grubenv.get("saved_entry") or "0"
        else:
            what, entry = "GRUB_DEFAULT", default
        if defaults.get("GRUB_FLAVOUR_ORDER"):
            source = "unknown: GRUB_FLAVOUR_ORDER reorders GRUB's menu"
        elif _ENTRY_NUMBER_RE.match(entry) and entry != "0":
            source = "unknown: %s %s names an entry by its place in GRUB's menu" % (what, entry)
        else:
            next_boot = _release_in(entry, releases)
            source = what if next_boot else "newest installed"
            next_boot = next_boot or releases[0]
    installed = []
    for release in releases:
        installed.append({
            "release": release,
            "nvidia_module": nvidia_module_of(release, modules),
            "running": release == running,
            "next_boot": release == next_boot,
        })
    return {
        "running": running,
        "installed": installed,
        "next_boot": next_boot,
        "next_boot_source": source,
        "without_module": [entry["release"] for entry in installed if entry["nvidia_module"] is None],
    }
