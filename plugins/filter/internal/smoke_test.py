# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind the GPU smoke test: what a pod saw, and whether it should run at all.

Pure functions over Kubernetes Pod objects (as kubernetes.core.k8s_info returns
them), ``nvidia-smi -L`` text and the nodes' NVIDIA facts, so every verdict the
role can reach is unit-tested on data alone.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.nvidia.plugins.filter.internal.node_health import node_health
from ansible_collections.gpufleet.nvidia.plugins.module_utils.nvml_inventory import parse_smi_list
from ansible_collections.gpufleet.nvidia.plugins.module_utils.pod_start import NEVER_STARTS, PULL_FAILURES, missing_handler

# Bytes of a termination message the kubelet keeps (the end of it).
TERMINATION_MESSAGE_KEPT = 4000
_CUDA_CLAUSE_RE = re.compile(r"(?:^|\s)cuda>=(?P<version>\d+\.\d+)(?:\.\d+)?(?=\s|$)")
_VERSION_RE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d+)(?:\.\d+)?$")
# nvidia/cuda tags start with the CUDA version (12.2.2-base-ubuntu22.04);
# other images name it after "cuda" (cuda-sample:vectoradd-cuda12.5.0).
_CUDA_TAG_LEADING_RE = re.compile(r"^(?P<version>\d+\.\d+)(?:\.\d+)?-")
_CUDA_TAG_NAMED_RE = re.compile(r"cuda-?(?P<version>\d+\.\d+)(?:\.\d+)?(?=$|[-_])")


def _version_tuple(text):
    match = _VERSION_RE.match(str(text).strip())
    if not match:
        return None
    return int(match.group("major")), int(match.group("minor"))


def nvidia_smi_list(text):
    """``nvidia-smi -L`` text -> [{index, name, uuid, mig_devices: [{index, profile, uuid}]}]."""
    if text is None:
        return []
    if not isinstance(text, (str, bytes)):
        raise AnsibleFilterError("nvidia_smi_list expects text, got %s" % type(text).__name__)
    return parse_smi_list(text)


def smi_list_devices(text):
    """The devices a container was given, from its ``nvidia-smi -L``.

    A MIG device is listed under its parent GPU; the container holds the MIG
    device, not the whole GPU, so a GPU with MIG devices counts by its MIG
    devices and a GPU without them counts as itself.
    """
    devices = []
    for gpu in nvidia_smi_list(text):
        if gpu["mig_devices"]:
            devices.extend(mig["uuid"] for mig in gpu["mig_devices"] if mig["uuid"])
        elif gpu["uuid"]:
            devices.append(gpu["uuid"])
    return devices


def facts_uuids(facts):
    """Every GPU and MIG device UUID in a host's ``ansible_facts['nvidia']``, or in the plan's summary of
    them (plan_facts)."""
    if isinstance((facts or {}).get("uuids"), list):
        return list(facts["uuids"])
    uuids = []
    for gpu in (facts or {}).get("gpus") or []:
        if gpu.get("uuid"):
            uuids.append(gpu["uuid"])
        for device in ((gpu.get("mig") or {}).get("devices") or []):
            if device.get("uuid"):
                uuids.append(device["uuid"])
    return uuids


def image_cuda_version(image):
    """The CUDA version an image's tag names ('12.2'), or '' when the tag names none."""
    if not isinstance(image, str) or not image:
        raise AnsibleFilterError("image_cuda_version expects an image reference, got %r" % (image,))
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    if ":" not in last:
        return ""
    repository, tag = last.split(":", 1)
    if repository == "cuda":
        match = _CUDA_TAG_LEADING_RE.match(tag)
        if match:
            return match.group("version")
    match = _CUDA_TAG_NAMED_RE.search(tag)
    return match.group("version") if match else ""


def cuda_requirement(requirement, variable="the CUDA requirement"):
    """'12.4', 'cuda>=12.4' or a whole NVIDIA_REQUIRE_CUDA value -> '12.4' ('' for none).

    NVIDIA_REQUIRE_CUDA reads like ``cuda>=12.4 brand=tesla,driver>=470,driver<471 ...``:
    its ``cuda>=`` clause is what the driver must support; the brand clauses
    are exceptions for forward-compatibility packages and are not relied on here.
    """
    if requirement is None:
        return ""
    text = str(requirement).strip()
    if not text:
        return ""
    if _version_tuple(text):
        major, minor = _version_tuple(text)
        return "%d.%d" % (major, minor)
    match = _CUDA_CLAUSE_RE.search(text)
    if not match:
        raise AnsibleFilterError(
            "%s is %r, neither a version such as 12.4 nor an NVIDIA_REQUIRE_CUDA value "
            "with a cuda>= clause" % (variable, requirement))
    return match.group("version")


