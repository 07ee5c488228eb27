# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet-mig: make the GPUs' MIG layout the one in a layout file, with nvidia-smi.

Installed by the gpufleet.nvidia.gpu_mig role, which writes the layout file
(/etc/gpufleet/mig-layout.json) and runs this program; gpufleet-mig.service
runs it again at every boot, before kubelet, because GPU and compute instances
do not survive a reboot (MIG mode does).

The layout file: {"version": 1, "gpus": [{"index": 0, "uuid": "GPU-...",
"mig": true, "gpu_instances": [{"profile": "3g.40gb", "compute_instances":
["3g.40gb"]}, ...]}]}. GPUs are found by UUID (by index when none is given);
GPUs the file does not name are left alone.

For each GPU whose state differs: it refuses while processes run on the GPU;
otherwise it destroys the GPU's compute and GPU instances, switches MIG mode
(nvidia-smi -i N -mig 0|1) and creates the GPU instances, largest first, each
with its compute instances. A mode change that stays pending needs a GPU reset
(--allow-reset runs nvidia-smi -i N -r) or a reboot.

Prints one JSON object: {"changed", "status": ok | busy | reset_needed | error,
"gpus": [{"index", "uuid", "before", "after", "actions", "message"}]}.
Exit status: 0 ok, 2 error, 3 busy (nothing changed), 4 a GPU needs a reset or reboot.
--dry-run prints what it would do and changes nothing.
"""

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

DEFAULT_LAYOUT = "/etc/gpufleet/mig-layout.json"
LIST_GPU = re.compile(r"^GPU (?P<index>\d+): .* \(UUID: (?P<uuid>[^)]+)\)\s*$")
LIST_MIG = re.compile(r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+(?P<index>\d+):\s*\(UUID:\s*(?P<uuid>[^)]*)\)\s*$")
CREATED_GI = re.compile(r"Successfully created GPU instance ID\s+(?P<id>\d+)")
# A row of `nvidia-smi mig -lgi` (the widths of drivers up to 535 and of 570 on):
# |   0  MIG 1g.10gb+me        20       11          4:1     |
LIST_GI = re.compile(r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<profile>\S+)\s+(?P<profile_id>\d+)\s+(?P<id>\d+)\s+\d+:\d+\s*\|$")
NOTHING_TO_DESTROY = ("No GPU instances found: Not Found", "No compute instances found: Not Found")
# Orders of GPU instances tried before a layout is given up (the driver chooses each placement).
MAX_ORDERS = 200
GI_PROFILE = re.compile(r"^(?P<slices>\d+)g\.(?P<memory>\d+)gb")


class Failure(Exception):
    pass


def smi(argv, log=None):
    command = [os.environ.get("GPUFLEET_NVIDIA_SMI", "nvidia-smi")] + argv
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                universal_newlines=True, check=False)
    except OSError as err:
        raise Failure("cannot run %s: %s" % (command[0], err))
    if log is not None:
        log.append(" ".join(["nvidia-smi"] + argv))
    return result.returncode, result.stdout, result.stderr


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def _mode(text):
    text = (text or "").strip().lower()
    return text if text in ("enabled", "disabled") else None


def read_state():
    """{index: {uuid, mode, pending, instances: [[profiles]], processes}} from nvidia-smi -q -x and -L."""
    rc, out, err = smi(["-q", "-x"])
    if rc != 0:
        raise Failure("nvidia-smi -q -x failed (rc %d): %s" % (rc, _first_line(err, out)))
    try:
        root = ET.fromstring(out[out.index("<"):] if "<" in out else out)
    except (ET.ParseError, ValueError) as err:
        raise Failure("nvidia-smi -q -x printed no XML: %s" % err)
    rc, listed, err = smi(["-L"])
    if rc != 0:
        raise Failure("nvidia-smi -L failed (rc %d): %s" % (rc, _first_line(err, listed)))
    profiles, index = {}, None
    for line in listed.splitlines():
        gpu = LIST_GPU.match(line)
        mig = LIST_MIG.match(line)
        if gpu:
            index = int(gpu.group("index"))
            profiles[index] = {}
        elif mig and index is not None:
            profiles[index][int(mig.group("index"))] = mig.group("profile")
    # The GPU instances with their profile names: -L names a GPU instance's one compute instance after
    # the profile without its +me, and lists no GPU instance that has no compute instance.
    gpu_instances = {}
    rc, out, err = smi(["mig", "-lgi"])
    if rc == 0:
        for line in out.splitlines():
            row = LIST_GI.match(line)
            if row:
                gpu_instances.setdefault(int(row.group("gpu")), {})[row.group("id")] = row.group("profile")
    state = {}
    for position, node in enumerate(root.findall("gpu")):
        index = position
        groups = {}
        for device in node.findall("mig_devices/mig_device"):
            number = int((device.findtext("index") or "0").strip())
            gi = (device.findtext("gpu_instance_id") or "").strip()
            groups.setdefault(gi or ("device", number), []).append(profiles.get(index, {}).get(number, "unknown"))
        for gi, profile in gpu_instances.get(index, {}).items():
            names = groups.get(gi)
            if names is None:
                groups[gi] = ["%s without a compute instance" % profile]
            elif len(names) == 1 and profile.split("+", 1)[0] == names[0]:
                groups[gi] = [profile]
        processes = [(p.findtext("pid") or "").strip() + " " + (p.findtext("process_name") or "").strip()
                     for p in node.findall("processes/process_info")]
        state[index] = {
            "uuid": (node.findtext("uuid") or "").strip(),
            "mode": _mode(node.findtext("mig_mode/current_mig")),
            "pending": _mode(node.findtext("mig_mode/pending_mig")),
            "instances": sorted(sorted(group) for group in groups.values()),
            "processes": processes,
        }
    return state


def words(mode, instances):
    if mode != "enabled":
        return "MIG %s" % (mode or "unknown")
    names = [group[0] if len(group) == 1 else "[%s]" % " + ".join(group) for group in instances]
    return "MIG enabled: %s" % (", ".join(names) if names else "no MIG devices")


def target_of(entry):
    return sorted(sorted(gi["compute_instances"]) for gi in entry.get("gpu_instances") or [])


def differs(entry, current):
    if not entry.get("mig"):
        return current["mode"] == "enabled" or current["pending"] == "enabled"
    return current["mode"] != "enabled" or current["pending"] == "disabled" or current["instances"] != target_of(entry)


def _slices(profile):
    match = GI_PROFILE.match(profile)
    return (int(match.group("slices")), int(match.group("memory"))) if match else (0, 0)


def _run(argv, actions, dry_run, what, no_room=False):
    actions.append("nvidia-smi " + " ".join(argv))
    if dry_run:
        return ""
    rc, out, err = smi(argv)
    text = (out or "") + (err or "")
    if rc != 0:
        error = NoRoom if no_room and "Insufficient Resources" in text else Failure
        raise error("%s failed (nvidia-smi %s, rc %d): %s" % (what, " ".join(argv), rc, _first_line(err, out)))
    return text


class NoRoom(Failure):
    """The driver found no placement for a GPU instance."""


def _destroy(index, actions, dry_run):
    for flag, what in (("-dci", "compute"), ("-dgi", "GPU")):
        argv = ["mig", "-i", str(index), flag]
        actions.append("nvidia-smi " + " ".join(argv))
        if dry_run:
            continue
        rc, out, err = smi(argv)
        lines = [line.strip() for line in (out + err).splitlines() if line.strip()]
        if rc != 0 and not (lines and all(line in NOTHING_TO_DESTROY for line in lines)):
            raise Failure("destroying the %s instances of GPU %d failed (nvidia-smi %s, rc %d): %s" % (
                what, index, " ".join(argv), rc, _first_line(err, out)))


def _create_in_order(index, order, actions, dry_run):
    for gi in order:
        if gi["compute_instances"] == [gi["profile"]]:
            text = _run(["mig", "-i", str(index), "-cgi", gi["profile"], "-C"], actions, dry_run,
                        "creating a %s GPU instance on GPU %d" % (gi["profile"], index), no_room=True)
            continue
        text = _run(["mig", "-i", str(index), "-cgi", gi["profile"]], actions, dry_run,
                    "creating a %s GPU instance on GPU %d" % (gi["profile"], index), no_room=True)
        match = CREATED_GI.search(text)
        gi_id = match.group("id") if match else "<new GPU instance>"
        if not dry_run and not match:
            raise Failure("nvidia-smi did not say which GPU instance it created on GPU %d: %s" % (
                index, _first_line(text)))
        _run(["mig", "-i", str(index), "-gi", gi_id, "-cci", ",".join(gi["compute_instances"])], actions, dry_run,
             "creating compute instances %s on GPU %d" % (", ".join(gi["compute_instances"]), index))


def _orders(gpu_instances):
    """Orders to create GPU instances in, largest first, then the other distinct orders."""
    first = sorted(gpu_instances, key=lambda gi: _slices(gi["profile"]), reverse=True)
    seen = set()
    for order in itertools.permutations(first):
        key = tuple(json.dumps(gi, sort_keys=True) for gi in order)
        if key not in seen:
            seen.add(key)
            yield list(order)
        if len(seen) >= MAX_ORDERS:
            return


def _create(index, entry, actions, dry_run):
    """Create the GPU instances. The driver places each where it chooses; when one finds no room, every
    instance of the GPU is destroyed again and the next order is tried, as NVIDIA's mig-parted does."""
    tried, last = 0, None
    for order in _orders(entry.get("gpu_instances") or []):
        tried += 1
        try:
            _create_in_order(index, order, actions, dry_run)
            return
        except NoRoom as err:
            last = err
            _destroy(index, actions, dry_run)
        if dry_run:
            return
    if tried:
        raise Failure("no order of creation fits the layout on GPU %d (%d tried): %s" % (index, tried, last))


