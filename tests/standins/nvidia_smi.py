# -*- coding: utf-8 -*-
# STAND-IN for nvidia-smi on the Debian containers of the tests (molecule
# gpu_cluster and gpu_mig, make demo); NOT nvidia-smi. No GPU exists here.
#
# It prints the real `nvidia-smi -q -x` capture installed as
# /usr/share/gpufleet-test/nvidia-smi-q-x.xml (from
# tests/unit/plugins/module_utils/fixtures/nvidia-smi, see SOURCES.md there),
# so that nvml_facts describes the GPUs of that capture, and it keeps MIG state
# the way the driver does, printed in the formats of the real captures and of
# NVIDIA's MIG User Guide:
#   -q -x, -L                 the capture; its MIG mode, MIG devices and processes
#                             are this stand-in's state
#   -i N -mig 0|1             MIG mode; the change is pending while a client holds the
#                             GPU (the file /var/lib/gpufleet-test/mig-held exists)
#                             until -r or a reboot
#   -i N -r                   GPU reset: a pending MIG mode becomes current; refused while
#                             a client holds the GPU or a process runs on it
#   mig -lgip | -lgi | -lci   profiles, GPU instances, compute instances
#   mig [-i N] -cgi P[,P...] [-C] | -gi G -cci C[,C...] | -dci [-gi G -ci C] | -dgi [-gi G]
# MIG mode lives in /var/lib/gpufleet-test/mig-mode.json (it survives a reboot, as
# it does in the GPU's InfoROM); GPU and compute instances in /run/gpufleet-test
# (a tmpfs: gone after a reboot, as on a real GPU). Processes on the GPUs are those
# listed in /var/lib/gpufleet-test/processes.json ([{"pid": 4242, "name": "python3"}]).
# The profile table (IDs, sizes, placements, GPU instance IDs by placement) is
# the A100/H100 80GB one of NVIDIA's MIG User Guide; GPU instance IDs follow
# the placements seen in the captures (a100 4x1g.20gb: 3-6; h100 3g/2g/1g/1g: 2, 3, 9, 10);
# a new instance takes the lowest free placement. A GPU instance's one compute instance is
# named after the profile without +me, as -lci and -L print it.
# Values not from the capture: <attached_gpus> is the content of
# /usr/share/gpufleet-test/attached-gpus when that file exists (the a100 capture
# says 4 and prints one, which nvml_facts reads as 3 lost GPUs: a test of a
# healthy one-GPU node writes 1 there); once Debian's nvidia-smi package is
# installed (gpu_driver), <driver_version> is that package's upstream version.
import hashlib
import json
import os
import re
import subprocess
import sys

# Unit tests run it outside a container with its files under GPUFLEET_STANDIN_ROOT.
ROOT = os.environ.get("GPUFLEET_STANDIN_ROOT", "")
CAPTURE = ROOT + "/usr/share/gpufleet-test/nvidia-smi-q-x.xml"
MODE_FILE = ROOT + "/var/lib/gpufleet-test/mig-mode.json"
HELD_FILE = ROOT + "/var/lib/gpufleet-test/mig-held"
PROCESSES_FILE = ROOT + "/var/lib/gpufleet-test/processes.json"
INSTANCES_FILE = ROOT + "/run/gpufleet-test/mig-instances.json"
ATTACHED_FILE = ROOT + "/usr/share/gpufleet-test/attached-gpus"

