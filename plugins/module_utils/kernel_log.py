# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernel log: the XID events the NVIDIA driver logged since boot.

The XID catalog (what each XID means and what to do), the XIDs that make a
GPU unhealthy by default, reading the log (journal, dmesg or a saved file) and
parsing its ``NVRM: Xid`` lines into events per GPU.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.nvidia.plugins.module_utils.inventory_values import (
    InventoryError,
    _first_line,
)


KERNEL_LOG_MODES = ("auto", "journal", "dmesg", "none")


# XID events: what each one means and what an operator does about it, in our
# words after NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors,
# "Analyzing Xid Errors with the Xid Catalog": description and "Resolution
# Bucket (Immediate Action)" per Xid; the page-retirement XIDs 48/63/64 also
# after docs.nvidia.com/deploy/dynamic-page-retirement). An XID not listed
# here keeps a null name and action and is still reported.
XID_CATALOG = {
    8: ("GPU stopped processing (timeout)", "restart application"),
    13: ("graphics engine exception", "restart application"),
    31: ("GPU memory page fault", "restart application"),
    32: ("invalid or corrupted push buffer stream", "restart application"),
    43: ("GPU stopped processing (application fault)", "restart application"),
    45: ("preemptive cleanup after an earlier error", "none (follows another XID)"),
    48: ("double-bit ECC error", "reset GPU"),
    61: ("internal micro-controller breakpoint or warning", "reset GPU"),
    62: ("internal micro-controller halt", "reset GPU"),
    63: ("ECC page retirement or row remapping recorded", "reset GPU when idle"),
    64: ("ECC page retirement or row remapping failed", "reset GPU"),
    69: ("graphics engine class error", "restart application"),
    74: ("NVLink error", "check NVLink / reset GPU"),
    79: ("GPU has fallen off the bus", "reboot"),
    92: ("high single-bit ECC error rate", "none (watch the ECC counters)"),
    94: ("contained ECC error", "restart application"),
    95: ("uncontained ECC error", "reset GPU"),
    109: ("context switch timeout", "restart application"),
    119: ("GSP RPC timeout", "reset GPU"),
    120: ("GSP error", "reset GPU"),
    # Blackwell NVLink XIDs; the line says Fatal or Nonfatal.
    144: ("NVLink SAW error", "check NVLink"),
    145: ("NVLink RLW error", "check NVLink"),
    149: ("NVLink NETIR error", "check NVLink"),
    154: ("GPU recovery action changed", "follow the recovery action in the message"),
}

# XIDs after which a GPU should get no new work until it is reset or the node
# rebooted: the catalog's RESET_GPU / reboot bucket among the XIDs operators
# act on. 63 (a remap or retirement recorded) is left out: the GPU keeps
# working and the pending remap is its own health problem (row_remap_pending,
# retired_pages_pending). The module option unhealthy_xids replaces this set.
# 154 is the driver's recovery action: unhealthy while its latest line names
# an action other than None (0x0).
DEFAULT_UNHEALTHY_XIDS = (48, 61, 62, 64, 74, 79, 95, 119, 120, 154)


# One command, filtered by journald itself. With --grep, journalctl exits 1
# and prints "-- No entries --" (stderr empty) when nothing matches.
JOURNAL_ARGS = ("-k", "-b", "0", "--no-pager", "-o", "short-monotonic", "--grep", "NVRM: Xid")

# "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has
# fallen off the bus." and the older "NVRM: Xid (0000:01:00): 3, C 00000005
# ...", after any dmesg "[  123.456789] " / "[Fri Aug 30 11:43:09 2024] " or
# journal "Nov 23 10:00:00 host kernel: " prefix (fixtures/kernel-log/SOURCES.md).
_XID_RE = re.compile(r"NVRM: Xid \((?P<where>[^)]*)\):\s*(?P<xid>\d+)\b")
_XID_WHERE_RE = re.compile(
    r"^(?:PCI:)?(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})"
    r"(?:\.(?P<function>[0-7]))?"
    # On a GPU in MIG mode the driver names the GPU and compute instance too:
    # "PCI:0000:01:00 GPU-I:05" and "PCI:0000:3b:00 GPU-I:01 GPU-CI:02".
    r"(?:\s+GPU-I:[0-9A-Fa-f]+)?(?:\s+GPU-CI:[0-9A-Fa-f]+)?$"
)
# Xid 154 carries the driver's own recovery verdict: "GPU recovery action
# changed from 0x0 (None) to 0x1 (GPU Reset Required)"; back to 0x0 (None) the
# GPU needs nothing.
_XID_154_ACTION_RE = re.compile(r"\bto\s+0x(?P<action>[0-9A-Fa-f]+)")