def stage_cuda_requirement(stage):
    """A smoke-test stage {image, require_cuda, require_variable} -> the CUDA version it needs ('' for unknown).

    ``require_cuda: auto`` reads the version from the image's tag.
    """
    stage = stage or {}
    requirement = stage.get("require_cuda")
    if requirement == "auto":
        return image_cuda_version(stage.get("image"))
    return cuda_requirement(requirement, stage.get("require_variable") or "the CUDA requirement")


def cuda_shortfalls(nodes, requirement, image="the image", skip_unhealthy=False, skip_untestable=False):
    """Nodes whose driver supports an older CUDA than the requirement.

    ``nodes`` maps a node name to its ``ansible_facts['nvidia']``. Returns one
    sentence per node that cannot run the image, naming both versions; a node
    whose CUDA version is unknown is named with its NVIDIA state. With
    ``skip_unhealthy``, the nodes smoke_plan leaves untested as unhealthy are
    not looked at: no pod goes there. With ``skip_untestable``, neither are the
    nodes whose facts smoke_plan names as failed and not tested (not ``ok``).
    """
    required = cuda_requirement(requirement)
    if not required:
        return []
    wanted = _version_tuple(required)
    problems = []
    for name in sorted(nodes or {}):
        facts = nodes[name] or {}
        unhealthy = unhealthy_untested(facts)
        if boolean(skip_unhealthy, strict=False) and unhealthy:
            continue
        if boolean(skip_untestable, strict=False) and facts.get("state") not in (
                TESTABLE_STATES if unhealthy else ("ok",)):
            continue
        have = facts.get("cuda_driver_version")
        have_tuple = _version_tuple(have) if have else None
        if have_tuple is None:
            problems.append("%s: %s needs CUDA %s, the node's CUDA version is unknown (NVIDIA state %s: %s)" % (
                name, image, required, facts.get("state") or "not gathered", facts.get("message") or "no facts"))
        elif have_tuple < wanted:
            problems.append("%s: %s needs CUDA %s, driver %s supports CUDA %s" % (
                name, image, required, facts.get("driver_version") or "of unknown version", have))
    return problems


def _container_state(pod):
    statuses = ((pod.get("status") or {}).get("containerStatuses")) or []
    if not statuses:
        return {}
    return statuses[0].get("state") or {}


def _describe_state(state):
    for kind in ("terminated", "waiting", "running"):
        if kind in state and state[kind] is not None:
            detail = state[kind] or {}
            words = [kind]
            if detail.get("reason"):
                words.append(detail["reason"])
            if "exitCode" in detail:
                words.append("exit code %s" % detail["exitCode"])
            if kind == "waiting" and detail.get("message"):
                words.append(detail["message"])
            return ", ".join(words)
    return "no container state"


def _pod_conditions(pod):
    words = []
    for condition in ((pod.get("status") or {}).get("conditions")) or []:
        if condition.get("status") != "True" and (condition.get("reason") or condition.get("message")):
            words.append("%s: %s" % (condition.get("type"), condition.get("message") or condition.get("reason")))
    return words


def plan_facts(facts):
    """What the plan keeps of a host's ``ansible_facts['nvidia']``: what smoke_verdict and the report read, as
    {state, driver_version, cuda_driver_version, uuids (every GPU and MIG device UUID), gpus (the report's
    'N x name' words)}. A node's whole facts run to about 10 kB; a thousand nodes' plan is carried through
    every task of the run, and each object in it costs Ansible time in each of them."""
    facts = facts or {}
    if not facts:
        return {}
    slim = dict((key, facts[key]) for key in ("state", "driver_version", "cuda_driver_version") if key in facts)
    slim["uuids"] = facts_uuids(facts)
    slim["gpus"] = _gpus_words(facts.get("gpus") or [])
    return slim


def _gpus_words(gpus):
    names = sorted(set(gpu.get("name") or "unknown" for gpu in gpus))
    return "%d x %s" % (len(gpus), ", ".join(names)) if gpus else "0"


