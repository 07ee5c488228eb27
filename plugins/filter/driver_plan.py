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

# Architectures that NVIDIA's open kernel modules do not support.
PRE_TURING = ("kepler", "maxwell", "pascal", "volta", "fermi", "tesla")
# First PCI device id of Turing (TU10x, 0x1e00); every later NVIDIA GPU
# generation has higher ids (Ampere 0x20xx, Hopper 0x23xx, Ada 0x26xx-0x28xx,
# Blackwell 0x29xx-0x2cxx). Older GPUs are below it.
TURING_FIRST_DEVICE_ID = 0x1E00
_BRANCH_RE = re.compile(r"^[0-9]{3}$")


def _gpu_generation(gpu):
    """'old', 'new' or None (unknown) for one GPU of the nvml_facts facts."""
    capability = gpu.get("compute_capability")
    if capability:
        major, minor = (int(part) for part in str(capability).split(".")[:2])
        return "new" if (major, minor) >= (7, 5) else "old"
    architecture = (gpu.get("architecture") or "").lower()
    if architecture:
        return "old" if architecture in PRE_TURING else "new"
    return None


def _pci_generation(function):
    device_id = function.get("device_id")
    if not device_id:
        return None
    return "new" if int(device_id, 16) >= TURING_FIRST_DEVICE_ID else "old"


def older_gpus(facts):
    """Descriptions of the GPUs that are older than Turing, from NVML/nvidia-smi or PCI ids."""
    facts = facts or {}
    older = []
    for gpu in facts.get("gpus") or []:
        if _gpu_generation(gpu) == "old":
            older.append("%s at %s" % (gpu.get("name"), gpu.get("pci_bus_id")))
    if facts.get("gpus"):
        return older
    for function in facts.get("pci_devices") or []:
        if function.get("is_gpu") and _pci_generation(function) == "old":
            older.append("PCI device %s at %s" % (function.get("device_id"), function.get("address")))
    return older


def driver_flavor(requested, facts):
    """Resolve gpu_driver_module_flavor ('auto', 'open', 'proprietary') against the GPUs."""
    if requested not in ("auto", "open", "proprietary"):
        raise AnsibleFilterError(
            "gpu_driver_module_flavor must be auto, open or proprietary, got %r" % (requested,))
    older = older_gpus(facts)
    if requested == "open" and older:
        raise AnsibleFilterError(
            "gpu_driver_module_flavor is 'open' but NVIDIA's open kernel modules need Turing or newer, and "
            "this host has older GPUs: %s. Use gpu_driver_module_flavor: proprietary (or auto)." % "; ".join(older))
    if requested == "auto":
        return "proprietary" if older else "open"
    return requested


def driver_packages(table, source, kernel_module, flavor, branch, kernel=""):
    """Package names for a source, kernel module type, flavour and branch.

    ``table`` is the role's per-OS data: table[source][kernel_module][flavor]
    is a list of names in which ``{branch}`` is replaced by the branch,
    ``{kernel}`` by the running kernel's release and ``{kernel_flavour}`` by
    its flavour (6.8.0-45-generic: generic), for precompiled modules.
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
    return [name.replace("{branch}", str(branch)).replace("{kernel_flavour}", flavour).replace("{kernel}", str(kernel))
            for name in names]


def driver_branch_of(version):
    """'1:535.261.03-1' -> '535'; None for an empty or unversioned value."""
    if not version:
        return None
    text = str(version).split(":", 1)[-1]
    match = re.match(r"^([0-9]+)\.", text)
    return match.group(1) if match else None


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


def driver_install_specs(packages, installed, version_glob, branch_glob, unversioned="", branch_only=()):
    """apt ``name=version`` requests for the driver packages.

    ``installed`` maps package names to their installed version, or is
    package_facts' ``ansible_facts['packages']`` itself. A package whose installed version already matches its
    glob is requested at exactly that version, so a newer release of the same
    branch never slips in on a rerun. Packages matching the ``unversioned``
    regex (kernel headers, Canonical's kernel-bound module metapackages) get
    no version; those in ``branch_only`` (released on their own, such as
    Debian's nvidia-persistenced) follow the branch, not an exact version.
    """
    unversioned_re = re.compile(unversioned) if unversioned else None
    specs = []
    for name in packages:
        if unversioned_re is not None and unversioned_re.search(name):
            specs.append(name)
            continue
        glob = branch_glob if name in branch_only else version_glob
        version = (installed or {}).get(name)
        if isinstance(version, list):  # package_facts: a list of {name, version, ...}
            version = version[0].get("version") if version else None
        if version and fnmatch.fnmatchcase(str(version).split(":", 1)[-1], glob):
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
            "driver_packages": driver_packages,
            "driver_branch_of": driver_branch_of,
            "driver_reboot_reasons": driver_reboot_reasons,
            "driver_install_specs": driver_install_specs,
            "openpgp_fingerprints": openpgp_fingerprints,
        }