# name suffix kind -> (profile ID, compute slices, memory slices, most instances, starts, first GI ID by start)
SHAPES = {
    "1g": (19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6), dict((s, 7 + s) for s in range(7))),
    "1g+me": (20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6), dict((s, 7 + s) for s in range(7))),
    "1g.2m": (15, 1, 2, 4, (0, 2, 4, 6), {0: 3, 2: 4, 4: 5, 6: 6}),
    "2g": (14, 2, 2, 3, (0, 2, 4), {0: 3, 2: 4, 4: 5}),
    "3g": (9, 3, 4, 2, (0, 4), {0: 1, 4: 2}),
    "4g": (5, 4, 4, 1, (0,), {0: 1}),
    "7g": (0, 7, 8, 1, (0,), {0: 0}),
}
# GPU -> profile name -> kind, and its multiprocessors per compute slice and MiB per memory slice.
MODELS = {
    "A100-SXM4-80GB": ({"1g.10gb": "1g", "1g.10gb+me": "1g+me", "1g.20gb": "1g.2m", "2g.20gb": "2g",
                        "3g.40gb": "3g", "4g.40gb": "4g", "7g.80gb": "7g"}, 14, 9984),
    "H100 80GB HBM3": ({"1g.10gb": "1g", "1g.10gb+me": "1g+me", "1g.20gb": "1g.2m", "2g.20gb": "2g",
                        "3g.40gb": "3g", "4g.40gb": "4g", "7g.80gb": "7g"}, 16, 9984),
}
CI_PROFILE_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 6: 6}


def read_json(path, default):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def read_text(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)


def capture():
    with open(CAPTURE, encoding="utf-8") as handle:
        text = handle.read()
    if ROOT:
        # A unit test's node is a folder: the packages of the machine running the test are not its own.
        return text
    try:
        status = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Version}", "nvidia-smi"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                                check=False).stdout
    except OSError:
        status = ""
    match = re.match(r"^[hi]i\s+([0-9.]+)-", status)
    if match:
        text = re.sub(r"<driver_version>[^<]*</driver_version>", "<driver_version>%s</driver_version>"
                      % match.group(1), text)
    return text


def gpus_of(text):
    """[{index, start, end, name, uuid, bus, model, capable, capture_mode}] of the capture's <gpu> blocks."""
    gpus = []
    for index, block in enumerate(re.finditer(r"<gpu id=\"(?P<bus>[^\"]+)\">.*?</gpu>", text, re.S)):
        body = block.group(0)
        name = re.search(r"<product_name>([^<]*)</product_name>", body).group(1)
        current = re.search(r"<current_mig>([^<]*)</current_mig>", body)
        pending = re.search(r"<pending_mig>([^<]*)</pending_mig>", body)
        model = [key for key in MODELS if key in name]
        gpus.append({"index": index, "start": block.start(), "end": block.end(), "name": name,
                     "uuid": re.search(r"<uuid>([^<]*)</uuid>", body).group(1), "bus": block.group("bus"),
                     "model": MODELS[model[0]] if model else None,
                     "capable": bool(current) and current.group(1) in ("Enabled", "Disabled") and bool(model),
                     "capture_mode": current.group(1) if current else None,
                     "capture_pending": pending.group(1) if pending else None})
    return gpus


BOOTED_FILE = ROOT + "/run/gpufleet-test/booted"


def modes(gpus):
    state = read_json(MODE_FILE, {})
    if not os.path.exists(BOOTED_FILE):
        # The first call since the node booted (/run is a tmpfs): a pending MIG mode took effect when the
        # driver loaded, as an Ampere GPU's InfoROM setting does at a reboot.
        for mode in state.values():
            mode["current"] = mode["pending"]
        write_json(MODE_FILE, state)
        write_json(BOOTED_FILE, True)
    for gpu in gpus:
        if gpu["capable"] and gpu["uuid"] not in state:
            # MIG mode as captured; the capture's instances are not kept (as after a reboot).
            state[gpu["uuid"]] = {"current": gpu["capture_mode"], "pending": gpu["capture_pending"]}
    return state


def instances():
    return read_json(INSTANCES_FILE, {})


def mig_uuid(gpu, gi, ci):
    digest = hashlib.sha256(("%s/%s/%s" % (gpu["uuid"], gi, ci)).encode()).hexdigest()
    return "MIG-%s-%s-%s-%s-%s" % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])