def smoke_verdict(pod, facts, expected_devices=None, log=None, marker=None):
    """Judge one smoke-test pod.

    ``pod`` is the Pod object (or None when it is gone), ``facts`` the node's
    ``ansible_facts['nvidia']``; its output is the termination message, else
    ``log``. Without ``marker`` the output is ``nvidia-smi -L``: the pod
    passes when it Succeeded, saw at least one GPU, saw only UUIDs the node's
    facts list, and (when ``expected_devices`` is given) saw that many
    devices. With ``marker`` (a workload such as vectorAdd) it passes when it
    Succeeded and its output holds the marker.
    Returns {ok, phase, state, devices, unknown, output, reason}.
    """
    verdict = {"ok": False, "phase": None, "state": None, "devices": [], "unknown": [], "output": "", "reason": ""}
    if not pod:
        verdict["reason"] = "the pod is gone (deleted or never created)"
        return verdict
    status = pod.get("status") or {}
    state = _container_state(pod)
    verdict["phase"] = status.get("phase") or "Unknown"
    verdict["state"] = _describe_state(state)
    terminated = state.get("terminated") or {}
    message = terminated.get("message") or ""
    # The kubelet keeps the last 4096 bytes of a termination message: a long
    # one (many MIG devices) is read from the log when there is one.
    output = (log if log and len(message) >= TERMINATION_MESSAGE_KEPT else message or log) or ""
    verdict["output"] = output
    if verdict["phase"] == "Failed":
        verdict["reason"] = "the pod failed (%s)%s" % (
            verdict["state"], ": " + output.strip() if output.strip() else "")
        if status.get("reason") or status.get("message"):
            verdict["reason"] += "; %s" % (status.get("message") or status.get("reason"))
        return verdict
    if verdict["phase"] != "Succeeded":
        words = ["the pod did not finish: phase %s, container %s" % (verdict["phase"], verdict["state"])]
        words.extend(_pod_conditions(pod))
        verdict["reason"] = "; ".join(words)
        return verdict
    if marker:
        verdict["ok"] = marker in output
        verdict["reason"] = ("printed %r" % marker) if verdict["ok"] else (
            "the pod succeeded but did not print %r: %r" % (marker, output.strip()[-300:]))
        return verdict
    devices = smi_list_devices(output)
    verdict["devices"] = devices
    known = set(facts_uuids(facts))
    verdict["unknown"] = [uuid for uuid in devices if uuid not in known]
    if not devices:
        verdict["reason"] = "the pod succeeded but nvidia-smi -L listed no GPU: %r" % output.strip()[:200]
    elif not known:
        verdict["reason"] = "the pod saw %s but the node's facts list no GPU UUID (NVIDIA state %s)" % (
            ", ".join(devices), (facts or {}).get("state") or "not gathered")
    elif verdict["unknown"]:
        verdict["reason"] = "the pod saw %s, which the node's facts do not list (facts: %s)" % (
            ", ".join(verdict["unknown"]), ", ".join(sorted(known)))
    elif expected_devices is not None and len(set(devices)) != int(expected_devices):
        verdict["reason"] = "the pod asked for %d device(s) and saw %d: %s" % (
            int(expected_devices), len(set(devices)), ", ".join(devices))
    else:
        verdict["ok"] = True
        verdict["reason"] = "saw %s" % ", ".join(devices)
    return verdict


def _node_ready(node):
    for condition in ((node.get("status") or {}).get("conditions")) or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True", condition.get("message") or condition.get("reason") or ""
    return False, "no Ready condition"


def _device_count(facts):
    count = 0
    for gpu in (facts or {}).get("gpus") or []:
        mig = gpu.get("mig") or {}
        if mig.get("current_mode") == "enabled" and mig.get("devices"):
            count += len(mig["devices"])
        else:
            count += 1
    return count


_QUANTITY_RE = re.compile(r"^(?P<number>\d+)(?P<suffix>k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_QUANTITY_SUFFIXES = {None: 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
                      "E": 10 ** 18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
                      "Ei": 2 ** 60}
# Pods shown in a "not tested" reason; the rest are counted.
BUSY_PODS_NAMED = 5


def _pod_name(pod):
    metadata = (pod or {}).get("metadata") or {}
    return "%s/%s" % (metadata.get("namespace"), metadata.get("name"))


def _container_request(container, resource, pod):
    """One container's request of an extended resource: its request, else its limit (the API
    server copies the limit into the request of an extended resource; both must then be equal)."""
    resources = (container or {}).get("resources") or {}
    value = (resources.get("requests") or {}).get(resource)
    if value is None:
        value = (resources.get("limits") or {}).get(resource)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _QUANTITY_RE.match(str(value).strip())
    if not match:
        raise AnsibleFilterError("pod %s asks for %s %r, which is not a whole number" % (
            _pod_name(pod), resource, value))
    return int(match.group("number")) * _QUANTITY_SUFFIXES[match.group("suffix")]


def pod_requests(pod, resource):
    """How much of ``resource`` a pod holds on its node, counted as the scheduler counts it.

    The containers run together, so their requests add up; init containers run
    one after another before them, so the largest counts; the pod holds the
    larger of the two. A sidecar (an init container with ``restartPolicy:
    Always``) keeps running beside the later init containers and the containers,
    so it is added to both (Kubernetes' resource helpers, PodRequests).
    """
    spec = (pod or {}).get("spec") or {}
    containers = sum(_container_request(c, resource, pod) for c in spec.get("containers") or [])
    sidecars = 0
    init_peak = 0
    for container in spec.get("initContainers") or []:
        request = _container_request(container, resource, pod)
        if container.get("restartPolicy") == "Always":
            sidecars += request
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, request + sidecars)
    return max(containers + sidecars, init_peak)


