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
    state = {}
    for position, node in enumerate(root.findall("gpu")):
        minor = (node.findtext("minor_number") or "").strip()
        index = position
        groups = {}
        for device in node.findall("mig_devices/mig_device"):
            number = int((device.findtext("index") or "0").strip())
            gi = (device.findtext("gpu_instance_id") or "").strip()
            groups.setdefault(gi or ("device", number), []).append(profiles.get(index, {}).get(number, "unknown"))
        processes = [(p.findtext("pid") or "").strip() + " " + (p.findtext("process_name") or "").strip()
                     for p in node.findall("processes/process_info")]
        state[index] = {
            "uuid": (node.findtext("uuid") or "").strip(),
            "minor": minor,
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


def _run(argv, actions, dry_run, what, allowed_rc=(0,), quiet_texts=()):
    actions.append("nvidia-smi " + " ".join(argv))
    if dry_run:
        return ""
    rc, out, err = smi(argv)
    text = (out or "") + (err or "")
    if rc not in allowed_rc and not any(q in text for q in quiet_texts):
        raise Failure("%s failed (nvidia-smi %s, rc %d): %s" % (what, " ".join(argv), rc, _first_line(err, out)))
    return text


def _destroy(index, current, actions, dry_run):
    if not current["instances"] and current["mode"] == "enabled":
        # Instances without compute instances are not listed; destroying them is harmless either way.
        pass
    nothing = ("No compute instances found", "No GPU instances found", "Not Found", "No instances found")
    _run(["mig", "-i", str(index), "-dci"], actions, dry_run, "destroying the compute instances of GPU %d" % index,
         quiet_texts=nothing)
    _run(["mig", "-i", str(index), "-dgi"], actions, dry_run, "destroying the GPU instances of GPU %d" % index,
         quiet_texts=nothing)


def _create(index, entry, actions, dry_run):
    ordered = sorted(entry.get("gpu_instances") or [], key=lambda gi: _slices(gi["profile"]), reverse=True)
    for gi in ordered:
        if gi["compute_instances"] == [gi["profile"]]:
            _run(["mig", "-i", str(index), "-cgi", gi["profile"], "-C"], actions, dry_run,
                 "creating a %s GPU instance on GPU %d" % (gi["profile"], index))
            continue
        text = _run(["mig", "-i", str(index), "-cgi", gi["profile"]], actions, dry_run,
                    "creating a %s GPU instance on GPU %d" % (gi["profile"], index))
        match = CREATED_GI.search(text)
        gi_id = match.group("id") if match else "<new GPU instance>"
        if not dry_run and not match:
            raise Failure("nvidia-smi did not say which GPU instance it created on GPU %d: %s" % (
                index, _first_line(text)))
        _run(["mig", "-i", str(index), "-gi", gi_id, "-cci", ",".join(gi["compute_instances"])], actions, dry_run,
             "creating compute instances %s on GPU %d" % (", ".join(gi["compute_instances"]), index))


def apply_gpu(index, entry, state, allow_reset, dry_run):
    """Bring one GPU to its entry. Returns (row, status)."""
    current = state[index]
    row = {"index": index, "uuid": current["uuid"], "before": words(current["mode"], current["instances"]),
           "after": None, "actions": [], "message": None}
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
        _destroy(index, current, actions, dry_run)
    if current["pending"] != wanted:
        # Also withdraws a pending change the other way.
        _run(["-i", str(index), "-mig", "1" if entry.get("mig") else "0"], actions, dry_run,
             "%s MIG mode on GPU %d" % ("enabling" if entry.get("mig") else "disabling", index))
    if current["mode"] != wanted:
        mode = wanted if dry_run else read_state()[index]["mode"]
        if mode != wanted and allow_reset:
            _run(["-i", str(index), "-r"], actions, dry_run, "resetting GPU %d" % index)
            mode = read_state()[index]["mode"]
        if mode != wanted:
            row["after"] = "MIG %s pending" % wanted
            row["message"] = ("MIG mode on GPU %d is %s from the next GPU reset (nvidia-smi -i %d -r, with no process "
                              "on any GPU) or reboot on" % (index, wanted, index))
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
                raise Failure("the layout names GPU %s (%s), which nvidia-smi does not list" % (
                    entry.get("index"), entry.get("uuid") or "no UUID"))
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
            row, status = apply_gpu(index, entry, state, args.allow_reset, args.dry_run)
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