def devices(gpu, state):
    """MIG devices of a GPU in MIG mode: [(index, gi, ci, profile name, compute slices, memory slices)]."""
    if not gpu["capable"] or modes([gpu]).get(gpu["uuid"], {}).get("current") != "Enabled":
        return []
    out = []
    for gi in sorted(state.get(gpu["uuid"], []), key=lambda g: g["id"]):
        for ci in sorted(gi["cis"], key=lambda c: c["id"]):
            out.append((gi["id"], ci["id"], ci["name"], ci["slices"], gi["memory"]))
    return [(number,) + device for number, device in enumerate(out)]


def print_xml(args):
    text = capture()
    gpus = gpus_of(text)
    state, mode_state = instances(), modes(gpus)
    processes = read_json(PROCESSES_FILE, [])
    pieces, last = [], 0
    for gpu in gpus:
        body = text[gpu["start"]:gpu["end"]]
        if gpu["capable"]:
            mode = mode_state[gpu["uuid"]]
            body = re.sub(r"<current_mig>[^<]*</current_mig>", "<current_mig>%s</current_mig>" % mode["current"], body)
            body = re.sub(r"<pending_mig>[^<]*</pending_mig>", "<pending_mig>%s</pending_mig>" % mode["pending"], body)
            rows = devices(gpu, state)
            sm, mib = gpu["model"][1], gpu["model"][2]
            if rows:
                blocks = "".join(
                    "\n            <mig_device>\n"
                    "                <index>%d</index>\n"
                    "                <gpu_instance_id>%d</gpu_instance_id>\n"
                    "                <compute_instance_id>%d</compute_instance_id>\n"
                    "                <device_attributes>\n"
                    "                    <shared>\n"
                    "                        <multiprocessor_count>%d</multiprocessor_count>\n"
                    "                        <copy_engine_count>%d</copy_engine_count>\n"
                    "                        <encoder_count>0</encoder_count>\n"
                    "                        <decoder_count>%d</decoder_count>\n"
                    "                        <ofa_count>0</ofa_count>\n"
                    "                        <jpg_count>0</jpg_count>\n"
                    "                    </shared>\n"
                    "                </device_attributes>\n"
                    "                <ecc_error_count>\n"
                    "                    <volatile_count>\n"
                    "                        <sram_uncorrectable>0</sram_uncorrectable>\n"
                    "                    </volatile_count>\n"
                    "                </ecc_error_count>\n"
                    "                <fb_memory_usage>\n"
                    "                    <total>%d MiB</total>\n"
                    "                    <reserved>0 MiB</reserved>\n"
                    "                    <used>12 MiB</used>\n"
                    "                    <free>%d MiB</free>\n"
                    "                </fb_memory_usage>\n"
                    "                <bar1_memory_usage>\n"
                    "                    <total>32767 MiB</total>\n"
                    "                    <used>0 MiB</used>\n"
                    "                    <free>32767 MiB</free>\n"
                    "                </bar1_memory_usage>\n"
                    "            </mig_device>" % (number, gi, ci, sm * slices, slices, slices, memory * mib,
                                                   memory * mib - 12)
                    for number, gi, ci, name, slices, memory in rows)
                migs = "<mig_devices>%s\n        </mig_devices>" % blocks
            else:
                migs = "<mig_devices>None</mig_devices>"
            if "<mig_devices>" in body:
                body = re.sub(r"<mig_devices>.*?</mig_devices>|<mig_devices\s*/>", migs, body, count=1, flags=re.S)
        listed = "".join(
            "\n            <process_info>\n"
            "                <gpu_instance_id>N/A</gpu_instance_id>\n"
            "                <compute_instance_id>N/A</compute_instance_id>\n"
            "                <pid>%d</pid>\n"
            "                <type>C</type>\n"
            "                <process_name>%s</process_name>\n"
            "                <used_memory>1024 MiB</used_memory>\n"
            "            </process_info>" % (int(p["pid"]), p["name"])
            for p in processes if int(p.get("gpu", 0)) == gpu["index"])
        if listed:
            body = re.sub(r"<processes\s*/>|<processes>.*?</processes>", "<processes>%s\n        </processes>" % listed,
                          body, count=1, flags=re.S)
        pieces.append(text[last:gpu["start"]] + body)
        last = gpu["end"]
    pieces.append(text[last:])
    out = "".join(pieces)
    attached = read_text(ATTACHED_FILE)
    if attached:
        out = re.sub(r"<attached_gpus>[^<]*</attached_gpus>", "<attached_gpus>%s</attached_gpus>" % attached, out)
    sys.stdout.write(out)
    return 0