def _requests_by_node(pods, resource, own_labels=None):
    """Node name -> [(pod 'namespace/name', its request)] over the pods that hold resources: bound to a
    node, not finished (phase Succeeded or Failed), not one of this role's own (``own_labels``)."""
    by_node = {}
    for pod in pods or []:
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        if not node or ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        labels = ((pod.get("metadata") or {}).get("labels")) or {}
        if own_labels and all(labels.get(key) == value for key, value in own_labels.items()):
            continue
        request = pod_requests(pod, resource)
        if request > 0:
            by_node.setdefault(node, []).append((_pod_name(pod), request))
    return by_node


def _busy_reason(allocatable, requested, holders, resource):
    names = [holder[0] for holder in holders]
    shown = ", ".join(names[:BUSY_PODS_NAMED])
    if len(names) > BUSY_PODS_NAMED:
        shown += " and %d more" % (len(names) - BUSY_PODS_NAMED)
    extra = "" if requested == allocatable else ", %d requested" % requested
    return "not tested: all %d %s are requested by running pods (%s%s)" % (allocatable, resource, shown, extra)


# States in which the driver does not work at all: such a node cannot be tested, healthy or not,
# and fails the smoke test with its state as before.
NO_WORKING_DRIVER = ("no_gpu", "driver_not_installed", "driver_not_loaded", "driver_mismatch")
# A node the driver still answers on, with some GPUs lost: testable on those it still reads.
TESTABLE_STATES = ("ok", "gpu_lost")
# The driver name of NVIDIA's DRA driver for GPUs in ResourceSlices and allocation results.
DRA_DRIVER = "gpu.nvidia.com"


def unhealthy_untested(facts):
    """Whether smoke_plan leaves a node with these facts untested as unhealthy (when asked to skip them):
    its facts say health unhealthy and its driver works."""
    facts = facts or {}
    return node_health(facts)["status"] == "unhealthy" and facts.get("state") not in NO_WORKING_DRIVER


def unhealthy_reason(facts):
    """'not tested: unhealthy: gpu_lost 0000:3b:00.0, xid 0000:3b:00.0'."""
    return "not tested: unhealthy: %s" % (node_health(facts)["text"] or "no problem named")


_MIG_RESOURCE_RE = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb")


def _mig_resource_order(name):
    match = _MIG_RESOURCE_RE.match(name)
    return (int(match.group(1)), int(match.group(2)), name) if match else (99, 0, name)


def _cannot(entry, facts, problems, not_tested, why, words):
    """A node that cannot be tested: named with its reason as failed and not tested; the others are tested."""
    problems.append("%s: %s" % (entry.get("node") or entry.get("host"), words))
    not_tested.append({
        "host": entry.get("host"), "node": entry.get("node"), "facts": plan_facts(facts), "allocatable": None,
        "requested": None, "holders": [], "why": why, "failed": True, "reason": "not tested: " + words})


def _claimed_devices(claims, own_labels=None):
    """ResourceClaims -> {node (the driver's pool): [(namespace/name, devices allocated there)]} for the
    devices of NVIDIA's DRA driver (gpu.nvidia.com) allocated to them; a claim made for one of this role's
    own pods (it carries ``own_labels``, copied from the role's claim template) is left out: its pod is an
    earlier run's leftover, deleted before the new pods are made, and the claim goes with it."""
    by_node = {}
    for claim in claims or []:
        metadata = (claim or {}).get("metadata") or {}
        labels = metadata.get("labels") or {}
        if own_labels and all(labels.get(key) == value for key, value in own_labels.items()):
            continue
        results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
        counts = {}
        for result in results:
            # a claim with admin access (monitoring) takes no device from the others (resource.k8s.io/v1)
            if result.get("driver") == DRA_DRIVER and result.get("pool") and not result.get("adminAccess"):
                counts[result["pool"]] = counts.get(result["pool"], 0) + 1
        for node, count in counts.items():
            by_node.setdefault(node, []).append(("%s/%s" % (metadata.get("namespace"), metadata.get("name")), count))
    return by_node


