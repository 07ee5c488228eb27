# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind the gpu_driver role's decisions: module flavour, packages, reboot.

Pure functions over facts and the role's data tables, so the decisions are
unit-tested on data alone.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import re

from ansible.errors import AnsibleFilterError

# GPU generations, oldest first, as NVML and nvidia-smi name their architectures
# (nvidia-smi prints "Ada Lovelace"; NVML's 2 to 10 are Kepler to Blackwell).
GENERATIONS = ("tesla", "fermi", "kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper",
               "blackwell")
_ARCHITECTURE_ALIASES = {"ada lovelace": "ada"}
# Architectures that NVIDIA's open kernel modules do not support.
PRE_TURING = GENERATIONS[:GENERATIONS.index("turing")]

# The newest driver branch that still supports a generation (NVIDIA's supported-chips
# lists, the legacy sections of the driver README): 390 was the last for Fermi, 470 for
# Kepler, and 580, the long-term branch supported until 2028, the last for Maxwell,
# Pascal and Volta. Branches 590 and newer need Turing or newer.
LAST_BRANCH = {"tesla": 340, "fermi": 390, "kepler": 470, "maxwell": 580, "pascal": 580, "volta": 580}

# PCI device ids by generation where no driver names the architecture yet (the same
# README's tables): below 0x1340 Kepler or older; 0x1340 to 0x1dff Maxwell, Pascal and
# Volta (the last, V100S, is 0x1df6); Turing starts at 0x1e00 (TU10x) and every later
# generation is higher (Ampere 0x20xx, Hopper 0x23xx, Ada 0x26xx-0x28xx). Blackwell:
# 0x2900-0x2fff (B200 0x2901, GB200 0x2941, RTX PRO 6000 0x2bb4, GeForce RTX 50) and
# B300 0x3182, GB300 0x31c2-0x31c3.
MAXWELL_FIRST_DEVICE_ID = 0x1340
TURING_FIRST_DEVICE_ID = 0x1E00
BLACKWELL_DEVICE_IDS = ((0x2900, 0x2FFF), (0x3182, 0x3182), (0x31C2, 0x31C3))
_PCI_GENERATIONS = (
    # (first id, generations the id may be, label)
    (0, ("tesla", "fermi", "kepler"), "Kepler or older"),
    (MAXWELL_FIRST_DEVICE_ID, ("maxwell", "pascal", "volta"), "Maxwell, Pascal or Volta"),
    (TURING_FIRST_DEVICE_ID, ("turing", "ampere", "ada", "hopper", "blackwell"), "Turing or newer"),
)

# An NVSwitch is an NVIDIA PCI function of class 0x0680 ("bridge, other"), the
# class the NVSwitch kernel driver claims: gen 1 0x1ac2 (HGX-2), gen 2 0x1af1
# (HGX A100), gen 3 0x22a3 (HGX H100/H200). The fourth generation (HGX B200/B300)
# is not a PCI device of the host, so the bus cannot tell such a board.
NVSWITCH_PCI_CLASS = "0x0680"
_BRANCH_RE = re.compile(r"^[0-9]{3}$")