def apply_gpu(index, entry, state, allow_reset, dry_run, actions):
    """Bring one GPU to its entry, listing the nvidia-smi commands run in ``actions``. Returns (row, status)."""
    current = state[index]
    row = {"index": index, "uuid": current["uuid"], "before": words(current["mode"], current["instances"]),
           "after": None, "actions": actions, "message": None}
    if not differs(entry, current):
        row["after"] = row["before"]
        return row, "ok"
    if current["processes"]:
        row["after"] = row["before"]
        row["message"] = "GPU %d runs %d process(es) (%s): its MIG layout is not changed under running work" % (
            index, len(current["processes"]), ", ".join(current["processes"][:5]))
        return row, "busy"
    actions = row["actions"]
    wanted = "enabled" if entry.get("mig") else "disabled"
    if current["mode"] == "enabled":
        # Instances go before MIG mode changes and before a new layout is created.
        _destroy(index, actions, dry_run)
    if current["pending"] != wanted:
        # Also withdraws a pending change the other way.
        _run(["-i", str(index), "-mig", "1" if entry.get("mig") else "0"], actions, dry_run,
             "%s MIG mode on GPU %d" % ("enabling" if entry.get("mig") else "disabling", index))
    if current["mode"] != wanted:
        mode = wanted if dry_run else read_state()[index]["mode"]
        refused = None
        if mode != wanted and allow_reset:
            try:
                _run(["-i", str(index), "-r"], actions, dry_run, "resetting GPU %d" % index)
            except Failure as err:
                # A client still holds the GPU (or the platform cannot reset it): a reboot makes it effective.
                refused = str(err)
            mode = read_state()[index]["mode"]
        if mode != wanted:
            row["after"] = "MIG %s pending" % wanted
            row["message"] = ("MIG mode on GPU %d is %s from the next GPU reset (nvidia-smi -i %d -r, with no client "
                              "on the GPU) or reboot on%s" % (index, wanted, index,
                                                              "; the reset was refused: " + refused if refused else ""))
            return row, "reset_needed"
    if entry.get("mig"):
        _create(index, entry, actions, dry_run)
    if dry_run:
        row["after"] = "MIG disabled" if not entry.get("mig") else words("enabled", target_of(entry))
        return row, "ok"
    after = read_state()[index]
    row["after"] = words(after["mode"], after["instances"])
    if differs(entry, after):
        raise Failure("GPU %d is %s after the change, not %s" % (
            index, row["after"], "MIG disabled" if not entry.get("mig") else words("enabled", target_of(entry))))
    return row, "ok"