def smoke_plan(fleet, nodes, resource, gpus="one", stages=("nvidia-smi",), pods=None, own_labels=None,
               skip_unhealthy=True, dra_label=None, claims=None):
    """Which pod goes where, which nodes are left alone because they are busy or unhealthy, and why a node
    cannot be tested.

    ``fleet``: [{host, node, facts}] (filter fleet_nodes); ``nodes``: Node
    objects from the API; ``pods``: Pod objects on those nodes, whose requests
    of ``resource`` are taken off the node's allocatable (pods labelled with
    ``own_labels`` are the role's own leftovers, deleted before its pods are
    created, and do not count). A node with nothing free gets no pod: it is
    not tested (``why`` busy), which is not a failure; nor is a host fleet_nodes
    excluded (outside ``--limit``, unreachable: ``why`` excluded). A node whose facts say
    health unhealthy (``ansible_facts['nvidia']['health']``) while its driver
    works is not tested either (``why`` unhealthy) with ``skip_unhealthy``;
    without, it is tested like any other, on the GPUs the driver still reads
    (``unhealthy`` true: its pods tolerate the health gating's taint). A node that cannot be tested
    (its facts not ``ok``, no Node of its name, not Ready, no GPU advertised) is not tested either,
    ``failed`` true, ``why`` driver, not_in_cluster, not_ready or no_gpus, and the others are: one
    such node among a thousand does not take the fleet's verdict away. A node whose label ``dra_label``
    is ``true`` is on the DRA path (gpu_dra_driver): its GPUs are not asked for as ``resource`` but
    through a ResourceClaimTemplate (``dra`` in its plan entry: template name, DeviceClass, CEL selector).
    Returns {"plan": [{host, node, facts, allocatable, requested, request,
    expected_devices, unhealthy, pods: {stage: pod name}}], "not_tested":
    [{host, node, facts, allocatable, requested, holders, why, reason[, failed]}],
    "problems": [sentences: the failed ones of not_tested]}; ``facts`` there are what the
    verdicts and the report read of the node's facts (plan_facts), not all of them.
    """
    by_name = dict((((node or {}).get("metadata") or {}).get("name"), node) for node in nodes or [])
    claimed = _claimed_devices(claims, own_labels)
    holders_by_resource = {}
    plan, not_tested, problems = [], [], []
    for entry in fleet or []:
        node_name, facts = entry.get("node"), entry.get("facts") or {}
        if entry.get("excluded"):
            # Outside --limit, or its facts could not be read in this run: named, never contacted.
            not_tested.append({
                "host": entry.get("host"), "node": node_name, "facts": {}, "allocatable": None,
                "requested": None, "holders": [], "why": "excluded", "reason": "not tested: %s" % entry["excluded"]})
            continue
        # A node whose MIG layout (gpu_mig) advertises MIG devices under their own names is asked for one of those.
        node_resource = entry.get("resource") or resource
        if node_resource not in holders_by_resource:
            holders_by_resource[node_resource] = _requests_by_node(pods, node_resource, own_labels)
        holders_by_node = holders_by_resource[node_resource]
        node = by_name.get(node_name)
        unhealthy = unhealthy_untested(facts)
        if unhealthy and boolean(skip_unhealthy, strict=False):
            not_tested.append({
                "host": entry.get("host"), "node": node_name, "facts": plan_facts(facts), "allocatable": None,
                "requested": None, "holders": [], "why": "unhealthy", "reason": unhealthy_reason(facts)})
            continue
        if facts.get("state") not in (TESTABLE_STATES if unhealthy else ("ok",)):
            _cannot(entry, facts, problems, not_tested, "driver", "NVIDIA state %s: %s" % (
                facts.get("state") or "not gathered", facts.get("message") or "no facts"))
            continue
        if node is None:
            # Deleted after its facts were read, or never joined under that name.
            _cannot(entry, facts, problems, not_tested, "not_in_cluster",
                    "not in the cluster (no Node named %s)" % node_name)
            continue
        ready, why = _node_ready(node)
        if not ready:
            _cannot(entry, facts, problems, not_tested, "not_ready", "node %s is not Ready (%s)" % (node_name, why))
            continue
        if dra_label and (((node.get("metadata") or {}).get("labels") or {}).get(dra_label)) == "true":
            dra = _dra_entry(entry, node_name, facts, stages, unhealthy)
            holders = claimed.get(node_name) or []
            taken = sum(count for _claim, count in holders)
            devices = _dra_device_count(facts)
            if holders and taken >= devices:
                # Every device the node publishes is allocated: the claim would wait, as a pod on a device
                # plugin node whose GPUs are all requested would.
                not_tested.append({
                    "host": entry.get("host"), "node": node_name, "facts": plan_facts(facts), "allocatable": devices,
                    "requested": taken, "holders": [claim for claim, _count in holders], "why": "busy",
                    "reason": "not tested: all %d %s devices are allocated to ResourceClaims (%s)" % (
                        devices, dra["dra"]["class"], _listed([claim for claim, _count in holders]))})
                continue
            plan.append(dra)
            continue
        advertised = ((node.get("status") or {}).get("allocatable") or {})
        if not entry.get("resource") and str(advertised.get(node_resource, "0")) in ("", "0"):
            # A node partitioned under the MIG strategy mixed advertises MIG devices only: ask for the
            # smallest of them it has.
            mig = sorted((name for name, value in advertised.items()
                          if name.startswith("nvidia.com/mig-") and str(value) not in ("", "0")),
                         key=_mig_resource_order)
            if mig and node_resource == "nvidia.com/gpu":
                node_resource = mig[0]
                if node_resource not in holders_by_resource:
                    holders_by_resource[node_resource] = _requests_by_node(pods, node_resource, own_labels)
                holders_by_node = holders_by_resource[node_resource]
        allocatable = str(advertised.get(node_resource, "0"))
        count = int(allocatable) if allocatable.isdigit() else 0
        if count < 1:
            _cannot(entry, facts, problems, not_tested, "no_gpus",
                    "node %s advertises no %s (allocatable %s); is the device plugin running there?" % (
                        node_name, node_resource, allocatable))
            continue
        holders = holders_by_node.get(node_name) or []
        requested = sum(holder[1] for holder in holders)
        free = count - requested
        if free < 1:
            not_tested.append({
                "host": entry.get("host"), "node": node_name, "facts": plan_facts(facts), "allocatable": count,
                "requested": requested, "holders": [holder[0] for holder in holders], "why": "busy",
                "reason": _busy_reason(count, requested, holders, node_resource)})
            continue
        request = 1 if gpus == "one" else free
        devices = _device_count(facts)
        plan.append({
            "host": entry.get("host"),
            "node": node_name,
            "facts": plan_facts(facts),
            "allocatable": count,
            "requested": requested,
            "request": request,
            "resource": node_resource,
            # Time-sliced replicas of one GPU show the same UUID: count only one device, or
            # several when every advertised device is a device of its own.
            "expected_devices": request if request == 1 or (request <= devices and count <= devices) else None,
            "unhealthy": unhealthy,
            "pods": dict((stage, ("gpufleet-smoke-%s-%s" % (stage, node_name))[:253].rstrip("-."))
                         for stage in stages),
        })
    return {"plan": plan, "not_tested": not_tested, "problems": problems}