def _read_text(path):
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def read_kernel_log(params, probe):
    """Read the kernel log once. Returns (kernel_log fact, text or None).

    ``kernel_log_path`` reads a saved log (offline analysis, tests); otherwise
    ``kernel_log``: auto (journalctl when it answers, else dmesg), journal,
    dmesg or none. Failing to read is a fact (read false, the reason), not an
    error.
    """
    path = params.get("kernel_log_path")
    mode = params.get("kernel_log") or "auto"
    if mode not in KERNEL_LOG_MODES:
        raise InventoryError("kernel_log must be one of %s, got %r" % (", ".join(KERNEL_LOG_MODES), mode))
    if path:
        reader = getattr(probe, "read_text", None) or _read_text
        try:
            return {"source": "file", "read": True, "message": None}, reader(path)
        except (IOError, OSError) as err:
            return {"source": "file", "read": False,
                    "message": "%s: %s" % (path, getattr(err, "strerror", None) or err)}, None
    if mode == "none":
        return {"source": None, "read": False, "message": "not read (kernel_log=none)"}, None
    reasons = []
    source = None
    if mode in ("auto", "journal"):
        journalctl = probe.which("journalctl")
        if journalctl:
            source = "journal"
            rc, out, err = probe.run([journalctl] + list(JOURNAL_ARGS))
            if rc == 0 or (rc == 1 and not (err or "").strip()):
                return {"source": "journal", "read": True, "message": None}, out
            reasons.append("journalctl -k failed with rc=%s: %s" % (rc, _first_line(err, out) or "no output"))
        else:
            reasons.append("journalctl not found")
    if mode in ("auto", "dmesg"):
        dmesg = probe.which("dmesg")
        if dmesg:
            source = "dmesg"
            rc, out, err = probe.run([dmesg])
            if rc == 0:
                return {"source": "dmesg", "read": True, "message": None}, out
            reasons.append("dmesg failed with rc=%s: %s" % (rc, _first_line(err, out) or "no output"))
        else:
            reasons.append("dmesg not found")
    return {"source": source, "read": False, "message": "; ".join(reasons)}, None


def _xid_gpu(where, gpus):
    """(pci_address, gpu_index) of an XID line's "PCI:0000:3b:00" (no function)."""
    match = _XID_WHERE_RE.match(where.strip())
    if not match:
        return None, None
    prefix = "%04x:%s:%s" % (int(match.group("domain"), 16), match.group("bus").lower(),
                             match.group("device").lower())
    function = match.group("function")
    candidates = [gpu for gpu in gpus if (gpu.get("pci_address") or "").startswith(prefix + ".")]
    if function is not None:
        exact = [gpu for gpu in candidates if gpu["pci_address"] == "%s.%s" % (prefix, function)]
        candidates = exact or candidates
    if candidates:
        return candidates[0]["pci_address"], candidates[0]["index"]
    return "%s.%s" % (prefix, function or "0"), None


def parse_xid_events(text, gpus=(), unhealthy_xids=DEFAULT_UNHEALTHY_XIDS):
    """XID events of a kernel log: one entry per (PCI address, XID), in log order of first sight."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    unhealthy = frozenset(int(xid) for xid in unhealthy_xids)
    events = {}
    for line in (text or "").splitlines():
        if "NVRM: Xid" not in line:
            continue
        match = _XID_RE.search(line)
        if not match:
            continue
        xid = int(match.group("xid"))
        address, index = _xid_gpu(match.group("where"), gpus)
        key = (address, xid)
        event = events.get(key)
        if event is None:
            name, action = XID_CATALOG.get(xid, (None, None))
            event = events[key] = {
                "pci_address": address,
                "gpu_index": index,
                "xid": xid,
                "name": name,
                "action": action,
                "fatal": xid in unhealthy,
                "count": 0,
                "last": None,
            }
        event["count"] += 1
        event["last"] = line.strip()
        if xid == 154:
            action = _XID_154_ACTION_RE.search(line)
            if action:
                # Only the latest recovery action counts; None (0x0) means recovered.
                event["fatal"] = xid in unhealthy and int(action.group("action"), 16) != 0
    return list(events.values())