def print_list(args):
    text = capture()
    gpus = gpus_of(text)
    state = instances()
    for gpu in gpus:
        print("GPU %d: %s (UUID: %s)" % (gpu["index"], gpu["name"], gpu["uuid"]))
        for number, gi, ci, name, slices, memory in devices(gpu, state):
            print("  MIG %-11s Device %2d: (UUID: %s)" % (name, number, mig_uuid(gpu, gi, ci)))
    return 0


def selected(args, gpus):
    if "-i" in args:
        wanted = args[args.index("-i") + 1]
        chosen = [g for g in gpus if str(g["index"]) == wanted or g["uuid"] == wanted or g["bus"] == wanted]
        if not chosen:
            print("No devices were found")
            sys.exit(6)
        return chosen
    return gpus


def set_mode(args):
    text = capture()
    gpus = selected(args, gpus_of(text))
    value = args[args.index("-mig") + 1] if "-mig" in args else args[-1].split("=", 1)[1]
    wanted = "Enabled" if value in ("1", "ENABLED", "enabled") else "Disabled"
    state = modes(gpus_of(text))
    rc = 0
    for gpu in gpus:
        if not gpu["capable"]:
            verb = "enable" if wanted == "Enabled" else "disable"
            print("Unable to %s MIG Mode for GPU %s: Not Supported" % (verb, gpu["bus"]))
            rc = 3
            continue
        if wanted == "Disabled" and instances().get(gpu["uuid"]):
            print("Unable to disable MIG Mode for GPU %s: In use by another client" % gpu["bus"])
            rc = 19
            continue
        state[gpu["uuid"]]["pending"] = wanted
        if os.path.exists(HELD_FILE) or read_json(PROCESSES_FILE, []):
            print("Warning: MIG mode is in pending %s state for GPU %s:In use by another client\n"
                  "%s is currently being used by one or more other processes (e.g. CUDA application or a monitoring "
                  "application such as another instance of nvidia-smi). Please first kill all processes using the "
                  "device and retry the command or reboot the system to make MIG mode effective."
                  % ("enable" if wanted == "Enabled" else "disable", gpu["bus"], gpu["bus"]))
        else:
            state[gpu["uuid"]]["current"] = wanted
            print("%s MIG Mode for GPU %s" % (wanted, gpu["bus"]))
    write_json(MODE_FILE, state)
    print("All done.")
    return rc


def reset(args):
    text = capture()
    gpus = selected(args, gpus_of(text))
    if read_json(PROCESSES_FILE, []) or os.path.exists(HELD_FILE):
        print("Unable to reset this GPU because it's being used by some other process (e.g. CUDA application, "
              "graphics application like X server, monitoring application like other instance of nvidia-smi). "
              "Please first kill all processes using this GPU and all compute applications running in the system.")
        return 255
    state = modes(gpus_of(text))
    held = instances()
    for gpu in gpus:
        if gpu["uuid"] in state:
            state[gpu["uuid"]]["current"] = state[gpu["uuid"]]["pending"]
        held.pop(gpu["uuid"], None)
        print("GPU %s was successfully reset." % gpu["bus"])
    write_json(MODE_FILE, state)
    write_json(INSTANCES_FILE, held)
    print("All done.")
    return 0


def _profile(gpu, token):
    names = gpu["model"][0]
    for name, kind in names.items():
        if token in (name, "MIG " + name) or (token.isdigit() and int(token) == SHAPES[kind][0]):
            return name, kind
    return None, None