def _listed(names, shown=3):
    return ", ".join(names[:shown]) + (", ... %d in all" % len(names) if len(names) > shown else "")


def _dra_device_count(facts):
    """The devices NVIDIA's DRA driver publishes for a node: each GPU in MIG mode as its MIG devices,
    each other GPU whole (its kubelet plugin at v0.4.1 and v0.5.0 publishes a GPU whole only when MIG is off)."""
    count = 0
    for gpu in (facts or {}).get("gpus") or []:
        if gpu.get("error"):
            continue
        mig = gpu.get("mig") or {}
        count += len(mig.get("devices") or []) if mig.get("current_mode") == "enabled" else 1
    return count


def _dra_entry(entry, node_name, facts, stages, unhealthy):
    """The plan of a node on the DRA path: its pod asks for one device through a ResourceClaimTemplate of
    its own, of the class of its GPUs (``mig.nvidia.com`` when they run in MIG mode, else ``gpu.nvidia.com``),
    whose CEL selector pins the node's GPU model."""
    gpus = [gpu for gpu in facts.get("gpus") or [] if not gpu.get("error")]
    mig = any(((gpu.get("mig") or {}).get("current_mode")) == "enabled" for gpu in gpus)
    product = (gpus[0].get("name") if gpus else None) or ""
    selector = "device.attributes['gpu.nvidia.com'].productName == %s" % _cel_string(product)
    return {
        "host": entry.get("host"), "node": node_name, "facts": plan_facts(facts), "allocatable": None,
        "requested": None, "request": 1, "resource": None, "expected_devices": 1, "unhealthy": unhealthy,
        "pods": dict((stage, ("gpufleet-smoke-%s-%s" % (stage, node_name))[:253].rstrip("-.")) for stage in stages),
        "dra": {"template": ("gpufleet-smoke-%s" % node_name)[:253].rstrip("-."),
                "class": "mig.nvidia.com" if mig else "gpu.nvidia.com", "selector": selector},
    }


def _cel_string(text):
    """A CEL string literal of text."""
    return "'%s'" % str(text).replace("\\", "\\\\").replace("'", "\\'")


def event_words(events, limit=5):
    """Events of one object, newest last, as 'Reason: message' (at most ``limit``)."""
    def when(event):
        return str(event.get("lastTimestamp") or event.get("eventTime") or
                   (event.get("metadata") or {}).get("creationTimestamp") or "")
    ordered = sorted(events or [], key=when)
    return ["%s: %s" % (event.get("reason"), (event.get("message") or "").strip()) for event in ordered][-limit:]