def main(argv=None):
    parser = argparse.ArgumentParser(description="Apply the MIG layout in a layout file with nvidia-smi.")
    parser.add_argument("--layout", default=DEFAULT_LAYOUT, help="layout file (default %(default)s)")
    parser.add_argument("--layout-json", help="the layout itself, instead of a file")
    parser.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    parser.add_argument("--allow-reset", action="store_true", help="reset a GPU whose MIG mode change is pending")
    args = parser.parse_args(argv)
    result = {"changed": False, "status": "ok", "gpus": [], "message": None}
    order = {"ok": 0, "reset_needed": 1, "busy": 2, "error": 3}
    try:
        if args.layout_json is not None:
            layout = json.loads(args.layout_json)
        else:
            with open(args.layout, encoding="utf-8") as handle:
                layout = json.load(handle)
        if not isinstance(layout, dict) or layout.get("version") != 1 or not isinstance(layout.get("gpus"), list):
            raise Failure("the layout is not a gpufleet MIG layout (version 1 with a gpus list)")
        state = read_state()
        by_uuid = dict((value["uuid"], key) for key, value in state.items())
        targets = []
        for entry in layout["gpus"]:
            index = by_uuid.get(entry.get("uuid")) if entry.get("uuid") else entry.get("index")
            if index not in state:
                # A GPU replaced since the layout was written: the others still get theirs.
                result["gpus"].append({"index": entry.get("index"), "uuid": entry.get("uuid"), "before": None,
                                       "after": None, "actions": [], "message": (
                                           "the layout names GPU %s (%s), which nvidia-smi does not list" % (
                                               entry.get("index"), entry.get("uuid") or "no UUID"))})
                result["status"] = "error"
                continue
            targets.append((index, entry))
        busy = [state[index] for index, entry in targets if differs(entry, state[index]) and state[index]["processes"]]
        for index, entry in targets:
            if busy and differs(entry, state[index]) and not state[index]["processes"]:
                # One busy GPU stops the whole change: half a node's new layout is worse than the old one.
                result["gpus"].append({"index": index, "uuid": state[index]["uuid"],
                                       "before": words(state[index]["mode"], state[index]["instances"]),
                                       "after": None, "actions": [],
                                       "message": "not changed: another GPU of this node is busy"})
                continue
            actions = []
            try:
                row, status = apply_gpu(index, entry, state, args.allow_reset, args.dry_run, actions)
            except Failure as err:
                # One GPU's failure leaves the others to be done; the row says what ran and what the GPU has now.
                row = {"index": index, "uuid": state[index]["uuid"],
                       "before": words(state[index]["mode"], state[index]["instances"]), "after": None,
                       "actions": actions, "message": str(err)}
                status = "error"
                try:
                    now = read_state()[index]
                    row["after"] = words(now["mode"], now["instances"])
                except Failure:
                    pass
            result["gpus"].append(row)
            result["changed"] = result["changed"] or bool(row["actions"])
            if order[status] > order[result["status"]]:
                result["status"] = status
        messages = [row["message"] for row in result["gpus"] if row["message"]]
        result["message"] = "; ".join(messages) or None
    except (Failure, OSError, ValueError) as err:
        result["status"] = "error"
        result["message"] = str(err)
    print(json.dumps(result, sort_keys=True))
    return {"ok": 0, "error": 2, "busy": 3, "reset_needed": 4}[result["status"]]


if __name__ == "__main__":
    sys.exit(main())