def mig_gpus(args, gpus):
    chosen = [g for g in selected(args, gpus) if g["capable"]]
    enabled = [g for g in chosen if modes(gpus)[g["uuid"]]["current"] == "Enabled"]
    if not enabled:
        print("No MIG-enabled devices found.")
        sys.exit(6)
    return enabled


# Per kind: GiB as the A100 80GB table prints them, and the engines (SM per slice from the model,
# DEC, ENC / CE, JPEG, OFA) of the A100 rows of NVIDIA's tables.
LGIP_COLUMNS = {
    "1g": (9.75, 0, 0, 0, 0), "1g+me": (9.75, 1, 0, 1, 1), "1g.2m": (19.50, 1, 0, 0, 0),
    "2g": (19.50, 1, 0, 0, 0), "3g": (39.25, 2, 0, 0, 0), "4g": (39.25, 2, 0, 0, 0), "7g": (78.50, 5, 0, 1, 1),
}


LGIP_ORDER = [19, 20, 15, 14, 9, 5, 0]


def list_profiles(args):
    """The driver 535 layout (79 wide) of `nvidia-smi mig -lgip`."""
    gpus = gpus_of(capture())
    held = instances()
    border = "+" + "-" * 77 + "+"
    print(border)
    print("| GPU instance profiles:                                                      |")
    print("| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |")
    print("|                              Free/Total   GiB              CE    JPEG  OFA  |")
    print("|" + "=" * 77 + "|")
    first = True
    for gpu in mig_gpus(args, gpus):
        names, sm = gpu["model"][0], gpu["model"][1]
        used = _used_slots(held.get(gpu["uuid"], []))
        for name, kind in sorted(names.items(), key=lambda item: LGIP_ORDER.index(SHAPES[item[1]][0])):
            pid, slices, memory, most, starts, ids = SHAPES[kind]
            gib, dec, enc, jpeg, ofa = LGIP_COLUMNS[kind]
            free = _free_count(kind, used, held.get(gpu["uuid"], []))
            if not first:
                print(border)
            first = False
            print("|%4d  %-17s%3d     %-11s%-11s%-7s%-7s%-6s%-4s|" % (
                gpu["index"], "MIG " + name, pid, "%d/%d" % (free, most), "%.2f" % gib, "No", sm * slices, dec, enc))
            print("|%61s%-6s%-6s%-4s|" % ("", slices, jpeg, ofa))
    print(border)
    return 0


def _used_slots(gis):
    used = set()
    for gi in gis:
        used.update(range(gi["start"], gi["start"] + gi["memory"]))
    return used


def _free_count(kind, used, gis):
    pid, slices, memory, most, starts, ids = SHAPES[kind]
    taken = set(used)
    count = 0
    for start in starts:
        span = set(range(start, start + memory))
        if start + memory <= 8 and not span & taken:
            taken |= span
            count += 1
    same = len([gi for gi in gis if gi["kind"] == kind])
    return max(0, min(count, most - same))


def list_instances(args):
    gpus = gpus_of(capture())
    held = instances()
    rows = []
    for gpu in mig_gpus(args, gpus):
        for gi in sorted(held.get(gpu["uuid"], []), key=lambda g: g["id"]):
            rows.append((gpu, gi))
    if not rows:
        print("No GPU instances found: Not Found")
        return 6
    print("+-------------------------------------------------------+")
    print("| GPU instances:                                        |")
    print("| GPU   Name             Profile  Instance   Placement  |")
    print("|                          ID       ID       Start:Size |")
    print("|=======================================================|")
    for number, (gpu, gi) in enumerate(rows):
        if number:
            print("+-------------------------------------------------------+")
        placement = "%d:%d" % (gi["start"], gi["memory"])
        row = (gpu["index"], "MIG " + gi["name"], SHAPES[gi["kind"]][0], gi["id"], placement)
        print("|%4d  %-17s%5d%9d%13s     |" % row)
    print("+-------------------------------------------------------+")
    return 0