def _tail(text, lines=10):
    return "\n".join((text or "").strip().splitlines()[-lines:])


_PULL_FAILURES = PULL_FAILURES + NEVER_STARTS


def start_failure_reason(node, words):
    """A verdict's reason for a pod its kubelet could not start (module pods_wait's not_started words):
    the kubelet's words, and what to do for the two causes a GPU node meets first."""
    reason = "the pod could not start on node %s: %s" % (node, words)
    name = missing_handler(words)
    if name:
        reason += ("; the node's container runtime has no handler %r, which the pod's RuntimeClass names: NVIDIA's "
                   "runtime is not registered there (gpu_container_toolkit has not run on the node, failed there, or "
                   "its drop-in was removed since); run site.yml's node part on it" % name)
    elif words.split(":", 1)[0] in _PULL_FAILURES:
        reason += ("; the node cannot pull the smoke image: give gpu_smoke_test_image an image its registry serves "
                   "to the nodes (or a mirror), and gpu_smoke_test_image_pull_secrets when it needs credentials")
    return reason


def smoke_stage_verdicts(plan, pods, logs=None, events=None, stage="nvidia-smi", marker=None, nodes_not_ready=None,
                         not_started=None):
    """One stage's verdict per planned node.

    ``plan``: the stage's entries (filter smoke_plan); ``pods``: the Pod
    objects read back; ``logs`` / ``events``: pod name -> log text / Event
    objects, read for the pods that need them; ``nodes_not_ready``: node name
    -> its Ready condition in words, for the nodes that stopped being Ready
    while their pod had not finished; ``not_started``: pod name -> the
    kubelet's words, for the pods it could not start (both from module
    pods_wait). Returns [{host, node, pod, ok, reason, phase, state, devices,
    events, log_tail}].
    """
    by_name = dict((((pod or {}).get("metadata") or {}).get("name"), pod) for pod in pods or [])
    logs, events, nodes_not_ready, not_started = logs or {}, events or {}, nodes_not_ready or {}, not_started or {}
    rows = []
    for entry in plan or []:
        name = entry["pods"][stage]
        verdict = smoke_verdict(by_name.get(name), entry.get("facts"), entry.get("expected_devices"),
                                log=logs.get(name), marker=marker)
        if not verdict["ok"] and entry.get("node") in nodes_not_ready and verdict["phase"] not in ("Succeeded", "Failed"):
            verdict["reason"] = "node %s is not Ready: %s; %s" % (
                entry.get("node"), nodes_not_ready[entry["node"]], verdict["reason"])
        elif not verdict["ok"] and name in not_started and verdict["phase"] not in ("Succeeded", "Failed"):
            verdict["reason"] = "%s (%s)" % (start_failure_reason(entry.get("node"), not_started[name]), verdict["reason"])
        row = {"host": entry.get("host"), "node": entry.get("node"), "pod": name,
               "uid": ((by_name.get(name) or {}).get("metadata") or {}).get("uid"), "stage": stage,
               "ok": verdict["ok"], "reason": verdict["reason"], "phase": verdict["phase"],
               "state": verdict["state"], "devices": verdict["devices"],
               "events": event_words(events.get(name)), "log_tail": _tail(logs.get(name) or verdict["output"])}
        rows.append(row)
    return rows


def smoke_add_events(verdicts, events):
    """Add the events of failed pods to a stage's verdicts: ``events`` is a list of Event objects (one
    list of the namespace's), each given to the pod of its ``involvedObject.uid``, so that an earlier
    pod of the same name (an earlier run's) lends none; or pod name -> Event objects."""
    by_uid = None
    if isinstance(events, list):
        by_uid = {}
        for event in events:
            uid = ((event or {}).get("involvedObject") or {}).get("uid")
            if uid:
                by_uid.setdefault(uid, []).append(event)
    rows = []
    for verdict in verdicts or []:
        row = dict(verdict)
        if by_uid is not None:
            found = by_uid.get(row.get("uid")) if row.get("uid") else None
        else:
            found = (events or {}).get(row.get("pod"))
        if found:
            row["events"] = event_words(found)
        rows.append(row)
    return rows


def pods_needing_logs(pods, nodes_not_ready=None):
    """Names of the pods whose output is not in a termination message: failed, unfinished, or silent;
    not those that never were bound to a node (no log), nor those bound to a node that is not Ready
    (``nodes_not_ready``), whose kubelet cannot serve a log."""
    names = []
    for pod in pods or []:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node in (nodes_not_ready or {}):
            continue
        phase = (pod.get("status") or {}).get("phase")
        terminated = _container_state(pod).get("terminated") or {}
        message = terminated.get("message") or ""
        if phase != "Succeeded" or not message or len(message) >= TERMINATION_MESSAGE_KEPT:
            names.append((pod.get("metadata") or {}).get("name"))
    return names


