# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: a node's declared MIG layout, checked against its GPUs and compared with what they run.

The declaration (gpu_mig_layout) is a named layout for every GPU, or a list of
entries, each for some GPUs: MIG off, MIG on with GPU instances given by
profile name (``3g.40gb``, one compute instance spanning it), by compute
instance profile (``1c.3g.40gb``: a 3g.40gb GPU instance holding one 1-slice
compute instance) or as {gpu_instance, compute_instances}, or a named layout.

The profiles a GPU supports come from the facts when nvml_facts read them
(``nvidia-smi mig -lgip``, which answers only for GPUs in MIG mode), else
from NVIDIA's published tables for the GPU (MIG User Guide, "Supported MIG
Profiles"), recognised by product name and memory. Where the published
placements are known, a layout must also fit the GPU's memory slices the way
the driver places instances (the starts ``nvidia-smi mig -lgipp`` lists).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

NAMED_LAYOUTS = ("disabled", "smallest", "largest", "balanced")

# The shapes of GPU instance profiles on the 7-compute-slice, 8-memory-slice GPUs
# (A100, H100, H200, GH200, B200, GB200) and on A30 (4 and 4), per NVIDIA's
# MIG User Guide: kind -> (compute slices, memory slices, most instances, possible starts).
_SHAPES_7 = {
    "1g": (1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    "1g+me": (1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "1g.2m": (1, 2, 4, (0, 2, 4, 6)),
    "2g": (2, 2, 3, (0, 2, 4)),
    "3g": (3, 4, 2, (0, 4)),
    "4g": (4, 4, 1, (0,)),
    "7g": (7, 8, 1, (0,)),
}
_SHAPES_4 = {
    "1g": (1, 1, 4, (0, 1, 2, 3)),
    "1g+me": (1, 1, 1, (0, 1, 2, 3)),
    "2g": (2, 2, 2, (0, 2)),
    "2g+me": (2, 2, 1, (0, 2)),
    "4g": (4, 4, 1, (0,)),
}


def _family_7(one, two, three, seven):
    """Profile name -> shape for a 7-slice GPU whose 1g, 1g-with-2-slices/2g, 3g/4g and 7g instances
    have these memory sizes (GB, as NVIDIA names them)."""
    return {
        "1g.%dgb" % one: "1g", "1g.%dgb+me" % one: "1g+me", "1g.%dgb" % two: "1g.2m", "2g.%dgb" % two: "2g",
        "3g.%dgb" % three: "3g", "4g.%dgb" % three: "4g", "7g.%dgb" % seven: "7g",
    }


# (product name pattern, lowest memory MiB, highest memory MiB) -> (slots, shapes, profiles, balanced)
KNOWN_GPUS = [
    (r"\bA30\b", 0, 1 << 30, 4, _SHAPES_4,
     {"1g.6gb": "1g", "1g.6gb+me": "1g+me", "2g.12gb": "2g", "2g.12gb+me": "2g+me", "4g.24gb": "4g"},
     ["2g.12gb", "1g.6gb", "1g.6gb"]),
    (r"\bA100\b", 0, 50000, 8, _SHAPES_7, _family_7(5, 10, 20, 40), ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]),
    (r"\bA100\b", 50000, 1 << 30, 8, _SHAPES_7, _family_7(10, 20, 40, 80),
     ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
    (r"\bH100 NVL\b", 0, 1 << 30, 8, _SHAPES_7, _family_7(12, 24, 47, 94),
     ["3g.47gb", "2g.24gb", "1g.12gb", "1g.12gb"]),
    (r"\bGH200\b", 0, 110000, 8, _SHAPES_7, _family_7(12, 24, 48, 96), ["3g.48gb", "2g.24gb", "1g.12gb", "1g.12gb"]),
    (r"\bGH200\b", 110000, 1 << 30, 8, _SHAPES_7, _family_7(18, 36, 72, 144),
     ["3g.72gb", "2g.36gb", "1g.18gb", "1g.18gb"]),
    (r"\bH200\b", 110000, 1 << 30, 8, _SHAPES_7, _family_7(18, 35, 71, 141),
     ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]),
    (r"\bH100\b", 0, 90000, 8, _SHAPES_7, _family_7(10, 20, 40, 80), ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
    # 94 GB (H100 NVL, H100 94GB) report about 95830 MiB; the 96 GB H100 of GH200 about 97871 MiB.
    (r"\bH100\b", 90000, 96800, 8, _SHAPES_7, _family_7(12, 24, 47, 94), ["3g.47gb", "2g.24gb", "1g.12gb", "1g.12gb"]),
    (r"\bH100\b", 96800, 1 << 30, 8, _SHAPES_7, _family_7(12, 24, 48, 96), ["3g.48gb", "2g.24gb", "1g.12gb", "1g.12gb"]),
    (r"\bGB200\b", 0, 1 << 30, 8, _SHAPES_7, _family_7(23, 47, 93, 186), ["3g.93gb", "2g.47gb", "1g.23gb", "1g.23gb"]),
    (r"\bB200\b", 0, 1 << 30, 8, _SHAPES_7, _family_7(23, 45, 90, 180), ["3g.90gb", "2g.45gb", "1g.23gb", "1g.23gb"]),
]

_GI_RE = re.compile(r"^(?P<slices>\d+)g\.(?P<memory>\d+)gb(?P<extra>(\+[a-z]+)*)$")
_CI_RE = re.compile(r"^(?P<compute>\d+)c\.(?P<gi>\d+g\.\d+gb(\+[a-z]+)*)$")


def _gpu_words(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("name") or "unnamed")


def gpu_profiles(gpu):
    """{name: {slices, memory_slices, max, starts}} of the GPU instance profiles a GPU supports, and where
    they come from ("facts", "table" or None when neither knows the GPU)."""
    mig = gpu.get("mig") or {}
    known = None
    for pattern, low, high, slots, shapes, names, balanced in KNOWN_GPUS:
        memory = gpu.get("memory_total_mib") or 0
        if re.search(pattern, gpu.get("name") or "") and low <= memory < high:
            known = (slots, shapes, names, balanced)
            break
    listed = mig.get("profiles") or []
    profiles = {}
    if listed:
        for entry in listed:
            name = str(entry.get("name") or "")
            match = _GI_RE.match(name)
            if not match:
                continue
            shape = shapes_of(known, name)
            profiles[name] = {
                "slices": int(match.group("slices")),
                "memory_slices": shape[1] if shape else None,
                "max": entry.get("instances_total") if entry.get("instances_total") is not None
                else (shape[2] if shape else None),
                "starts": shape[3] if shape else None,
                "id": entry.get("id"),
            }
        return profiles, "facts", known
    if known is None:
        return {}, None, None
    for name in known[2]:
        shape = shapes_of(known, name)
        profiles[name] = {"slices": shape[0], "memory_slices": shape[1], "max": shape[2], "starts": shape[3],
                          "id": None}
    return profiles, "table", known


def shapes_of(known, name):
    if known is None or name not in known[2]:
        return None
    return known[1][known[2][name]]


def _fits(instances, profiles, slots):
    """Whether GPU instances (profile names) can be placed together in ``slots`` memory slices."""
    shapes = [profiles[name] for name in instances]
    if any(shape["starts"] is None or shape["memory_slices"] is None for shape in shapes):
        return sum(shape["slices"] for shape in shapes) <= max(p["slices"] for p in profiles.values())
    order = sorted(range(len(shapes)), key=lambda i: -shapes[i]["memory_slices"])
    used = [False] * slots

    def place(position):
        if position == len(order):
            return True
        shape = shapes[order[position]]
        for start in shape["starts"]:
            span = range(start, start + shape["memory_slices"])
            if start + shape["memory_slices"] <= slots and not any(used[slot] for slot in span):
                for slot in span:
                    used[slot] = True
                if place(position + 1):
                    return True
                for slot in span:
                    used[slot] = False
        return False

    compute = sum(shape["slices"] for shape in shapes)
    return compute <= 7 and place(0)


def _named(name, profiles, known):
    """The GPU instances of a named layout on a GPU, or None when it cannot be said."""
    plain = dict((n, p) for n, p in profiles.items() if "+" not in n)
    if not plain:
        return None
    if name == "largest":
        return [max(plain, key=lambda n: (plain[n]["slices"], plain[n]["memory_slices"] or 0))]
    if name == "smallest":
        smallest = min(plain, key=lambda n: (plain[n]["slices"], plain[n]["memory_slices"] or 0,
                                             int(_GI_RE.match(n).group("memory"))))
        count = plain[smallest]["max"] or 1
        return [smallest] * int(count)
    if name == "balanced":
        return list(known[3]) if known else None
    return None


def _instance_item(item, where, profiles, gpu):
    """One entry of ``instances`` -> ({gpu_instance, compute_instances}, error)."""
    if isinstance(item, str):
        match = _CI_RE.match(item)
        if match:
            item = {"gpu_instance": match.group("gi"), "compute_instances": [item]}
        else:
            item = {"gpu_instance": item}
    if not isinstance(item, dict) or set(item) - {"gpu_instance", "compute_instances"} \
            or not isinstance(item.get("gpu_instance"), str):
        return None, ("%s is %r; give a profile name such as 3g.40gb or 1c.3g.40gb, or "
                      "{gpu_instance: 3g.40gb, compute_instances: [1c.3g.40gb, 2c.3g.40gb]}" % (where, item))
    name = item["gpu_instance"]
    if name not in profiles:
        return None, "%s is %r: %s has no MIG profile %s; it supports %s" % (
            where, name, _gpu_words(gpu), name, ", ".join(sorted(profiles, key=_profile_order)))
    slices = profiles[name]["slices"]
    computes = item.get("compute_instances")
    if computes is None:
        return {"gpu_instance": name, "compute_instances": [name]}, None
    if not isinstance(computes, list) or not computes:
        return None, "%s.compute_instances is %r; give a list of profiles such as 1c.%s" % (where, computes, name)
    total = 0
    for position, compute in enumerate(computes):
        match = _CI_RE.match(str(compute)) if isinstance(compute, str) else None
        if compute == name:
            total += slices
            continue
        if not match or match.group("gi") != name or int(match.group("compute")) > slices:
            return None, ("%s.compute_instances[%d] is %r: a compute instance of the %s GPU instance on %s is "
                          "<n>c.%s with n at most %d, or %s itself" % (
                              where, position, compute, name, _gpu_words(gpu), name, slices, name))
        total += int(match.group("compute"))
    if total > slices:
        return None, "%s.compute_instances %s need %d compute slices; a %s GPU instance on %s has %d" % (
            where, ", ".join(computes), total, name, _gpu_words(gpu), slices)
    return {"gpu_instance": name, "compute_instances": list(computes)}, None


def _profile_order(name):
    match = _GI_RE.match(name) or _GI_RE.match(name.split(".", 1)[-1])
    return (int(match.group("slices")), int(match.group("memory")), name) if match else (99, 0, name)


def _layout_entries(layout, variable):
    if layout is None or layout == "" or layout == []:
        return [], []
    if isinstance(layout, str):
        if layout not in NAMED_LAYOUTS:
            return None, ["%s is %r; give one of %s, or a list of entries" % (
                variable, layout, ", ".join(NAMED_LAYOUTS))]
        return [("%s" % variable, {"gpus": "all", "layout": layout})], []
    if not isinstance(layout, list):
        return None, ["%s must be a named layout (%s) or a list of entries, got %r" % (
            variable, ", ".join(NAMED_LAYOUTS), layout)]
    entries, errors = [], []
    for position, entry in enumerate(layout):
        where = "%s[%d]" % (variable, position)
        if not isinstance(entry, dict):
            errors.append("%s is %r; each entry is a dict with gpus and mig, instances or layout" % (where, entry))
            continue
        unknown = sorted(set(entry) - {"gpus", "mig", "instances", "layout"})
        if unknown:
            errors.append("%s has unknown keys %s; it takes gpus, mig, instances and layout" % (
                where, ", ".join(unknown)))
            continue
        if "mig" in entry and not isinstance(entry["mig"], bool):
            errors.append("%s.mig is %r; give true or false" % (where, entry["mig"]))
            continue
        if entry.get("layout") is not None and entry.get("layout") not in NAMED_LAYOUTS:
            errors.append("%s.layout is %r; give one of %s" % (where, entry.get("layout"), ", ".join(NAMED_LAYOUTS)))
            continue
        given = [key for key in ("instances", "layout") if entry.get(key) is not None]
        if len(given) > 1 or (entry.get("mig") is False and given):
            errors.append("%s gives %s; give one of mig: false, instances or layout" % (
                where, " and ".join((["mig: false"] if entry.get("mig") is False else []) + given)))
            continue
        if entry.get("instances") is not None and not isinstance(entry.get("instances"), list):
            errors.append("%s.instances is %r; give a list of profiles" % (where, entry.get("instances")))
            continue
        entries.append((where, entry))
    return entries, errors


def _gpu_selection(entry, where, gpus):
    selection = entry.get("gpus", "all")
    if selection == "all":
        return [gpu["index"] for gpu in gpus], None
    if isinstance(selection, int) and not isinstance(selection, bool):
        selection = [selection]
    if not isinstance(selection, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in selection):
        return None, "%s.gpus is %r; give all or a list of GPU indexes" % (where, selection)
    missing = [i for i in selection if i not in [gpu["index"] for gpu in gpus]]
    if missing:
        return None, "%s.gpus names GPU %s, which the node does not have (it has %s)" % (
            where, ", ".join(str(i) for i in missing), ", ".join(str(gpu["index"]) for gpu in gpus) or "no GPU")
    return selection, None


def current_instances(gpu):
    """What a GPU runs: sorted GPU instances, each the sorted profiles of its compute instances. A GPU
    instance with one compute instance spanning it goes by its GPU instance profile where the facts
    have it (``nvidia-smi -L`` names a 1g.10gb+me instance's device 1g.10gb)."""
    groups, profiles = {}, {}
    for device in (gpu.get("mig") or {}).get("devices") or []:
        key = device.get("gpu_instance_id")
        key = ("device", device.get("index")) if key is None else ("gi", key)
        groups.setdefault(key, []).append(str(device.get("profile") or "unknown"))
        if device.get("gpu_instance_profile"):
            profiles[key] = str(device["gpu_instance_profile"])
    for key, group in groups.items():
        if len(group) == 1 and key in profiles and profiles[key].split("+", 1)[0] == group[0]:
            group[0] = profiles[key]
    return sorted(sorted(group) for group in groups.values())


def _words(instances):
    if not instances:
        return "no MIG devices"
    names = []
    for group in instances:
        if len(group) == 1 and _GI_RE.match(group[0]):
            names.append(group[0])
        else:
            names.append("[%s]" % " + ".join(group))
    counts = []
    for name in sorted(set(names), key=lambda n: (-_profile_order(n.strip("[]").split(" ")[0])[0], n)):
        count = names.count(name)
        counts.append(name + (" x%d" % count if count > 1 else ""))
    return ", ".join(counts)


def _state_words(mode, instances):
    if mode != "enabled":
        return "MIG %s" % (mode or "unknown")
    return "MIG enabled: %s" % _words(instances)


def mig_plan(facts, layout, variable="gpu_mig_layout"):
    """Check a node's MIG declaration against its facts and compare it with what the GPUs run.

    Returns {errors, gpus: [{index, uuid, name, wanted, current, action, before, after}], changes,
    config: the layout for the node's gpufleet-mig program, strategy: the device plugin's MIG strategy
    the layout asks for (none, single or mixed), resource: the extended resource one MIG device of this
    node is advertised as under that strategy, advertised: {resource: count} NVIDIA's device plugin
    advertises under that strategy once the layout is applied}.
    """
    facts = facts or {}
    if not isinstance(facts, dict):
        raise AnsibleFilterError("mig_plan expects the NVIDIA facts (a dict), got %s" % type(facts).__name__)
    entries, errors = _layout_entries(layout, variable)
    answer = {"errors": errors, "gpus": [], "changes": [], "config": {"version": 1, "gpus": []},
              "strategy": "none", "resource": "nvidia.com/gpu", "advertised": {}}
    if entries is None or errors:
        return answer
    if not entries:
        return answer
    if facts.get("state") != "ok":
        errors.append("%s cannot be checked: the NVIDIA facts of this node say %s (%s)" % (
            variable, facts.get("state") or "not gathered", facts.get("message") or "no facts"))
        return answer
    gpus = [gpu for gpu in facts.get("gpus") or [] if isinstance(gpu, dict) and gpu.get("index") is not None]
    wanted = {}
    for where, entry in entries:
        selection, error = _gpu_selection(entry, where, gpus)
        if error:
            errors.append(error)
            continue
        for index in selection:
            gpu = [g for g in gpus if g["index"] == index][0]
            if index in wanted:
                errors.append("%s names %s, which %s names already" % (where, _gpu_words(gpu), wanted[index][0]))
                continue
            if entry.get("mig") is False or entry.get("layout") == "disabled":
                wanted[index] = (where, {"mig": False, "instances": []})
                continue
            mig = gpu.get("mig") or {}
            if not mig.get("capable"):
                errors.append("%s asks for MIG on %s, which does not support MIG" % (where, _gpu_words(gpu)))
                continue
            profiles, source, known = gpu_profiles(gpu)
            if not profiles:
                errors.append("%s: the MIG profiles of %s are not known: it is not in NVIDIA's published tables "
                              "and nvml_facts lists profiles only for GPUs already in MIG mode; enable MIG mode "
                              "first ({gpus: [%s], instances: []}) and run again" % (where, _gpu_words(gpu), index))
                continue
            if entry.get("layout"):
                names = _named(entry["layout"], profiles, known)
                if names is None:
                    errors.append("%s.layout is %r: NVIDIA publishes no such layout for %s; list its instances" % (
                        where, entry["layout"], _gpu_words(gpu)))
                    continue
                items = names
                item_where = "%s.layout %s" % (where, entry["layout"])
            else:
                items = entry.get("instances") or []
                item_where = "%s.instances" % where
            instances, bad = [], False
            for position, item in enumerate(items):
                instance, error = _instance_item(item, "%s[%d]" % (item_where, position), profiles, gpu)
                if error:
                    errors.append(error)
                    bad = True
                else:
                    instances.append(instance)
            if bad:
                continue
            names = [instance["gpu_instance"] for instance in instances]
            for name in sorted(set(names)):
                limit = profiles[name]["max"]
                if limit is not None and names.count(name) > int(limit):
                    errors.append("%s asks for %d x %s on %s, which allows %s" % (
                        item_where, names.count(name), name, _gpu_words(gpu), limit))
                    bad = True
            if not bad and names and not _fits(names, profiles, known[0] if known else 8):
                errors.append("%s: %s do not fit together on %s (%s slices; placements per NVIDIA's MIG "
                              "User Guide)" % (item_where, " + ".join(names), _gpu_words(gpu),
                                               "%d compute" % 7 if not known or known[0] == 8 else "4 compute"))
                bad = True
            if not bad:
                wanted[index] = (where, {"mig": True, "instances": instances})
    if errors:
        return answer
    mig_devices, whole, empty_mig = [], 0, 0
    for gpu in gpus:
        mig = gpu.get("mig") or {}
        current = {"mode": mig.get("current_mode"), "pending": mig.get("pending_mode"),
                   "instances": current_instances(gpu) if mig.get("current_mode") == "enabled" else []}
        row = {"index": gpu["index"], "uuid": gpu.get("uuid"), "name": gpu.get("name"), "current": current,
               "before": _state_words(current["mode"], current["instances"])}
        if gpu["index"] not in wanted:
            row.update(wanted=None, action="none", after=row["before"] + " (not in %s, left alone)" % variable)
            if current["mode"] == "enabled":
                mig_devices.extend(device for group in current["instances"] for device in group)
                empty_mig += 0 if current["instances"] else 1
            else:
                whole += 1
            answer["gpus"].append(row)
            continue
        declared = wanted[gpu["index"]][1]
        target = sorted(sorted(instance["compute_instances"]) for instance in declared["instances"])
        row["wanted"] = declared
        if not declared["mig"]:
            row["after"] = "MIG disabled"
            row["action"] = "none" if current["mode"] in ("disabled", None) and current["pending"] != "enabled" \
                else "disable"
            whole += 1
        else:
            row["after"] = _state_words("enabled", target)
            if current["mode"] != "enabled" or current["pending"] == "disabled":
                row["action"] = "enable"
            elif current["instances"] != target:
                row["action"] = "repartition"
            else:
                row["action"] = "none"
            mig_devices.extend(name for group in target for name in group)
            empty_mig += 0 if target else 1
        answer["gpus"].append(row)
        answer["config"]["gpus"].append({
            "index": gpu["index"], "uuid": gpu.get("uuid"), "mig": declared["mig"],
            "gpu_instances": [{"profile": instance["gpu_instance"], "compute_instances": instance["compute_instances"]}
                              for instance in declared["instances"]]})
        if row["action"] != "none":
            answer["changes"].append("%s: %s -> %s" % (_gpu_words(gpu), row["before"], row["after"]))
    advertised = [name for name in mig_devices if _GI_RE.match(name)]
    answer["advertised"] = {"nvidia.com/gpu": len(gpus)}
    if advertised:
        # NVIDIA's plugin refuses, under single, a compute instance smaller than its GPU instance.
        split = [name for name in mig_devices if not _GI_RE.match(name)]
        # Nor does it take, under single, a GPU in MIG mode without MIG devices (mixed ignores it).
        if whole == 0 and empty_mig == 0 and len(set(advertised)) == 1 and not split:
            answer["strategy"] = "single"
            answer["advertised"] = {"nvidia.com/gpu": len(advertised)}
        else:
            answer["strategy"] = "mixed"
            answer["resource"] = "nvidia.com/mig-" + sorted(advertised, key=_profile_order)[0].replace("+", ".")
            answer["advertised"] = {"nvidia.com/gpu": whole} if whole else {}
            for name in advertised:
                resource = "nvidia.com/mig-" + name.replace("+", ".")
                answer["advertised"][resource] = answer["advertised"].get(resource, 0) + 1
    return answer


_GPU_RESOURCE_RE = re.compile(r"^nvidia\.com/(gpu|mig-.+)$")


def _quantity(value):
    try:
        return int(str(value))
    except ValueError:
        return 1


def mig_gpu_pods(pods):
    """The pods (not finished) that hold GPUs or MIG devices, as 'namespace/name (resource: count, ...)'."""
    holders = []
    for pod in pods or []:
        if ((pod or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        wanted = {}
        spec = pod.get("spec") or {}
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                for name, value in (resources.get(kind) or {}).items():
                    if _GPU_RESOURCE_RE.match(str(name)):
                        wanted[name] = max(wanted.get(name, 0), _quantity(value))
        if wanted:
            metadata = pod.get("metadata") or {}
            holders.append("%s/%s (%s)" % (metadata.get("namespace"), metadata.get("name"), ", ".join(
                "%s: %d" % (name, count) for name, count in sorted(wanted.items()))))
    return holders


def mig_advertised_gaps(expected, allocatable):
    """Where a Node's allocatable GPU resources differ from what its layout makes (mig_plan's
    ``advertised``): ['resource: N advertised, the layout makes M']; empty when they agree."""
    allocatable = allocatable or {}
    gaps = []
    names = set(expected or {}) | set(name for name in allocatable if _GPU_RESOURCE_RE.match(str(name)))
    for name in sorted(names):
        want = int((expected or {}).get(name, 0))
        have = _quantity(allocatable.get(name, "0"))
        if want != have:
            gaps.append("%s: %d advertised, the layout makes %d" % (name, have, want))
    return gaps


class FilterModule(object):
    def filters(self):
        return {"mig_plan": mig_plan, "mig_gpu_pods": mig_gpu_pods, "mig_advertised_gaps": mig_advertised_gaps}