def list_compute(args):
    gpus = gpus_of(capture())
    held = instances()
    rows = []
    for gpu in mig_gpus(args, gpus):
        for gi in sorted(held.get(gpu["uuid"], []), key=lambda g: g["id"]):
            for ci in sorted(gi["cis"], key=lambda c: c["id"]):
                rows.append((gpu, gi, ci))
    if not rows:
        print("No compute instances found: Not Found")
        return 6
    print("+--------------------------------------------------------------------+")
    print("| Compute instances:                                                 |")
    print("| GPU     GPU       Name             Profile   Instance   Placement  |")
    print("|       Instance                       ID        ID       Start:Size |")
    print("|         ID                                                         |")
    print("|====================================================================|")
    for number, (gpu, gi, ci) in enumerate(rows):
        if number:
            print("+--------------------------------------------------------------------+")
        print("|%4d%7d       %-17s%5d%10d%13s     |" % (
            gpu["index"], gi["id"], "MIG " + ci["name"], CI_PROFILE_IDS.get(ci["slices"], 0), ci["id"],
            "%d:%d" % (ci["start"], ci["slices"])))
    print("+--------------------------------------------------------------------+")
    return 0


def create_gpu_instances(args):
    gpus = gpus_of(capture())
    targets = mig_gpus(args, gpus)
    held = instances()
    tokens = args[args.index("-cgi") + 1].split(",")
    with_ci = "-C" in args
    rc = 0
    for gpu in targets:
        gis = held.setdefault(gpu["uuid"], [])
        for token in tokens:
            name, kind = _profile(gpu, token)
            if name is None:
                print("Unable to create a GPU instance on GPU %2d using profile %s: Invalid Argument" % (
                    gpu["index"], token))
                print("Failed to create GPU instances: Invalid Argument")
                rc = 2
                break
            pid, slices, memory, most, starts, ids = SHAPES[kind]
            used = _used_slots(gis)
            # The lowest free placement, as in the MIG User Guide's example and an H100 capture (the first
            # 3g instance at 0:4): largest first does not always fit, another order may.
            start = next((s for s in starts if not set(range(s, s + memory)) & used), None)
            if start is None or len([g for g in gis if g["kind"] == kind]) >= most:
                print("Unable to create a GPU instance on GPU %2d using profile %d: Insufficient Resources" % (
                    gpu["index"], pid))
                print("Failed to create GPU instances: Insufficient Resources")
                rc = 2
                break
            gi_id = ids[start]
            gi = {"id": gi_id, "name": name, "kind": kind, "start": start, "memory": memory, "slices": slices,
                  "cis": []}
            gis.append(gi)
            print("Successfully created GPU instance ID %2d on GPU %2d using profile MIG %s (ID %2d)" % (
                gi_id, gpu["index"], name, pid))
            if with_ci:
                gi["cis"].append({"id": 0, "name": name.split("+", 1)[0], "slices": slices, "start": 0})
                print("Successfully created compute instance ID %2d on GPU %2d GPU instance ID %2d using profile "
                      "MIG %s (ID %2d)" % (0, gpu["index"], gi_id, name.split("+", 1)[0], CI_PROFILE_IDS.get(slices, 0)))
    write_json(INSTANCES_FILE, held)
    return rc