def _row(entry):
    facts = entry.get("facts") or {}
    gpus = facts.get("gpus")
    return {"host": entry.get("host"), "node": entry.get("node"),
            "gpus": gpus if isinstance(gpus, str) else _gpus_words(gpus or []),
            "driver": facts.get("driver_version"), "cuda": facts.get("cuda_driver_version"),
            "allocatable": entry.get("allocatable"), "ok": None, "tested": True, "verdict": "not run", "detail": []}


def smoke_rows(plan, results, stages=("nvidia-smi",), not_tested=None, stopped=None):
    """Per node: GPUs, driver, CUDA, allocatable and the verdict over every stage that ran.

    ``results``: stage -> rows of smoke_stage_verdicts. A node a stage did
    not run on (it failed an earlier stage) keeps the earlier verdict. The
    nodes of ``not_tested`` (smoke_plan's) follow, with ``ok`` null (neither
    passed nor failed; false for a node that could not be tested, ``failed`` in the plan),
    ``tested`` false, ``why`` (busy, unhealthy, excluded, or driver, not_in_cluster, not_ready,
    no_gpus) and their reason as the verdict. With ``stopped`` (how far the run got, such as
    ``before its verdict``), a planned node that got no verdict because the run stopped (an API that
    refused every pod) is not tested, ``why`` stopped, so that no earlier verdict stands for it.
    """
    rows = []
    # Each stage's verdicts by node, the first of a node where there are several.
    by_node = {}
    for stage in stages:
        by_node[stage] = {}
        for verdict in (results or {}).get(stage) or []:
            by_node[stage].setdefault(verdict.get("node"), verdict)
    for entry in plan or []:
        row = _row(entry)
        for stage in stages:
            verdict = by_node[stage].get(entry.get("node"))
            if verdict is None:
                continue
            if not verdict["ok"]:
                row["ok"] = False
                row["verdict"] = "FAILED %s" % stage
                detail = "%s: %s" % (stage, verdict["reason"])
                if verdict.get("events"):
                    detail += "; events: %s" % " | ".join(verdict["events"])
                if verdict.get("log_tail") and verdict["log_tail"] not in verdict["reason"]:
                    detail += "; log: %s" % verdict["log_tail"].replace("\n", " / ")
                row["detail"].append(detail)
                break
            row["ok"] = True
            row["verdict"] = "passed " + ", ".join(s for s in stages if s in (results or {}))
            row["detail"].append("%s: %s" % (stage, verdict["reason"]))
        if stopped and row["ok"] is None:
            row["tested"] = False
            row["why"] = "stopped"
            row["verdict"] = "not tested: the smoke test stopped %s" % stopped
            row["detail"].append(row["verdict"])
        rows.append(row)
    for entry in not_tested or []:
        row = _row(entry)
        row["tested"] = False
        if entry.get("failed"):
            row["ok"] = False
        row["why"] = entry.get("why") or "busy"
        row["verdict"] = entry.get("reason") or "not tested"
        row["detail"].append(row["verdict"])
        rows.append(row)
    return rows


def smoke_summary(rows):
    """Rows of {node, gpus, driver, cuda, allocatable, verdict} -> aligned text lines, and a last line
    that counts and names the nodes not tested (``tested`` false), when there are any."""
    header = ("NODE", "GPUS", "DRIVER", "CUDA", "ALLOCATABLE", "VERDICT")
    table = [header]
    for row in rows or []:
        table.append(tuple(str(row.get(key) if row.get(key) not in (None, "") else "-")
                           for key in ("node", "gpus", "driver", "cuda", "allocatable", "verdict")))
    widths = [max(len(line[column]) for line in table) for column in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths)) + "  " + line[-1]
             for line in table]
    skipped = [row for row in rows or [] if row.get("tested") is False]
    if skipped:
        lines.append("%d of %d GPU nodes not tested: %s" % (len(skipped), len(rows), "; ".join(
            "%s (%s)" % (row.get("node"), re.sub(r"^not tested: ", "", row.get("verdict") or "")) for row in skipped)))
    return lines


class FilterModule(object):
    """GPU smoke-test filters."""

    def filters(self):
        return {
            "cuda_shortfalls": cuda_shortfalls,
            "stage_cuda_requirement": stage_cuda_requirement,
            "smoke_plan": smoke_plan,
            "smoke_stage_verdicts": smoke_stage_verdicts,
            "smoke_rows": smoke_rows,
            "smoke_add_events": smoke_add_events,
            "pods_needing_logs": pods_needing_logs,
            "smoke_summary": smoke_summary,
        }
