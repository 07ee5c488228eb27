# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind the device plugin role: its config, and what each node should advertise.

The config is NVIDIA's k8s-device-plugin ``version: v1`` file
(api/config/v1 in NVIDIA/k8s-device-plugin). What a node advertises follows
the plugin's resource manager (internal/rm): with MIG strategy ``none`` every
GPU is one ``nvidia.com/gpu``; ``single`` advertises the MIG devices as
``nvidia.com/gpu`` when every GPU is in MIG mode; ``mixed`` advertises each
MIG profile as ``nvidia.com/mig-<profile>`` and the GPUs without MIG as
``nvidia.com/gpu``. Time-slicing lists each device ``replicas`` times, under
``<name>.shared`` when renameByDefault is set.
"""

from __future__ import annotations

import json
import os
import re

from ansible.errors import AnsibleFilterError
from ansible.inventory.manager import split_host_pattern
from ansible_collections.gpufleet.nvidia.plugins.module_utils.dotted import keep_paths
from ansible_collections.gpufleet.nvidia.plugins.plugin_utils.facts_of_run import RUN_MARKER_RE, has_run_marker

GPU_RESOURCE = "nvidia.com/gpu"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
# The plugin lists only MIG profiles whose compute instance spans the whole
# GPU instance (C == G): "1g.10gb", "3g.40gb", "1g.10gb+me"; not "1c.3g.40gb".
_CONFIG_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_MIG_PROFILE_RE = re.compile(r"^\d+g\.\d+gb(\+[a-z]+)*$")

SETTING_KEYS = {
    "mig_strategy": str,
    "fail_on_init_error": bool,
    "device_list_strategy": list,
    "device_id_strategy": str,
    "time_slicing_replicas": int,
    "time_slicing_rename": bool,
    "time_slicing_resources": list,
    "fail_requests_greater_than_one": bool,
}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _coerce(settings):
    """Settings given as strings (``-e name=4``, ``-e name=false``) as the numbers and booleans they spell."""
    if not isinstance(settings, dict):
        return settings
    coerced = dict(settings)
    value = coerced.get("time_slicing_replicas")
    if isinstance(value, str) and value.strip().isdigit():
        coerced["time_slicing_replicas"] = int(value.strip())
    for key in ("fail_on_init_error", "time_slicing_rename", "fail_requests_greater_than_one"):
        value = coerced.get(key)
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            coerced[key] = value.strip().lower() in _TRUE
    return coerced


def device_plugin_settings_errors(settings, where="gpu_device_plugin"):
    """Every problem with one set of settings, as sentences naming the variable and value."""
    errors = []
    if not isinstance(settings, dict):
        return ["%s must be a dict of settings, got %r" % (where, settings)]
    settings = _coerce(settings)
    for key in sorted(settings):
        if key not in SETTING_KEYS:
            errors.append("%s: unknown setting %r (known: %s)" % (where, key, ", ".join(sorted(SETTING_KEYS))))
    value = settings.get("mig_strategy", "none")
    if value not in MIG_STRATEGIES:
        errors.append("%s.mig_strategy is %r; use one of %s" % (where, value, ", ".join(MIG_STRATEGIES)))
    strategies = settings.get("device_list_strategy", ["envvar"])
    if isinstance(strategies, str):
        strategies = [strategies]
    if not isinstance(strategies, list) or not strategies:
        errors.append("%s.device_list_strategy is %r; give a non-empty list" % (where, strategies))
    else:
        bad = [s for s in strategies if s not in DEVICE_LIST_STRATEGIES]
        if bad:
            errors.append("%s.device_list_strategy has %s; use %s" % (
                where, ", ".join(repr(s) for s in bad), ", ".join(DEVICE_LIST_STRATEGIES)))
    value = settings.get("device_id_strategy", "uuid")
    if value not in DEVICE_ID_STRATEGIES:
        errors.append("%s.device_id_strategy is %r; use uuid or index" % (where, value))
    replicas = settings.get("time_slicing_replicas", 1)
    if not _is_int(replicas) or replicas < 1:
        errors.append("%s.time_slicing_replicas is %r; give a whole number, 1 (no sharing) or more" % (
            where, replicas))
    for key in ("fail_on_init_error", "time_slicing_rename", "fail_requests_greater_than_one"):
        if key in settings and not isinstance(settings[key], bool):
            errors.append("%s.%s is %r; give true or false" % (where, key, settings[key]))
    resources = settings.get("time_slicing_resources", [GPU_RESOURCE])
    if not isinstance(resources, list) or not resources or not all(
            isinstance(r, str) and (r == GPU_RESOURCE or r.startswith("nvidia.com/mig-")) for r in resources):
        errors.append("%s.time_slicing_resources is %r; give nvidia.com/gpu and/or nvidia.com/mig-<profile> names" % (
            where, resources))
    return errors


def _normalise(settings):
    errors = device_plugin_settings_errors(settings)
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    settings = _coerce(settings)
    strategies = settings.get("device_list_strategy", ["envvar"])
    return {
        "mig_strategy": settings.get("mig_strategy", "none"),
        "fail_on_init_error": settings.get("fail_on_init_error", True),
        "device_list_strategy": [strategies] if isinstance(strategies, str) else list(strategies),
        "device_id_strategy": settings.get("device_id_strategy", "uuid"),
        "time_slicing_replicas": settings.get("time_slicing_replicas", 1),
        "time_slicing_rename": settings.get("time_slicing_rename", False),
        "time_slicing_resources": list(settings.get("time_slicing_resources", [GPU_RESOURCE])),
        "fail_requests_greater_than_one": settings.get("fail_requests_greater_than_one", False),
    }


RUNTIME_ENVVAR_CHOICES = ("accept", "ignore")


def _runtime_problem(settings, runtime, where):
    """Whether a config's device list strategy contradicts how the nodes' NVIDIA runtime treats
    NVIDIA_VISIBLE_DEVICES from unprivileged containers (``runtime``: accept or ignore).

    The runtime (its legacy hook, and its CDI mode) takes the devices an
    unprivileged container gets from that variable only while
    ``accept-nvidia-visible-devices-envvar-when-unprivileged`` is true, NVIDIA's
    default. The plugin sets the variable with envvar and volume-mounts (over the
    image's own value); with the CDI strategies alone it does not, so an image's
    NVIDIA_VISIBLE_DEVICES=all reaches the runtime.
    """
    strategies = settings.get("device_list_strategy")
    if strategies is None or device_plugin_settings_errors({"device_list_strategy": strategies}, where):
        return None
    strategies = [strategies] if isinstance(strategies, str) else list(strategies)
    cdi = [s for s in strategies if s.startswith("cdi-")]
    sets_envvar = "envvar" in strategies or "volume-mounts" in strategies
    if runtime == "accept" and cdi and not sets_envvar:
        return ("%s is %r while gpu_device_plugin_runtime_visible_devices_envvar is accept: the plugin passes devices "
                "through CDI only, and the NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES from unprivileged "
                "containers, so an image that sets NVIDIA_VISIBLE_DEVICES=all sees every GPU of its node. Set "
                "gpu_container_toolkit_visible_devices_envvar: ignore on the GPU nodes and "
                "gpu_device_plugin_runtime_visible_devices_envvar: ignore here, or add envvar to the strategies"
                % (where, strategies))
    if runtime == "ignore" and not cdi and "volume-mounts" not in strategies:
        return ("%s is %r while gpu_device_plugin_runtime_visible_devices_envvar is ignore: the NVIDIA runtime ignores "
                "the NVIDIA_VISIBLE_DEVICES the plugin passes to unprivileged containers, so GPU pods get no GPU. Use "
                "cdi-cri or cdi-annotations (with gpu_container_toolkit_cdi), or leave "
                "gpu_container_toolkit_visible_devices_envvar and gpu_device_plugin_runtime_visible_devices_envvar at "
                "accept" % (where, strategies))
    return None


def device_plugin_configs_errors(settings, node_configs=None, runtime_visible_devices_envvar=None):
    """Every problem with the role's settings and its per-node configs, each naming its variable.

    With ``runtime_visible_devices_envvar`` (accept or ignore: whether the nodes'
    NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES from unprivileged containers),
    a device list strategy that contradicts it is a problem too.
    """
    if not isinstance(node_configs or {}, dict):
        return ["gpu_device_plugin_node_configs must be a dict of name: settings, got %r" % (node_configs,)]
    runtime = runtime_visible_devices_envvar
    errors = device_plugin_settings_errors(settings or {}, "gpu_device_plugin")
    if runtime is not None and runtime not in RUNTIME_ENVVAR_CHOICES:
        errors.append("gpu_device_plugin_runtime_visible_devices_envvar is %r; use accept or ignore" % (runtime,))
        runtime = None
    checked = [("gpu_device_plugin_device_list_strategy", dict({"device_list_strategy": ["envvar"]}, **(settings or {})))]
    for name in sorted(node_configs or {}, key=str):
        where = "gpu_device_plugin_node_configs[%r]" % (name,)
        if name == "default" or not isinstance(name, str) or not _CONFIG_NAME_RE.match(name):
            errors.append("%s: the name must be a label value (letters, digits, '-', '_', '.', at most 63) "
                          "other than 'default'" % where)
            continue
        # The override alone: keys it leaves out take valid defaults, so
        # only its own settings are reported under its name.
        errors.extend(device_plugin_settings_errors(node_configs[name], where))
        if isinstance(node_configs[name], dict) and "device_list_strategy" in node_configs[name]:
            checked.append((where + ".device_list_strategy", node_configs[name]))
    if runtime is not None:
        errors.extend(problem for problem in (_runtime_problem(config, runtime, where) for where, config in checked)
                      if problem)
    return errors


def device_plugin_configs(settings, node_configs=None):
    """The role's settings plus per-node overrides -> {"default": settings, name: settings}."""
    errors = device_plugin_configs_errors(settings, node_configs)
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    configs = {"default": dict(settings or {})}
    for name, override in (node_configs or {}).items():
        merged = dict(configs["default"])
        merged.update(override)
        configs[name] = merged
    return configs


def device_plugin_config(settings):
    """Role settings -> the plugin's ``version: v1`` config as a dict."""
    options = _normalise(settings)
    config = {
        "version": "v1",
        "flags": {
            "migStrategy": options["mig_strategy"],
            "failOnInitError": options["fail_on_init_error"],
            "plugin": {
                "deviceListStrategy": options["device_list_strategy"],
                "deviceIDStrategy": options["device_id_strategy"],
            },
        },
    }
    if options["time_slicing_replicas"] > 1:
        config["sharing"] = {
            "timeSlicing": {
                "renameByDefault": options["time_slicing_rename"],
                "failRequestsGreaterThanOne": options["fail_requests_greater_than_one"],
                "resources": [
                    {"name": name, "replicas": options["time_slicing_replicas"]}
                    for name in options["time_slicing_resources"]
                ],
            }
        }
    return config


def device_plugin_needs_sys_admin(configs, runtime_visible_devices_envvar="accept"):
    """Whether the plugin needs CAP_SYS_ADMIN: MIG (a strategy other than none) or volume-mounts in any
    config, as NVIDIA's chart grants it, or a runtime that ignores NVIDIA_VISIBLE_DEVICES from unprivileged
    containers (``ignore``): the plugin's own container asks for every GPU that way, and the runtime counts
    a container with CAP_SYS_ADMIN as privileged. Otherwise the plugin runs with every capability dropped.
    """
    if runtime_visible_devices_envvar == "ignore":
        return True
    for settings in (configs or {}).values():
        options = _normalise(settings)
        if options["mig_strategy"] != "none" or "volume-mounts" in options["device_list_strategy"]:
            return True
    return False


def _mig_enabled(gpu):
    return ((gpu.get("mig") or {}).get("current_mode")) == "enabled"


def device_plugin_expected(facts, settings):
    """What a node with these facts advertises under these settings.

    Returns {"resources": {name: count}, "basis": words, "problem": sentence or None}.
    """
    options = _normalise(settings)
    facts = facts or {}
    # A node that lost GPUs advertises the ones its driver still reads.
    gpus = [gpu for gpu in facts.get("gpus") or [] if not gpu.get("error")]
    answer = {"resources": {}, "basis": "", "problem": None}
    if facts.get("state") not in ("ok", "gpu_lost"):
        answer["problem"] = "NVIDIA state %s: %s" % (facts.get("state") or "not gathered",
                                                     facts.get("message") or "no facts")
        return answer
    mig_gpus = [gpu for gpu in gpus if _mig_enabled(gpu)]
    whole = [gpu for gpu in gpus if not _mig_enabled(gpu)]
    devices = [device for gpu in mig_gpus for device in (gpu.get("mig") or {}).get("devices") or []]
    unnamed = [device for device in devices if not device.get("profile")]
    profiles = {}
    for device in devices:
        profile = device.get("profile") or ""
        if _MIG_PROFILE_RE.match(profile):
            name = "nvidia.com/mig-" + profile.replace("+", ".")
            profiles[name] = profiles.get(name, 0) + 1
    strategy = options["mig_strategy"]
    resources = {}
    if strategy == "none" or not mig_gpus:
        resources[GPU_RESOURCE] = len(gpus)
        basis = "%d GPU%s" % (len(gpus), "" if len(gpus) == 1 else "s")
    elif strategy == "single":
        if whole:
            answer["problem"] = ("MIG strategy single needs every GPU in MIG mode; %d of %d are not" % (
                len(whole), len(gpus)))
            return answer
        if len(profiles) > 1:
            answer["problem"] = "MIG strategy single needs one MIG profile; the node has %s" % ", ".join(
                sorted(profiles))
            return answer
        resources[GPU_RESOURCE] = len(devices)
        basis = "%d MIG devices" % len(devices)
    else:
        if unnamed:
            answer["problem"] = ("the facts do not name the profile of %d MIG device(s); gather them with "
                                 "pynvml or an nvidia-smi that lists MIG devices (-L)" % len(unnamed))
            return answer
        if whole:
            resources[GPU_RESOURCE] = len(whole)
        resources.update(profiles)
        basis = ", ".join("%d %s" % (count, name) for name, count in sorted(resources.items()))
    replicas = options["time_slicing_replicas"]
    if replicas > 1:
        shared = {}
        for name, count in resources.items():
            if name in options["time_slicing_resources"]:
                shared[name + ".shared" if options["time_slicing_rename"] else name] = count * replicas
            else:
                shared[name] = count
        resources = shared
        basis += ", time-slicing x%d" % replicas
    answer["resources"] = resources
    answer["basis"] = basis
    return answer


def _quantity(value):
    if value is None:
        return 0
    try:
        return int(str(value))
    except ValueError:
        raise AnsibleFilterError("allocatable quantity %r is not a whole number" % (value,))


def device_plugin_check(nodes, hosts, configs, default_config="default", dra_label=None):
    """Compare what each GPU node advertises with what its hardware should give.

    ``nodes``: Node objects from the API. ``hosts``: [{host, node, facts}] for
    the GPU hosts. ``configs``: config name -> settings; a node picks its
    config with the label nvidia.com/device-plugin.config, else
    ``default_config``. A node whose label ``dra_label`` is ``true`` is on
    the DRA path (gpu_dra_driver): the plugin does not run there, and the
    row is ``excluded``. Returns one row per host:
    {host, node, config, expected, advertised, basis, ok, message}.
    """
    by_name = {}
    for node in nodes or []:
        name = ((node or {}).get("metadata") or {}).get("name")
        if name:
            by_name[name] = node
    rows = []
    for entry in hosts or []:
        row = {"host": entry.get("host"), "node": entry.get("node"), "config": None, "expected": {},
               "advertised": {}, "basis": "", "ok": False, "unhealthy": False, "message": ""}
        rows.append(row)
        if entry.get("excluded"):
            row["excluded"] = entry["excluded"]
            row["message"] = "not checked: %s" % entry["excluded"]
            continue
        node = by_name.get(entry.get("node"))
        if node is None:
            # Deleted after the facts were read, or joined under another name: waiting will not bring it.
            row["missing"] = True
            row["message"] = ("not in the cluster (no Node named %s; if host %s joined under another name, set "
                              "gpufleet_node_name)" % (entry.get("node"), entry.get("host")))
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        if dra_label and labels.get(dra_label) == "true":
            row["excluded"] = "on the DRA path (%s=true)" % dra_label
            row["message"] = "not checked: %s, its GPUs are the DRA driver's" % row["excluded"]
            continue
        # With one config the plugin runs without the config manager and ignores the label.
        name = (labels.get(CONFIG_LABEL) if len(configs or {}) > 1 else None) or default_config
        row["config"] = name
        if name not in (configs or {}):
            row["message"] = "the node's label %s=%s names no config (known: %s)" % (
                CONFIG_LABEL, name, ", ".join(sorted(configs or {})))
            continue
        expected = device_plugin_expected(entry.get("facts"), configs[name])
        row["expected"] = expected["resources"]
        row["basis"] = expected["basis"]
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        row["advertised"] = dict((key, _quantity(value)) for key, value in allocatable.items()
                                 if key.startswith("nvidia.com/"))
        problems = _health_problems(entry.get("facts"))
        if expected["problem"]:
            row["message"] = "cannot say what it should advertise: %s" % expected["problem"]
            _name_unhealthy(row, problems)
            continue
        short = ["%s=%d, its hardware gives %d (%s)" % (resource, row["advertised"].get(resource, 0), count,
                                                        expected["basis"])
                 for resource, count in sorted(expected["resources"].items())
                 if row["advertised"].get(resource, 0) < count]
        if short:
            row["message"] = "advertises " + "; ".join(short)
            _name_unhealthy(row, problems)
            continue
        row["ok"] = True
        row["message"] = "advertises " + ", ".join(
            "%s=%d" % (resource, row["advertised"].get(resource, 0)) for resource in sorted(expected["resources"]))
    return rows


def device_plugin_check_failure(rows, waited):
    """The rows of device_plugin_check -> why the check fails, in words; empty when it does not.

    A node that advertises less than its hardware gives (or whose label names no config) was waited
    for ``waited`` seconds, and is said so. A host without a Node was not waited for (the role's wait
    leaves ``missing`` rows out: waiting does not bring a deleted Node back): it is named with what was
    seen, its Node not in the cluster, and no wait is claimed for it. Rows that are ``ok``,
    ``unhealthy`` (named in the report) or ``excluded`` are no failure."""
    rows = list(rows or [])
    failing = [row for row in rows if not (row.get("ok") or row.get("unhealthy") or row.get("excluded"))]
    short = [row for row in failing if not row.get("missing")]
    missing = [row for row in failing if row.get("missing")]
    parts = []
    if short:
        parts.append("%d of %d GPU nodes do not advertise their GPUs after %s s: %s" % (
            len(short), len(rows), waited, "; ".join("%s: %s" % (row.get("node"), row.get("message")) for row in short)))
    if missing:
        parts.append("%d of %d GPU hosts have no Node in the cluster as last read, so they were not waited for: %s" % (
            len(missing), len(rows), "; ".join("%s: %s" % (row.get("host"), row.get("message")) for row in missing)))
    return ". ".join(parts)


# Problems after which NVIDIA's plugin advertises fewer GPUs: a lost GPU, and the XIDs its health
# checker marks devices unhealthy on. A pending row remap or an unfinished fabric leaves every GPU
# advertised, so a shortfall there is still the plugin's fault.
_SHORTFALL_PROBLEMS = ("gpu_lost", "xid")


def _health_problems(facts):
    """Problem codes of a node that is unhealthy in a way that takes GPUs out of the plugin's count
    (None otherwise)."""
    health = (facts or {}).get("health") or {}
    if health.get("status") != "unhealthy":
        return None
    codes = []
    for problem in health.get("problems") or []:
        code = problem.get("code") or "unknown"
        if code not in codes:
            codes.append(code)
    if not any(code in _SHORTFALL_PROBLEMS for code in codes):
        return None
    return codes


def _name_unhealthy(row, problems):
    """A node the facts call unhealthy is named, not waited for: NVIDIA's plugin takes the GPUs it finds
    unhealthy (lost, fatal XIDs) out of what it advertises."""
    if problems is None:
        return
    row["unhealthy"] = True
    row["message"] = "unhealthy (%s), not checked: %s" % (", ".join(problems), row["message"])


def _gathered_by_host(gathered):
    """The results of a delegated nvml_facts loop, by host: (facts, why not)."""
    by_host = {}
    for result in gathered or []:
        if not isinstance(result, dict) or not result.get("item"):
            continue
        facts = (result.get("ansible_facts") or {}).get("nvidia")
        if result.get("unreachable"):
            why = "unreachable (%s)" % (str(result.get("msg") or "no answer").strip().splitlines() or ["no answer"])[0]
        elif result.get("skipped"):
            why = "its NVIDIA facts were not read"
        elif facts is None:
            why = "its NVIDIA facts could not be read (%s)" % (str(result.get("msg") or "no message").strip())
        else:
            why = None
        by_host[str(result["item"])] = (facts, why)
    return by_host


def _unreachable_in_run(variables):
    """The message of a read of this run (a registered run marker) that found the host unreachable, else None."""
    try:
        names = [name for name in variables.keys() if RUN_MARKER_RE.match(str(name))]
    except (AttributeError, TypeError):
        return None
    for name in names:
        result = variables.get(name)
        if isinstance(result, dict) and result.get("unreachable"):
            return str(result.get("msg") or "unreachable")[:300]
    return None


def fleet_nodes(hosts, hostvars, limit=None, gathered=None, keep=None):
    """Inventory hosts -> [{host, node, facts, resource, gather, excluded}]: the Kubernetes node name
    is the host's ``gpufleet_node_name`` (else its inventory name), facts its ``ansible_facts['nvidia']``
    (None when not gathered), resource the MIG resource gpu_mig set for it (``gpu_mig_resource``,
    None when its devices are advertised as nvidia.com/gpu).

    ``limit``: the hosts inside ``--limit`` (None: no limit). A host outside it is ``excluded``
    (the reason, a sentence) and must not be contacted. Facts are this run's when the host
    carries a run marker (a registered ``__gpufleet_nvml_run``, ``__gpu_<role>_nvml_run`` or
    ``__gpu_<role>_converged`` that holds them: one registered for an unreachable host, a failed read
    or a comparison that did not read them does not count);
    once any host of the list does, a host without one has only a fact cache's facts. A host
    inside the limit without facts of this run is to be read (``gather``) unless ``gathered``
    (the results of that read, a delegated nvml_facts loop) says how it went: read, or
    ``excluded`` as unreachable or unreadable. A host a read of this run found unreachable (its run
    marker registered with ``unreachable``, as site.yml's facts play registers it) is ``excluded``
    at once, not read again. ``keep``: dotted paths of the only facts kept
    (``gpus.uuid``: each GPU's UUID), for a role that carries a thousand hosts' facts from task to task.
    """
    rows = []
    hosts = list(hosts or [])
    inside = None if limit is None else set(str(host) for host in limit)
    # Each host's variables once: every hostvars[host] works them out again from the inventory and caches.
    variables_of = dict((host, hostvars[host]) for host in hosts if host in hostvars)
    marked = dict((host, has_run_marker(variables_of[host]) if host in variables_of else False) for host in hosts)
    any_marked = any(marked.values())
    results = _gathered_by_host(gathered)
    for host in hosts:
        variables = variables_of.get(host, {})
        facts = (variables.get("ansible_facts") or {}).get("nvidia")
        gather, excluded = False, None
        unreachable = _unreachable_in_run(variables)
        if inside is not None and host not in inside:
            facts, excluded = None, "outside --limit, not contacted"
        elif host in results:
            facts, excluded = results[host]
        elif unreachable:
            # This run's read of its facts found it unreachable: not tried again by every part.
            facts, excluded = None, "unreachable in this run: %s" % unreachable
        elif any_marked and not marked[host]:
            facts, gather = None, True
        elif facts is None:
            gather = True
        if keep is not None and isinstance(facts, dict):
            facts = keep_paths(facts, keep)
        rows.append({"host": host, "node": variables.get("gpufleet_node_name") or host, "facts": facts,
                     "resource": variables.get("gpu_mig_resource") or None, "gather": gather,
                     "excluded": excluded})
    return rows


def limit_pattern(limit):
    """``--limit`` as a host pattern the inventory_hostnames lookup resolves: its ``@file``
    parts (a file of host names, one per line, as ``--limit @retry-file``) replaced by the
    names they hold. None or empty: None (no limit)."""
    if limit is None or limit == "":
        return None
    parts = []
    # Split as ansible-core splits --limit: on commas, else on colons outside IPv6 addresses and ranges.
    for part in split_host_pattern(str(limit)):
        part = part.strip()
        if part.startswith("@"):
            try:
                with open(os.path.expanduser(part[1:])) as handle:
                    parts.extend(line.strip() for line in handle.read().split("\n") if line.strip())
            except OSError as error:
                raise AnsibleFilterError("limit_pattern: cannot read the --limit file %s: %s" % (part[1:], error))
        elif part:
            parts.append(part)
    return ",".join(parts)


# NVIDIA's k8s-device-plugin image holds four programs (deployments/container/Dockerfile):
# nvidia-device-plugin, its ENTRYPOINT, and gpu-feature-discovery, mps-control-daemon and
# config-manager, which NVIDIA's chart and the GPU Operator start with a command of their own.
# Only the first registers with the kubelet, through its device-plugins folder.
PLUGIN_PROGRAM = "nvidia-device-plugin"
PLUGIN_IMAGE_NAME = "k8s-device-plugin"
OTHER_PROGRAMS = ("gpu-feature-discovery", "mps-control-daemon", "config-manager")
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
_SHELLS = ("sh", "bash", "ash", "dash", "busybox")
_SCRIPT_WORD_RE = re.compile(r"[^\s;&|()`'\"]+")


def _program_names(container):
    """The programs a container runs, by base name: its command, the image's ENTRYPOINT without one,
    or the words of a ``sh -c`` script."""
    command = [str(part) for part in container.get("command") or []]
    if not command:
        # Without a command the image's ENTRYPOINT runs (args are its arguments).
        return [PLUGIN_PROGRAM] if PLUGIN_IMAGE_NAME in (container.get("image") or "") else []
    argv = command + [str(part) for part in container.get("args") or []]
    program = argv[0].rsplit("/", 1)[-1]
    if program in _SHELLS and "-c" in argv[1:]:
        script = " ".join(argv[argv.index("-c", 1) + 1:][:1])
        return [word.rsplit("/", 1)[-1] for word in _SCRIPT_WORD_RE.findall(script)]
    return [program]


def runs_device_plugin(container):
    """Whether a container runs NVIDIA's device plugin (not gpu-feature-discovery, the MPS
    control daemon or the config manager from the same image).

    Decided by what it runs; a wrapper the API does not show (the GPU Operator's
    ``sh -c /bin/entrypoint.sh`` from a ConfigMap) counts when it is NVIDIA's image
    and mounts the kubelet's device-plugins folder, where a device plugin registers.
    """
    programs = _program_names(container or {})
    if PLUGIN_PROGRAM in programs:
        return True
    if set(programs) & set(OTHER_PROGRAMS):
        return False
    mounts = [str(m.get("mountPath") or "").rstrip("/") for m in (container or {}).get("volumeMounts") or []]
    return PLUGIN_IMAGE_NAME in ((container or {}).get("image") or "") and KUBELET_DEVICE_PLUGINS in mounts


def device_plugin_others(daemonsets, method="manifests", namespace="nvidia-device-plugin"):
    """DaemonSets running an NVIDIA device plugin that this role does not manage, as 'namespace/name (image)'.

    Two plugins on a node fight over the kubelet socket ``nvidia-gpu.sock``.
    A DaemonSet counts when one of its containers runs the plugin
    (``runs_device_plugin``): gpu-feature-discovery and the MPS control daemon
    share the plugin's image but register nothing. The role's own DaemonSet is
    the one in ``namespace`` labelled ``app.kubernetes.io/managed-by:
    gpufleet.nvidia`` (manifests) or from the Helm release
    ``nvidia-device-plugin`` (helm); one left by the other method is named
    too, so a switch of method starts from a clean namespace.
    """
    others = []
    for daemonset in daemonsets or []:
        metadata = daemonset.get("metadata") or {}
        labels = metadata.get("labels") or {}
        pod_spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
        plugin_images = [c.get("image") or "" for c in (pod_spec.get("containers") or []) if runs_device_plugin(c)]
        if not plugin_images:
            continue
        ours = metadata.get("namespace") == namespace and (
            labels.get("app.kubernetes.io/managed-by") == "gpufleet.nvidia" if method == "manifests"
            else labels.get("app.kubernetes.io/instance") == "nvidia-device-plugin"
            and labels.get("app.kubernetes.io/managed-by") == "Helm")
        if not ours:
            others.append("%s/%s (%s)" % (metadata.get("namespace"), metadata.get("name"), plugin_images[0]))
    return others


def _without_empty(selector):
    return dict((key, value) for key, value in selector.items() if value not in (None, [], {}))


def daemonset_selector_changes(daemonsets, manifests):
    """Rendered DaemonSets whose spec.selector differs from the one of the DaemonSet of the same namespace
    and name already in the cluster, as sentences. Kubernetes refuses a change of a DaemonSet's selector
    (field is immutable, HTTP 422), so such a DaemonSet can only be deleted and created again."""
    existing = dict((((d.get("metadata") or {}).get("namespace"), (d.get("metadata") or {}).get("name")), d)
                    for d in daemonsets or [])
    changes = []
    for manifest in manifests or []:
        if manifest.get("kind") != "DaemonSet":
            continue
        metadata = manifest.get("metadata") or {}
        found = existing.get((metadata.get("namespace"), metadata.get("name")))
        if not found:
            continue
        # compared as the API compares it (apiequality.Semantic: an empty list or map is no value)
        have = _without_empty((found.get("spec") or {}).get("selector") or {})
        want = _without_empty((manifest.get("spec") or {}).get("selector") or {})
        if have != want:
            changes.append("DaemonSet %s/%s has spec.selector %s, the role's is %s" % (
                metadata.get("namespace"), metadata.get("name"), json.dumps(have, sort_keys=True),
                json.dumps(want, sort_keys=True)))
    return changes


def drain_leftovers(pods):
    """Pods still running on a drained node that a drain should have evicted, as 'namespace/name'.

    DaemonSet pods, static (mirror) pods and finished pods stay by design.
    """
    left = []
    for pod in pods or []:
        metadata = pod.get("metadata") or {}
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        if "kubernetes.io/config.mirror" in (metadata.get("annotations") or {}):
            continue
        if any(owner.get("kind") == "DaemonSet" for owner in metadata.get("ownerReferences") or []):
            continue
        left.append("%s/%s" % (metadata.get("namespace"), metadata.get("name")))
    return left


def daemonset_rolled_out(daemonset):
    """Whether a DaemonSet's latest generation is scheduled and available on every node it targets."""
    metadata = (daemonset or {}).get("metadata") or {}
    status = (daemonset or {}).get("status") or {}
    desired = status.get("desiredNumberScheduled", 0)
    return (status.get("observedGeneration", 0) >= metadata.get("generation", 1)
            and status.get("updatedNumberScheduled", 0) == desired
            and status.get("numberAvailable", 0) == desired
            and status.get("numberUnavailable", 0) == 0)


def daemonset_warnings(events, most=3):
    """A DaemonSet's Warning events as 'Reason (N times): message', the latest first, at most ``most`` distinct."""
    def when(event):
        return str(event.get("lastTimestamp") or event.get("eventTime") or "")
    lines = []
    for event in sorted(events or [], key=when, reverse=True):
        count = event.get("count") or 1
        # The event recorder's prefix when it folded similar events into one says nothing of the cause.
        message = " ".join(str(event.get("message") or "").split())
        message = message[len("(combined from similar events): "):] if message.startswith(
            "(combined from similar events): ") else message
        line = "%s%s: %s" % (event.get("reason") or "Warning", " (%s times)" % count if count > 1 else "", message)
        if line not in lines:
            lines.append(line)
    return lines[:most]


def daemonset_status_words(status):
    """A DaemonSet status in words: desired, updated, ready, available."""
    status = status or {}
    return "%d desired, %d updated, %d ready, %d available" % tuple(
        status.get(key, 0) for key in ("desiredNumberScheduled", "updatedNumberScheduled", "numberReady",
                                       "numberAvailable"))


def _last_lines(text, lines=3, width=300):
    """The end of a termination message (a log tail under FallbackToLogsOnError), on one line."""
    kept = [line.strip() for line in str(text).strip().splitlines() if line.strip()][-lines:]
    joined = " / ".join(kept)
    return joined if len(joined) <= width else "..." + joined[-width:]


def pods_not_ready(pods):
    """Pods that are not Ready, or whose container ended in failure before (crash-looping pods are Ready
    between two crashes), each as 'name on node: phase, container states, conditions'."""
    words = []
    for pod in pods or []:
        status = pod.get("status") or {}
        conditions = dict((c.get("type"), c) for c in status.get("conditions") or [])
        ready = (conditions.get("Ready") or {}).get("status") == "True"
        containers = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
        # A crash-looping container is Ready between two crashes: one that ended in failure counts too.
        crashed = any(((c.get("lastState") or {}).get("terminated") or {}).get("exitCode") not in (None, 0)
                      for c in containers)
        if ready and not crashed:
            continue
        # Ready between two crashes: what it is, not its momentary phase
        parts = ["CrashLoopBackOff (running again between two restarts)"] if ready else [status.get("phase") or "Unknown"]
        for container in containers:
            state = container.get("state") or {}
            for kind in ("waiting", "terminated"):
                detail = state.get(kind)
                if detail:
                    parts.append("%s %s %s%s" % (container.get("name"), kind, detail.get("reason") or "",
                                                 (": " + detail["message"]) if detail.get("message") else ""))
            # What ended the container's previous instance: why a crash-looping plugin crashes.
            last = (container.get("lastState") or {}).get("terminated")
            if last and not state.get("terminated"):
                parts.append("%s last exit code %s (%s%s restarts)%s" % (
                    container.get("name"), last.get("exitCode"),
                    (last["reason"] + ", ") if last.get("reason") else "", container.get("restartCount") or 0,
                    (": " + _last_lines(last["message"])) if last.get("message") else ""))
        scheduled = conditions.get("PodScheduled") or {}
        if scheduled.get("status") == "False":
            parts.append("unschedulable: %s" % (scheduled.get("message") or scheduled.get("reason")))
        words.append("%s on %s: %s" % ((pod.get("metadata") or {}).get("name"),
                                       (pod.get("spec") or {}).get("nodeName") or "no node", ", ".join(parts)))
    return words


class FilterModule(object):
    """Device plugin filters."""

    def filters(self):
        return {
            "device_plugin_configs_errors": device_plugin_configs_errors,
            "device_plugin_configs": device_plugin_configs,
            "device_plugin_config": device_plugin_config,
            "device_plugin_needs_sys_admin": device_plugin_needs_sys_admin,
            "device_plugin_check": device_plugin_check,
            "device_plugin_check_failure": device_plugin_check_failure,
            "limit_pattern": limit_pattern,
            "drain_leftovers": drain_leftovers,
            "device_plugin_others": device_plugin_others,
            "daemonset_selector_changes": daemonset_selector_changes,
            "daemonset_rolled_out": daemonset_rolled_out,
            "daemonset_status_words": daemonset_status_words,
            "daemonset_warnings": daemonset_warnings,
            "pods_not_ready": pods_not_ready,
        }