def create_compute_instances(args):
    gpus = gpus_of(capture())
    targets = mig_gpus(args, gpus)
    held = instances()
    gi_id = int(args[args.index("-gi") + 1])
    tokens = args[args.index("-cci") + 1].split(",")
    for gpu in targets:
        gi = next((g for g in held.get(gpu["uuid"], []) if g["id"] == gi_id), None)
        if gi is None:
            print("Unable to find GPU instance ID %2d on GPU %2d: Not Found" % (gi_id, gpu["index"]))
            return 6
        for token in tokens:
            match = re.match(r"^(?:MIG )?(\d+)c\.(.+)$", token)
            if not match or match.group(2) != gi["name"] or int(match.group(1)) > gi["slices"]:
                print("Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile %s: "
                      "Invalid Argument" % (gpu["index"], gi_id, token))
                return 2
            slices = int(match.group(1))
            used = sum(c["slices"] for c in gi["cis"])
            if used + slices > gi["slices"]:
                print("Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile %d: "
                      "Insufficient Resources" % (gpu["index"], gi_id, CI_PROFILE_IDS.get(slices, 0)))
                return 2
            ci_id = len(gi["cis"])
            gi["cis"].append({"id": ci_id, "name": token.replace("MIG ", ""), "slices": slices, "start": used})
            print("Successfully created compute instance ID %2d on GPU %2d GPU instance ID %2d using profile "
                  "MIG %s (ID %2d)" % (ci_id, gpu["index"], gi_id, token.replace("MIG ", ""),
                                       CI_PROFILE_IDS.get(slices, 0)))
    write_json(INSTANCES_FILE, held)
    return 0


def _busy(gpu):
    return [p for p in read_json(PROCESSES_FILE, []) if int(p.get("gpu", 0)) == gpu["index"]]


def destroy_compute_instances(args):
    gpus = gpus_of(capture())
    targets = mig_gpus(args, gpus)
    held = instances()
    count = 0
    for gpu in targets:
        for gi in held.get(gpu["uuid"], []):
            if "-gi" in args and str(gi["id"]) != args[args.index("-gi") + 1]:
                continue
            if _busy(gpu):
                print("Unable to destroy compute instance ID %2d from GPU %2d GPU instance ID %2d: In use by another "
                      "client" % (gi["cis"][0]["id"] if gi["cis"] else 0, gpu["index"], gi["id"]))
                return 19
            for ci in list(gi["cis"]):
                if "-ci" in args and str(ci["id"]) != args[args.index("-ci") + 1]:
                    continue
                gi["cis"].remove(ci)
                count += 1
                print("Successfully destroyed compute instance ID %2d from GPU %2d GPU instance ID %2d" % (
                    ci["id"], gpu["index"], gi["id"]))
    write_json(INSTANCES_FILE, held)
    if not count:
        print("No %s instances found: Not Found" % (
            "compute" if any(held.get(gpu["uuid"]) for gpu in targets) else "GPU"))
        return 6
    return 0


def destroy_gpu_instances(args):
    gpus = gpus_of(capture())
    targets = mig_gpus(args, gpus)
    held = instances()
    count, rc = 0, 0
    for gpu in targets:
        for gi in list(held.get(gpu["uuid"], [])):
            if "-gi" in args and str(gi["id"]) != args[args.index("-gi") + 1]:
                continue
            if gi["cis"]:
                print("Unable to destroy GPU instance ID %2d from GPU %2d: In use by another client" % (
                    gi["id"], gpu["index"]))
                print("Failed to destroy GPU instances: In use by another client")
                rc = 19
                continue
            held[gpu["uuid"]].remove(gi)
            count += 1
            print("Successfully destroyed GPU instance ID %2d from GPU %2d" % (gi["id"], gpu["index"]))
    write_json(INSTANCES_FILE, held)
    if not count and not rc:
        print("No GPU instances found: Not Found")
        return 6
    return rc


def main(args):
    if args[:1] == ["mig"]:
        rest = args[1:]
        for flag, action in (("-lgip", list_profiles), ("-lgi", list_instances), ("-lci", list_compute),
                             ("-cgi", create_gpu_instances), ("-cci", create_compute_instances),
                             ("-dci", destroy_compute_instances), ("-dgi", destroy_gpu_instances)):
            if flag in rest:
                return action(rest)
    elif "-mig" in args or any(a.startswith("--multi-instance-gpu=") for a in args):
        return set_mode(args)
    elif "-r" in args or "--gpu-reset" in args:
        return reset(args)
    elif "-x" in args or "--xml-format" in args:
        return print_xml(args)
    elif args == ["-L"] or args == ["--list-gpus"]:
        return print_list(args)
    sys.stderr.write("stand-in: unsupported arguments: %s\n" % " ".join(args))
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