def _capability_generation(capability):
    try:
        major, minor = (int(part) for part in str(capability).split(".")[:2])
    except ValueError:
        return None
    if major < 2:
        return "tesla"
    if major >= 10:
        # 10.x data-center Blackwell (B200, B300), 12.x RTX Blackwell; later
        # majors are newer still and pass every check Blackwell passes.
        return "blackwell"
    by_major = {2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada" if minor == 9 else "ampere"
    return by_major.get(major)


def _gpu_generation(gpu):
    """One GPU of the nvml_facts facts: its generation, 'newer' (unknown name) or None."""
    capability = gpu.get("compute_capability")
    if capability:
        generation = _capability_generation(capability)
        if generation:
            return generation
    architecture = (gpu.get("architecture") or "").strip().lower()
    if architecture:
        architecture = _ARCHITECTURE_ALIASES.get(architecture, architecture)
        return architecture if architecture in GENERATIONS else "newer"
    return None


def _pretty(generation):
    return {"ada": "Ada Lovelace", "newer": None, None: None}.get(generation, (generation or "").title() or None)


def _pci_generations(function):
    """(generations the PCI id may be, label) or (None, None) without an id."""
    device_id = function.get("device_id")
    try:
        number = int(str(device_id), 16)
    except (TypeError, ValueError):
        return None, None
    if any(first <= number <= last for first, last in BLACKWELL_DEVICE_IDS):
        return ("blackwell",), "Blackwell"
    generations, label = None, None
    for first, names, name in _PCI_GENERATIONS:
        if number >= first:
            generations, label = names, name
    return generations, label


def _described_gpus(facts):
    """[(description, generations it may be)] for the host's GPUs.

    The driver's view (NVML or nvidia-smi) when it reports GPUs, else the
    PCI functions of class 0x0300/0x0302 with the generations their ids allow.
    """
    facts = facts or {}
    described = []
    for gpu in facts.get("gpus") or []:
        generation = _gpu_generation(gpu)
        label = "%s at %s" % (gpu.get("name"), gpu.get("pci_bus_id"))
        described.append((label, (generation,) if generation else None, _pretty(generation)))
    if described:
        return described
    for function in facts.get("pci_devices") or []:
        if not function.get("is_gpu"):
            continue
        generations, name = _pci_generations(function)
        label = "PCI device %s at %s" % (function.get("device_id"), function.get("address"))
        described.append((label, generations, ("%s by its PCI id" % name) if name else None))
    return described


def older_gpus(facts):
    """Descriptions of the GPUs that are older than Turing, from NVML/nvidia-smi or PCI ids."""
    return [label for label, generations, dummy in _described_gpus(facts)
            if generations and all(generation in PRE_TURING for generation in generations)]


def blackwell_gpus(facts):
    """Descriptions of the host's Blackwell GPUs (open kernel modules only; NVLink5 boards)."""
    return [label for label, generations, dummy in _described_gpus(facts) if generations == ("blackwell",)]


def driver_unsupported_gpus(facts, branch):
    """The host's GPUs that driver branch ``branch`` does not support, described.

    Each description names the GPU, its generation and the newest branch that
    still supports it; empty when the branch supports every GPU (or nothing is
    known about them).
    """
    if not _BRANCH_RE.match(str(branch)):
        raise AnsibleFilterError("gpu_driver_branch must be a three-digit branch such as '580', got %r" % (branch,))
    unsupported = []
    for label, generations, name in _described_gpus(facts):
        if not generations:
            continue
        lasts = [LAST_BRANCH.get(generation) for generation in generations]
        if any(last is None for last in lasts):
            continue  # possibly a generation the branch supports
        last = max(lasts)
        if int(branch) > last:
            unsupported.append({"gpu": label, "generation": name, "last_branch": str(last)})
    return unsupported


def driver_nvswitches(facts):
    """PCI addresses of the host's NVSwitches.

    ``facts['nvswitches']`` when nvml_facts reports them, else the NVIDIA PCI
    functions of class 0x0680 (or marked ``is_nvswitch``) in ``pci_devices``.
    """
    facts = facts or {}
    reported = facts.get("nvswitches")
    if isinstance(reported, list):
        return [item.get("address") if isinstance(item, dict) else str(item) for item in reported]
    return [function.get("address") for function in facts.get("pci_devices") or []
            if function.get("is_nvswitch") or str(function.get("class") or "").lower().startswith(NVSWITCH_PCI_CLASS)]


def driver_flavor(requested, facts):
    """Resolve gpu_driver_module_flavor ('auto', 'open', 'proprietary') against the GPUs."""
    if requested not in ("auto", "open", "proprietary"):
        raise AnsibleFilterError(
            "gpu_driver_module_flavor must be auto, open or proprietary, got %r" % (requested,))
    older = older_gpus(facts)
    blackwell = blackwell_gpus(facts)
    if older and blackwell:
        raise AnsibleFilterError(
            "This host has GPUs older than Turing (%s), which only NVIDIA's proprietary kernel modules drive, and "
            "Blackwell GPUs (%s), which only the open ones drive: no gpu_driver_module_flavor serves both. Put them "
            "in different hosts." % ("; ".join(older), "; ".join(blackwell)))
    if requested == "open" and older:
        raise AnsibleFilterError(
            "gpu_driver_module_flavor is 'open' but NVIDIA's open kernel modules need Turing or newer, and "
            "this host has older GPUs: %s. Use gpu_driver_module_flavor: proprietary (or auto)." % "; ".join(older))
    if requested == "proprietary" and blackwell:
        raise AnsibleFilterError(
            "gpu_driver_module_flavor is 'proprietary' but Blackwell GPUs run only on NVIDIA's open kernel "
            "modules, and this host has: %s. Use gpu_driver_module_flavor: open (or auto)." % "; ".join(blackwell))
    if requested == "auto":
        return "proprietary" if older else "open"
    return requested


def driver_packages(table, source, kernel_module, flavor, branch, kernel="", version=""):
    """Package names for a source, kernel module type, flavour and branch.

    ``table`` is the role's per-OS data: table[source][kernel_module][flavor]
    is a list of names in which ``{branch}`` is replaced by the branch,
    ``{kernel}`` by the running kernel's release and ``{kernel_flavour}`` by
    its flavour (6.8.0-45-generic: generic), for precompiled modules, and
    ``{pin}`` by the exact ``version`` when one is asked for, else the branch
    (NVIDIA's pinning packages: nvidia-driver-pinning-590, -590.48.01).
    """
    if not _BRANCH_RE.match(str(branch)):
        raise AnsibleFilterError("gpu_driver_branch must be a three-digit branch such as '550', got %r" % (branch,))
    by_module = (table or {}).get(source)
    if by_module is None:
        raise AnsibleFilterError(
            "gpu_driver_source %r is not available on this OS; available: %s"
            % (source, ", ".join(sorted(table or {})) or "none"))
    by_flavor = by_module.get(kernel_module)
    if by_flavor is None:
        raise AnsibleFilterError(
            "gpu_driver_kernel_module %r is not available with gpu_driver_source %r on this OS; available: %s"
            % (kernel_module, source, ", ".join(sorted(by_module))))
    names = by_flavor.get(flavor, by_flavor.get("any"))
    if names is None:
        raise AnsibleFilterError(
            "gpu_driver_module_flavor %r is not available with gpu_driver_source %r and kernel module %r on "
            "this OS; available: %s" % (flavor, source, kernel_module, ", ".join(sorted(by_flavor))))
    flavour = re.sub(r"^[0-9.]+-[0-9]+-", "", str(kernel))
    pin = str(version or branch)
    return [name.replace("{branch}", str(branch)).replace("{kernel_flavour}", flavour).replace("{kernel}", str(kernel))
            .replace("{pin}", pin) for name in names]


def driver_branch_of(version):
    """'1:535.261.03-1' -> '535'; None for an empty or unversioned value."""
    if not version:
        return None
    text = str(version).split(":", 1)[-1]
    match = re.match(r"^([0-9]+)\.", text)
    return match.group(1) if match else None


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_MONTH_RE = re.compile(r"^([0-9]{4})-([0-9]{2})$")
_DATE_RE = re.compile(r"^([0-9]{4})-([0-9]{2})(?:-[0-9]{2})?")


def _month(text, what):
    match = _MONTH_RE.match(str(text))
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise AnsibleFilterError("%s must be a month as YYYY-MM, got %r" % (what, text))
    return int(match.group(1)), int(match.group(2))


def _month_words(month):
    return "%s %d" % (_MONTHS[month[1] - 1], month[0])


def driver_end_of_life(branch, lifecycle, today, facts=None):
    """The warning for a driver branch past its end of life on ``today``, or ''.

    ``lifecycle`` maps branches to ``{"designation": ..., "end_of_life": ...}`` (NVIDIA's data
    center driver lifecycle), the end of life being a month ``YYYY-MM``, ``ended`` (NVIDIA
    lists the branch as past its end of life without a month) or None (no date: a new
    feature branch NVIDIA has given none). A branch is past its end of life from the month
    after its month. A branch the table does not know is past it when it is older than the
    table's newest branch (NVIDIA: every branch its table does not list is past its end);
    a newer one, a branch without a date, or a value that is not a branch gets no warning.
    With the host's ``facts`` (nvml_facts), the branches the warning offers instead are
    only those that drive its GPUs.
    """
    if branch in (None, ""):
        return ""
    branch = str(branch)
    if not _BRANCH_RE.match(branch):
        return ""
    match = _DATE_RE.match(str(today))
    if not match:
        raise AnsibleFilterError("today must be a date as YYYY-MM-DD, got %r" % (today,))
    now = (int(match.group(1)), int(match.group(2)))
    table = {}
    for key, entry in (lifecycle or {}).items():
        key = str(key)
        if not _BRANCH_RE.match(key) or not isinstance(entry, dict) or not entry.get("designation"):
            raise AnsibleFilterError("the lifecycle table's entry %r is not {designation, end_of_life}" % (key,))
        end = entry.get("end_of_life")
        if end not in (None, "ended"):
            end = _month(end, "the end of life of branch %s" % key)
        table[key] = (entry["designation"], end)
    supported = ["%s (%s, to %s)" % (key, designation, _month_words(end))
                 for key, (designation, end) in sorted(table.items())
                 if isinstance(end, tuple) and end >= now
                 and not (facts and driver_unsupported_gpus(facts, key))]
    advice = (" Move to a branch NVIDIA still supports that drives this node's GPUs: %s." % ", ".join(supported)
              if supported else " No branch NVIDIA still supports drives this node's GPUs." if facts and table
              else "")
    if branch not in table:
        if table and int(branch) < max(int(key) for key in table):
            return ("Driver branch %s is past its end of life: NVIDIA's lifecycle no longer lists it, and lists "
                    "every branch it still supports.%s" % (branch, advice))
        return ""
    designation, end = table[branch]
    if end == "ended":
        when = "is past its end of life"
    elif end is not None and now > end:
        when = "reached its end of life in %s" % _month_words(end)
    else:
        return ""
    return "Driver branch %s (%s) %s: NVIDIA no longer fixes it, security fixes included.%s" % (
        branch, designation, when, advice)


def driver_end_of_life_summary(pairs, most=10):
    """[(host, warning)] -> one line per distinct warning, naming its hosts: what a run says once.

    Hosts without a warning are left out; at most ``most`` names a line, then how many more.
    """
    by_warning = {}
    for pair in pairs or []:
        host, warning = list(pair)[:2]
        if warning:
            by_warning.setdefault(warning, []).append(str(host))
    lines = []
    for warning in sorted(by_warning, key=lambda text: (-len(by_warning[text]), text)):
        hosts = sorted(by_warning[warning])
        names = ", ".join(hosts[:most]) + (" and %d more" % (len(hosts) - most) if len(hosts) > most else "")
        lines.append("%d node%s (%s): %s" % (len(hosts), "" if len(hosts) == 1 else "s", names, warning))
    return lines


def driver_upstream(version):
    """'1:590.48.01-1' -> '590.48.01': the upstream part of a Debian version, '' for none."""
    if not version:
        return ""
    text = str(version).split(":", 1)[-1]
    return text.rsplit("-", 1)[0] if "-" in text else text


def driver_scheme(branch, unbranched_from=""):
    """'unbranched' from branch ``unbranched_from`` on (NVIDIA's CUDA repository: 590), else 'branched'.

    From 590 the repository names the driver's packages without the branch
    (nvidia-open, cuda-drivers, nvidia-driver) and selects the branch with a
    pinning package (nvidia-driver-pinning-590); up to 580 the metapackages
    carry it (cuda-drivers-580, nvidia-driver-580-open on Ubuntu).
    """
    if not _BRANCH_RE.match(str(branch)):
        raise AnsibleFilterError("gpu_driver_branch must be a three-digit branch such as '590', got %r" % (branch,))
    if unbranched_from and int(branch) >= int(unbranched_from):
        return "unbranched"
    return "branched"


def driver_fabric_manager_packages(table, source, branch, nvlink5=False):
    """The fabric manager's packages for a source and branch.

    ``table[source]`` holds ``packages`` (at the driver's version), for NVLink5
    boards (Blackwell) ``nvlink5`` (at the driver's version) and
    ``nvlink5_own_version`` (versioned on their own, such as nvlsm), and
    ``unbranched_from``: ``{-branch}`` in a name becomes ``-<branch>`` below that
    branch and nothing from it on. Returns ``{"versioned": [...], "own_version": [...]}``.
    """
    if not _BRANCH_RE.match(str(branch)):
        raise AnsibleFilterError("gpu_driver_branch must be a three-digit branch such as '590', got %r" % (branch,))
    entry = (table or {}).get(source)
    if not entry:
        raise AnsibleFilterError(
            "The fabric manager is not available from gpu_driver_source %r on this OS (sources that carry it: %s). "
            "Use gpu_driver_source: cuda_repo, or gpu_driver_fabric_manager: false if this board has no NVSwitch."
            % (source, ", ".join(sorted(table or {})) or "none"))
    suffix = "" if driver_scheme(branch, entry.get("unbranched_from") or "") == "unbranched" else "-%s" % branch
    versioned = list(entry.get("packages") or [])
    own = []
    if nvlink5:
        if "nvlink5" not in entry:
            raise AnsibleFilterError(
                "This board's Blackwell GPUs talk over NVLink5, whose fabric manager needs the NVLink subnet manager "
                "(nvlsm) and libnvsdm, which gpu_driver_source %r does not carry on this OS. Use "
                "gpu_driver_source: cuda_repo." % (source,))
        versioned += entry.get("nvlink5") or []
        own += entry.get("nvlink5_own_version") or []
    return {"versioned": [name.replace("{-branch}", suffix) for name in versioned],
            "own_version": [name.replace("{-branch}", suffix) for name in own]}


def _dpkg_order(char):
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _dpkg_compare_part(left, right):
    """dpkg's verrevcmp: letters before other characters, '~' before everything, digits as numbers."""
    i = j = 0
    while i < len(left) or j < len(right):
        first_diff = 0
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            a = _dpkg_order(left[i]) if i < len(left) else 0
            b = _dpkg_order(right[j]) if j < len(right) else 0
            if a != b:
                return a - b
            i += 1
            j += 1
        while i < len(left) and left[i] == "0":
            i += 1
        while j < len(right) and right[j] == "0":
            j += 1
        while i < len(left) and left[i].isdigit() and j < len(right) and right[j].isdigit():
            if not first_diff:
                first_diff = ord(left[i]) - ord(right[j])
            i += 1
            j += 1
        if i < len(left) and left[i].isdigit():
            return 1
        if j < len(right) and right[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _dpkg_split(version):
    text = str(version)
    epoch, rest = (text.split(":", 1) if ":" in text else ("0", text))
    upstream, revision = (rest.rsplit("-", 1) if "-" in rest else (rest, "0"))
    return int(epoch or 0), upstream, revision


def dpkg_compare(left, right):
    """<0, 0 or >0 as Debian version ``left`` sorts before, with or after ``right`` (deb-version(7))."""
    left_epoch, left_upstream, left_revision = _dpkg_split(left)
    right_epoch, right_upstream, right_revision = _dpkg_split(right)
    if left_epoch != right_epoch:
        return left_epoch - right_epoch
    return _dpkg_compare_part(left_upstream, right_upstream) or _dpkg_compare_part(left_revision, right_revision)


def driver_available_versions(madison):
    """Versions that ``apt-cache madison NAME`` lists (its text or lines), newest first, once each."""
    lines = madison.splitlines() if isinstance(madison, str) else list(madison or [])
    versions = []
    for line in lines:
        fields = [field.strip() for field in str(line).split("|")]
        if len(fields) >= 2 and fields[1] and fields[1] not in versions:
            versions.append(fields[1])
    ordered = []
    for version in versions:
        position = 0
        while position < len(ordered) and dpkg_compare(ordered[position], version) > 0:
            position += 1
        ordered.insert(position, version)
    return ordered


def driver_newest_version(madison, glob):
    """The newest version ``apt-cache madison`` lists whose epoch-less form matches ``glob``; None if none does."""
    for version in driver_available_versions(madison):
        if fnmatch.fnmatchcase(str(version).split(":", 1)[-1], glob):
            return version
    return None


def driver_held_packages(selections):
    """{name: version} of held, installed packages, from
    ``dpkg-query -W -f='${binary:Package} ${Version} ${Status}\\n'`` (text or lines)."""
    lines = selections.splitlines() if isinstance(selections, str) else list(selections or [])
    held = {}
    for line in lines:
        fields = str(line).split()
        if len(fields) == 5 and fields[2] == "hold" and fields[4] == "installed":
            held[fields[0].split(":", 1)[0]] = fields[1]
    return held


def dpkg_audit_packages(audit):
    """The packages ``dpkg --audit`` names (its lines that start with a space), in its order; its whole text when it
    names none, so that a message always says what dpkg found."""
    names = [line.split()[0] for line in str(audit or "").splitlines() if line.startswith(" ") and line.strip()]
    if names:
        return list(dict.fromkeys(names))
    text = " ".join(str(audit or "").split())
    return [text] if text else []


# dpkg's states of a package an install left unfinished (dpkg-query(1): Status is "want eflag status").
DPKG_UNFINISHED = ("half-installed", "unpacked", "half-configured", "triggers-awaited", "triggers-pending")


def dpkg_unfinished_packages(selections):
    """The packages ``dpkg-query --show --showformat='${binary:Package} ${Version} ${Status}\\n'`` shows unfinished:
    in a state an install left half done, or marked reinstreq."""
    names = []
    for line in str(selections or "").splitlines():
        fields = line.split()
        if len(fields) == 5 and (fields[3] == "reinstreq" or fields[4] in DPKG_UNFINISHED):
            names.append(fields[0])
    return names


def driver_staying_version(specs, branch_packages):
    """The driver version a run keeps: the upstream version every ``name=version``
    request of a package matching the regex ``branch_packages`` asks for exactly
    (as driver_install_specs asks for an installed, matching version); '' when any
    of them asks for a glob (a first install or a change) or they disagree.
    """
    pattern = re.compile(branch_packages)
    versions = set()
    for spec in specs or []:
        name, dummy, version = str(spec).partition("=")
        if not pattern.search(name):
            continue
        if not version or "*" in version or "?" in version:
            return ""
        versions.add(driver_upstream(version))
    return versions.pop() if len(versions) == 1 else ""


# Names of the fabric manager's main package in every scheme and source
# (nvidia-fabricmanager, nvidia-fabricmanager-570).
FABRIC_MANAGER_PACKAGE_RE = re.compile(r"^nvidia-fabricmanager(-[0-9]{3})?$")


def driver_upgrade_reasons(facts, branch="", version="", packages=None):
    """Why a node needs the driver upgrade playbook's work, as sentences (empty: it is on the target).

    ``facts`` are ansible_facts['nvidia'] before the upgrade, ``branch`` and
    ``version`` the target (gpu_driver_branch, gpu_driver_version) and
    ``packages`` package_facts' ``ansible_facts['packages']``: a fabric
    manager installed at a version other than the running driver's needs the
    node's turn too, since it refuses to start unless the two are equal.
    """
    facts = facts or {}
    branch, version = str(branch or ""), str(version or "")
    running = facts.get("driver_version") or ""
    if facts.get("state") != "ok":
        return ["nvml_facts says %s (%s)" % (facts.get("state"), facts.get("message"))]
    reasons = []
    if version and version != running:
        reasons.append("it runs driver %s, not %s" % (running, version))
    elif not version and running.split(".")[0] != branch:
        reasons.append("it runs driver %s, not branch %s" % (running, branch))
    for name, entries in sorted((packages or {}).items()):
        if not FABRIC_MANAGER_PACKAGE_RE.match(name):
            continue
        for entry in entries if isinstance(entries, list) else [{"version": entries}]:
            installed = driver_upstream(entry.get("version"))
            if installed and installed != running:
                reasons.append("its fabric manager %s is at %s, the driver at %s" % (name, installed, running))
    return reasons


def driver_reboot_reasons(facts, nouveau_loaded=False, module_changed=False, kernel_module="dkms"):
    """Why this host needs a reboot, as a list of sentences (empty: no reboot).

    ``facts`` are ansible_facts['nvidia'] after the install; a host without a
    kernel module of ours (kernel_module 'none') never needs one.
    """
    if kernel_module == "none":
        return []
    facts = facts or {}
    reasons = []
    if nouveau_loaded:
        reasons.append("the nouveau module is loaded and must give way to nvidia")
    if module_changed:
        reasons.append("the NVIDIA kernel module package changed")
    if facts.get("state") == "driver_mismatch":
        reasons.append("NVML reports that the loaded kernel module and the libraries differ")
    elif facts.get("state") == "driver_not_loaded":
        reasons.append("the driver is installed but its kernel module is not loaded")
    return reasons


NODE_STATES = ("unknown", "serving", "drained")


def driver_disruption(specs, installed, branch_packages, facts, node_state="unknown", allow=False,
                      installed_branches=None, branch=""):
    """What a gpu_driver run would disrupt on a node, and whether it may.

    ``specs`` are the run's apt requests (driver_install_specs), ``installed`` package_facts' packages,
    ``branch_packages`` the regex of the driver's own packages, ``facts`` ansible_facts['nvidia'] before any change,
    ``node_state`` what the playbook read of the node's Node (gpu_driver_node_state: unknown, serving or drained)
    and ``allow`` gpu_driver_allow_disruption. Returns:

    - ``moves``: 'name installed -> requested' for each installed driver package the run would move to another
      version (a package requested at the version it has, or not installed yet, moves nothing), and the branch
      change when ``installed_branches`` (the branches of the driver's packages installed) are not ``branch``: where
      the branch is in the packages' names (Ubuntu's nvidia-utils-570-server, NVIDIA's cuda-drivers-580) the new
      branch's packages are other packages, which no version comparison sees;
    - ``loaded``: whether a driver runs (nvml_facts reports its version, a loaded kernel module, or a module that
      differs from the libraries, also when NVML itself fails);
    - ``change_allowed``: whether the run may move a loaded driver: on a drained node, or, where the cluster was not
      asked, with gpu_driver_allow_disruption; never on a serving node. A node without a loaded driver may always
      get its packages (nothing runs on them);
    - ``reboot_allowed``: whether the run may reboot the node: on a drained node; where the cluster was not asked,
      with gpu_driver_allow_disruption or when no driver was loaded (a new node); never on a serving node.
    """
    if node_state not in NODE_STATES:
        raise AnsibleFilterError("gpu_driver_node_state must be one of %s, got %r" % (", ".join(NODE_STATES), node_state))
    pattern = re.compile(branch_packages)
    moves = []
    for spec in specs or []:
        name, dummy, requested = str(spec).partition("=")
        if not requested or not pattern.search(name):
            continue
        version = _installed_version(installed, name)
        if version and not fnmatch.fnmatchcase(version.split(":", 1)[-1], requested.split(":", 1)[-1]):
            moves.append("%s %s -> %s" % (name, version, requested))
    installed_branches = [str(b) for b in installed_branches or [] if b]
    if installed_branches and installed_branches != [str(branch)]:
        moves.append("driver branch %s -> %s" % (", ".join(installed_branches), branch))
    facts = facts or {}
    loaded = bool(facts.get("driver_loaded") or facts.get("driver_version") or facts.get("kernel_module_version")
                  or facts.get("kmd_version")) or facts.get("state") in ("ok", "driver_mismatch")
    allow = bool(allow)
    if node_state == "serving":
        change_allowed = reboot_allowed = False
    elif node_state == "drained":
        change_allowed = reboot_allowed = True
    else:
        change_allowed = allow
        reboot_allowed = allow or not loaded
    return {"moves": moves, "loaded": loaded, "change_allowed": change_allowed or not loaded,
            "reboot_allowed": reboot_allowed}


def _installed_version(installed, name):
    version = (installed or {}).get(name)
    if isinstance(version, list):  # package_facts: a list of {name, version, ...}
        version = version[0].get("version") if version else None
    return str(version) if version else None


def _versioned(packages, unversioned="", branch_only=()):
    """The packages released with the driver, at its version: not those that follow the kernel or their own."""
    unversioned_re = re.compile(unversioned) if unversioned else None
    return [name for name in packages or []
            if not (unversioned_re is not None and unversioned_re.search(name)) and name not in (branch_only or ())]


def driver_version_mix(packages, installed, version_glob, unversioned="", branch_only=()):
    """The driver's packages installed at versions that disagree: {"packages": {name: installed version},
    "version": the upstream version to bring them all to}, or {} when they agree (or at most one is installed).

    Only the packages released with the driver count (not those matching ``unversioned`` or in ``branch_only``).
    The version is the newest installed one that matches ``version_glob`` (the pin): nothing moves past what
    is already there; '' when none matches.
    """
    found = {}
    for name in _versioned(packages, unversioned, branch_only):
        version = _installed_version(installed, name)
        if version:
            found[name] = version
    if len(set(driver_upstream(version) for version in found.values())) < 2:
        return {}
    target = ""
    for version in found.values():
        if fnmatch.fnmatchcase(version.split(":", 1)[-1], version_glob) and (not target or dpkg_compare(version, target) > 0):
            target = version
    return {"packages": found, "version": driver_upstream(target)}


def driver_install_specs(packages, installed, version_glob, branch_glob, unversioned="", branch_only=()):
    """apt ``name=version`` requests for the driver packages.

    ``installed`` maps package names to their installed version, or is
    package_facts' ``ansible_facts['packages']`` itself. A package whose installed version already matches its
    glob is requested at exactly that version, so a newer release of the same
    branch never slips in on a rerun. Packages matching the ``unversioned``
    regex (kernel headers, Canonical's kernel-bound module metapackages) get
    no version; those in ``branch_only`` (released on their own, such as
    Debian's nvidia-persistenced) follow the branch, not an exact version.
    Packages of the driver installed at versions that disagree (driver_version_mix) are all requested at the
    newest of them within the pin, so that a mixed install is put right rather than kept.
    """
    unversioned_re = re.compile(unversioned) if unversioned else None
    mix = driver_version_mix(packages, installed, version_glob, unversioned, branch_only)
    specs = []
    for name in packages:
        if unversioned_re is not None and unversioned_re.search(name):
            specs.append(name)
            continue
        if mix.get("version") and name not in branch_only:
            specs.append("%s=%s-*" % (name, mix["version"]))
            continue
        glob = branch_glob if name in branch_only else version_glob
        version = _installed_version(installed, name)
        if version and fnmatch.fnmatchcase(version.split(":", 1)[-1], glob):
            specs.append("%s=%s" % (name, version))
        else:
            specs.append("%s=%s" % (name, glob))
    return specs


_ARMOR_LINE = re.compile(r"^-----(BEGIN|END) PGP PUBLIC KEY BLOCK-----$")


def _dearmor(text):
    lines = [line.strip() for line in text.splitlines()]
    try:
        start = next(i for i, line in enumerate(lines) if _ARMOR_LINE.match(line) and "BEGIN" in line)
        end = next(i for i, line in enumerate(lines) if _ARMOR_LINE.match(line) and "END" in line)
    except StopIteration:
        raise AnsibleFilterError("not an ASCII-armored OpenPGP public key block")
    body = lines[start + 1:end]
    if "" in body:  # armor headers end at the first blank line
        body = body[body.index("") + 1:]
    data = "".join(line for line in body if not line.startswith("="))
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as err:
        raise AnsibleFilterError("the OpenPGP armor does not decode: %s" % err)


def _packets(data):
    offset = 0
    while offset < len(data):
        header = data[offset]
        if not header & 0x80:
            raise AnsibleFilterError("not OpenPGP data (byte %d is 0x%02x)" % (offset, header))
        if header & 0x40:  # new format
            tag = header & 0x3F
            first = data[offset + 1]
            if first < 192:
                length, offset = first, offset + 2
            elif first < 224:
                length, offset = ((first - 192) << 8) + data[offset + 2] + 192, offset + 3
            elif first == 255:
                length, offset = int.from_bytes(data[offset + 2:offset + 6], "big"), offset + 6
            else:
                raise AnsibleFilterError("partial-length packets are not allowed in a public key")
        else:  # old format
            tag = (header >> 2) & 0x0F
            size = {0: 1, 1: 2, 2: 4}.get(header & 0x03)
            if size is None:
                raise AnsibleFilterError("indeterminate-length packets are not allowed in a public key")
            length = int.from_bytes(data[offset + 1:offset + 1 + size], "big")
            offset += 1 + size
        body = data[offset:offset + length]
        if len(body) != length:
            raise AnsibleFilterError("the OpenPGP data is truncated")
        yield tag, body
        offset += length


def openpgp_fingerprints(key):
    """Fingerprints (upper-case hex) of the primary keys in an OpenPGP public key.

    ``key`` is an ASCII-armored block (as NVIDIA publishes 3bf863cc.pub) or
    the binary form, as text or bytes. v4 keys: SHA-1 over 0x99, the 2-byte
    length and the key packet (RFC 4880 12.2); v5/v6 keys: SHA-256 with 0x9A
    or 0x9B and a 4-byte length (RFC 9580 5.5.4).
    """
    if isinstance(key, str):
        data = _dearmor(key) if "-----BEGIN PGP" in key else key.encode("latin-1")
    else:
        data = bytes(key)
        if b"-----BEGIN PGP" in data:
            data = _dearmor(data.decode("ascii", "replace"))
    fingerprints = []
    for tag, body in _packets(data):
        if tag != 6 or not body:
            continue
        version = body[0]
        if version == 4:
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body)  # nosec - the v4 fingerprint is SHA-1
        elif version in (5, 6):
            prefix = b"\x9a" if version == 5 else b"\x9b"
            digest = hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body)
        else:
            raise AnsibleFilterError("unsupported OpenPGP key version %d" % version)
        fingerprints.append(digest.hexdigest().upper())
    if not fingerprints:
        raise AnsibleFilterError("no OpenPGP public key in the data")
    return fingerprints


class FilterModule(object):
    def filters(self):
        return {
            "driver_flavor": driver_flavor,
            "driver_unsupported_gpus": driver_unsupported_gpus,
            "driver_nvswitches": driver_nvswitches,
            "blackwell_gpus": blackwell_gpus,
            "driver_upstream": driver_upstream,
            "driver_scheme": driver_scheme,
            "driver_fabric_manager_packages": driver_fabric_manager_packages,
            "driver_available_versions": driver_available_versions,
            "driver_newest_version": driver_newest_version,
            "driver_held_packages": driver_held_packages,
            "driver_staying_version": driver_staying_version,
            "driver_upgrade_reasons": driver_upgrade_reasons,
            "driver_packages": driver_packages,
            "driver_end_of_life_summary": driver_end_of_life_summary,
            "driver_reboot_reasons": driver_reboot_reasons,
            "driver_disruption": driver_disruption,
            "dpkg_audit_packages": dpkg_audit_packages,
            "dpkg_unfinished_packages": dpkg_unfinished_packages,
            "driver_install_specs": driver_install_specs,
            "driver_version_mix": driver_version_mix,
        }
