"""STAND-IN for the GPU side of the kubelets of the test control plane's kwok Nodes.

kwok keeps the Nodes and their pods alive (leases, Ready, pods Running through its Stages), but a
kwok Node has no kubelet, no container runtime and no GPU: what the kubelet's device manager and
a container's programs do there is played by this process, through the real API:

- NVIDIA's device plugin (a pod whose container runs `nvidia-device-plugin`) registers with the
  node's kubelet once it runs: the Node then advertises what the plugin would, for the node's
  GPUs and the plugin's configuration (flags, environment, its config file from a ConfigMap, the
  config manager's per-node choice), and no more once the plugin is gone. A plugin that cannot
  start crash-loops (kwok Stage `gpufleet-pod-crash-loop`), with the error it prints.
- A container that runs a program to its end (`nvidia-smi -L`, the smoke test's script, CUDA's
  vectorAdd) prints what the real program prints for the devices the container sees (those its
  pod was granted, through the node's runtime: the `nvidia` handler, CDI, the image's
  NVIDIA_VISIBLE_DEVICES), and ends with that exit code and termination message (kwok Stage
  `gpufleet-pod-program-exit`); its log is served by kwok (`kubectl logs`).
- NVIDIA's DRA kubelet plugin (`gpu-kubelet-plugin`) publishes the node's ResourceSlice once it
  runs, with the driver's device names, attributes and capacities; the real scheduler allocates
  claims from it, and a container then sees the devices its pod's claims were given.
- Faults of the cluster file or `testcluster.py fault`: `gpu-lost node=N gpus=K` (the plugin
  reports K GPUs unhealthy), `plugin-crashloop node=N`, `node-not-ready node=N` (the node's
  Lease is no longer renewed and kwok leaves the Node and its pods as they are: kube-controller-
  manager's node lifecycle controller marks it Unknown after its grace period),
  `eviction-refused seconds=S [namespace=] [pod=]` (a PodDisruptionBudget that allows no
  disruption, so the real eviction API answers 429), `slow-pod-start delay=S` (programs end S
  seconds later), `api-errors count=C code=N [verb=] [path=]` (the fault proxy's rules),
  `server-version git=v1.33.4` (/version answered as by that release: the proxy rewrites it).

What a container prints and what the plugin advertises come from gpus.py and programs.py beside
this file (recorded captures, NVIDIA's documented plugin configuration).

    python gpunodes.py --cluster FILE --kubeconfig ADMIN --state DIR
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import pathlib
import queue
import sys
import threading
import time

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpus as gpu_model  # noqa: E402  pylint: disable=wrong-import-position
import programs  # noqa: E402  pylint: disable=wrong-import-position

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
EXIT_CODE = "gpufleet.test/exit-code"
MESSAGE = "gpufleet.test/termination-message"
CRASH_CODE = "gpufleet.test/crash-exit-code"
CRASH_MESSAGE = "gpufleet.test/crash-message"
RECOVERED = "gpufleet.test/recovered"
RUNTIME_DEFAULTS = {"defaultRuntime": "runc", "handlers": ["runc", "nvidia"], "cdi": False,
                    "acceptEnvvarUnprivileged": True, "acceptVolumeMounts": False}
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
EVICTION_PDB = "gpufleet-test-eviction-refused"
EVICTION_LABEL = "gpufleet.test/eviction-refused"
# Who holds the Lease of a node whose kubelet went silent (fault node-not-ready).
SILENCED = "gpufleet-test-silenced-kubelet"
# The cluster file's durations, in seconds (timing: {pluginRegister: 1.0}).
TIMING_DEFAULTS = {"pluginRegister": 1.0}
# `timing: real`: a device plugin's registration shows in the Node's allocatable at the kubelet's
# next node status update (every 10 s), about 6 s after it starts on average.
REAL_TIMING = {"pluginRegister": 6.0}


def control_plane_version():
    for line in (HERE / "versions.env").read_text().splitlines():
        if line.startswith("KUBERNETES_VERSION="):
            return line.split("=", 1)[1].strip()
    return ""


def node_object(entry, index, kubelet_version=""):
    """The Node of a cluster-file entry, managed by kwok (its annotation). Its kubelet claims the
    entry's kubeletVersion, else the file's kubernetesVersion, else the control plane's."""
    name = entry["name"]
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}
    labels.update(entry.get("labels") or {})
    capacity = {"cpu": "64", "memory": "527957648Ki", "pods": "110", "ephemeral-storage": "959786032Ki",
                "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    capacity.update({k: str(v) for k, v in (entry.get("capacity") or {}).items()})
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
            "spec": {"podCIDR": pod_cidr(index), "podCIDRs": [pod_cidr(index)]},
            "status": {"capacity": dict(capacity), "allocatable": dict(capacity),
                       "nodeInfo": {"kubeletVersion": entry.get("kubeletVersion") or kubelet_version,
                                    "kubeProxyVersion": "", "machineID": f"ab{index:030x}",  # not all digits: kwok writes it unquoted
                                    "systemUUID": f"{index:08x}-0000-0000-0000-000000000000",
                                    "bootID": f"{index:08x}-b007-0000-0000-000000000000",
                                    "containerRuntimeVersion": entry.get("containerRuntime", "containerd://1.7.24"),
                                    "operatingSystem": "linux", "architecture": "amd64",
                                    "osImage": entry.get("osImage", "Debian GNU/Linux 12 (bookworm)"),
                                    "kernelVersion": entry.get("kernelVersion", "6.1.0-28-amd64")}}}
    if entry.get("unschedulable"):
        node["spec"]["unschedulable"] = True
    if entry.get("taints"):
        node["spec"]["taints"] = copy.deepcopy(entry["taints"])
    return node


def pod_cidr(index):
    """A /24 of its own for each node, from 100.64.0.0/10 (16,384 of them)."""
    return f"100.{64 + index // 256}.{index % 256}.0/24"


def argv_env(container):
    env = {e["name"]: e.get("value", "") for e in container.get("env") or [] if "value" in e}
    return programs.argv_of(container), env


def mounts_host_path(pod, container, path):
    for mount in container.get("volumeMounts") or []:
        if mount["mountPath"].rstrip("/") != path:
            continue
        volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == mount["name"]), {})
        if (volume.get("hostPath") or {}).get("path", "").rstrip("/") == path:
            return True
    return False


def cri_log(text, stream="stdout"):
    """Lines in the CRI log format the kubelet's log reader (and kwok's) reads."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lines = text.splitlines() or [""]
    return "".join(f"{stamp} {stream} F {line}\n" for line in lines)


# ------------------------------------------------------------------- faults
# Faults are kept in STATE/gpu-faults.json (those of the proxy in STATE/faults.json); their effects
# on the API are made when they are added and undone when they end, by whoever adds or ends them.

def read_faults(state):
    try:
        return json.loads((pathlib.Path(state) / "gpu-faults.json").read_text() or "[]")
    except FileNotFoundError:
        return []


def write_faults(state, faults):
    path = pathlib.Path(state) / "gpu-faults.json"
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(faults, indent=1) + "\n")
    partial.replace(path)


def proxy_rules(state):
    path = pathlib.Path(state) / "faults.json"
    return json.loads(path.read_text() or "[]") if path.exists() else []


def write_proxy_rules(state, rules):
    path = pathlib.Path(state) / "faults.json"
    partial = path.with_name(f"faults.json.{os.getpid()}.partial")
    partial.write_text(json.dumps(rules, indent=1) + "\n")
    partial.replace(path)


def start_fault(api, state, fault):
    """Make a fault's effect: kept in the faults file, or a rule of the fault proxy."""
    kind = fault.get("type")
    if kind == "api-errors":
        rule = {"code": int(fault.get("code", 500)), "count": int(fault.get("count", 1))}
        for key in ("verb", "path", "retryAfter", "message", "delay"):
            if fault.get(key) is not None:
                rule[key] = fault[key]
        write_proxy_rules(state, proxy_rules(state) + [rule])
        return
    if kind == "server-version":
        # /version answered as by another release (the proxy rewrites the real answer)
        rule = {"version": str(fault["git"]), "path": "^/version/?$", "verb": "GET", "count": int(fault.get("count", 100000))}
        write_proxy_rules(state, proxy_rules(state) + [rule])
        return
    if kind == "node-not-ready":
        # The node's Lease is taken from kwok and never renewed: kwok stops managing the Node (a
        # Lease it does not hold makes the node read-only to it), and kube-controller-manager's
        # node lifecycle controller marks it Unknown after --node-monitor-grace-period, as with
        # a kubelet that stopped.
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        client.CoordinationV1Api(api).patch_namespaced_lease(fault["node"], "kube-node-lease", {"spec": {
            "holderIdentity": SILENCED, "leaseDurationSeconds": 86400, "renewTime": stamp}})
    elif kind == "eviction-refused":
        refuse_evictions(api, fault)
    elif kind not in ("gpu-lost", "plugin-crashloop", "slow-pod-start"):
        raise ValueError(f"unknown fault type {kind!r}: node-not-ready, gpu-lost, plugin-crashloop, "
                         "eviction-refused, api-errors, server-version, slow-pod-start")
    write_faults(state, read_faults(state) + [fault])


def selector_string(selector):
    """A LabelSelector as the API's labelSelector parameter writes it."""
    parts = [f"{key}={value}" for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif operator == "Exists":
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return ",".join(parts)


def refuse_evictions(api, fault):
    """Every eviction of the fault's pods refused with 429, as the eviction API refuses one that a
    PodDisruptionBudget allows no disruption for. A pod may be covered by one budget only (the API
    answers 500 for two): the budgets already covering the pods are set to allow no disruption
    (their specs kept in the fault, to be put back), and the pods no budget covers get the label
    gpufleet.test/eviction-refused and a budget of their own."""
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    namespace = fault.get("namespace")
    namespaces = [namespace] if namespace else [
        ns.metadata.name for ns in core.list_namespace().items if not ns.metadata.name.startswith("kube-")]
    saved = []
    for name in namespaces:
        pods = {p.metadata.name: p for p in core.list_namespaced_pod(name).items
                if p.status.phase in ("Pending", "Running") and (not fault.get("pod") or p.metadata.name == fault["pod"])}
        covered = set()
        for pdb in policy.list_namespaced_pod_disruption_budget(name).items:
            selector = api.sanitize_for_serialization(pdb.spec.selector) or {}
            matched = {p.metadata.name for p in core.list_namespaced_pod(name, label_selector=selector_string(selector)).items}
            if not matched & set(pods):
                continue
            covered |= matched
            saved.append({"namespace": name, "name": pdb.metadata.name,
                          "minAvailable": api.sanitize_for_serialization(pdb.spec.min_available),
                          "maxUnavailable": api.sanitize_for_serialization(pdb.spec.max_unavailable)})
            policy.patch_namespaced_pod_disruption_budget(pdb.metadata.name, name, {
                "spec": {"minAvailable": None, "maxUnavailable": 0}})
        uncovered = [pod for pod_name, pod in pods.items() if pod_name not in covered]
        for pod in uncovered:
            core.patch_namespaced_pod(pod.metadata.name, name, {"metadata": {"labels": {EVICTION_LABEL: "true"}}})
        if uncovered:
            body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": EVICTION_PDB, "labels": {"app.kubernetes.io/managed-by": "gpufleet-test"}},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {EVICTION_LABEL: "true"}}}}
            try:
                policy.create_namespaced_pod_disruption_budget(name, body)
            except ApiException as err:
                if err.status != 409:
                    raise
    fault["saved"] = saved


def allow_evictions(api, fault):
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    for item in fault.get("saved") or []:
        try:
            policy.patch_namespaced_pod_disruption_budget(item["name"], item["namespace"], {
                "spec": {"minAvailable": item["minAvailable"], "maxUnavailable": item["maxUnavailable"]}})
        except ApiException as err:
            if err.status != 404:
                raise
    for pdb in policy.list_pod_disruption_budget_for_all_namespaces(field_selector=f"metadata.name={EVICTION_PDB}").items:
        try:
            policy.delete_namespaced_pod_disruption_budget(EVICTION_PDB, pdb.metadata.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
    for pod in core.list_pod_for_all_namespaces(label_selector=EVICTION_LABEL).items:
        try:
            core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                      {"metadata": {"labels": {EVICTION_LABEL: None}}})
        except ApiException as err:
            if err.status != 404:
                raise


def end_fault(api, state, fault):
    """Undo a fault's effect (the faults file is the caller's)."""
    kind = fault.get("type")
    if kind == "node-not-ready":
        # the Lease expired long ago: kwok takes it again and the Node turns Ready
        client.CoordinationV1Api(api).patch_namespaced_lease(fault["node"], "kube-node-lease", {"spec": {
            "leaseDurationSeconds": 1, "renewTime": "2000-01-01T00:00:00.000000Z"}})
    elif kind == "eviction-refused":
        allow_evictions(api, fault)


def clear_faults(api, state):
    for fault in read_faults(state):
        end_fault(api, state, fault)
    write_faults(state, [])
    write_proxy_rules(state, [])


def active_faults(state):
    """The faults in force: the file's, and the proxy's rules not yet spent (as api-errors)."""
    rules = [dict(rule, type="server-version" if rule.get("version") else "api-errors")
             for rule in proxy_rules(state) if rule.get("hits", 0) < rule.get("count", 1)]
    return read_faults(state) + rules


class GpuNodes:  # pylint: disable=too-many-instance-attributes
    def __init__(self, description, base_dir, kubeconfig, state):
        self.api = config.new_client_from_config(kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.state = pathlib.Path(state)
        self.logs = self.state / "pod-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.timing = dict(TIMING_DEFAULTS)
        if description.get("timing") == "real":
            self.timing.update(REAL_TIMING)
        if isinstance(description.get("timing"), dict):
            self.timing.update({k: float(v) for k, v in description["timing"].items() if k in TIMING_DEFAULTS})
        self.entries = {e["name"]: e for e in description.get("nodes") or []}
        self.base_dir = base_dir
        self.gpus = {name: gpu_model.node_gpus(e.get("gpus"), name, base_dir) for name, e in self.entries.items()}
        self.runtime = {name: dict(RUNTIME_DEFAULTS, **(e.get("runtime") or {})) for name, e in self.entries.items()}
        self.pods = {}            # uid -> pod (raw, as last seen)
        self.done = set()         # uids whose programs this process ran
        self.granted = {}         # uid -> {resource: [device ids]}
        self.plugins = {}         # node -> {"uid", "since", "resources", "config", "registered"}
        self.events = queue.Queue()
        self.faults_file = self.state / "gpu-faults.json"
        self.faults_mtime = None
        self.faults = []
        self.fault_timers = []    # (deadline, fault)
        self.known_resources = {}  # node -> the device-plugin resources it advertised
        self.later = []           # (when, uid): programs that end later (slow-pod-start)
        self.dra = {}             # node -> {"uid", "devices", "index", "generation"}

    # ---------------------------------------------------------------- set-up
    def populate(self, description):
        """The cluster file's Nodes, namespaces and objects, written through the API."""
        version = description.get("kubernetesVersion")
        version = f"v{str(version).lstrip('v')}" if version else control_plane_version()
        for index, entry in enumerate(description.get("nodes") or []):
            # created with its status, as a kubelet registers its Node (kwok fills in only what is empty)
            self.core.create_node(node_object(entry, index, version))
        deleted = []
        for item in description.get("namespaces") or []:
            meta = {"name": item} if isinstance(item, str) else dict(item)
            if meta.pop("deleted", False):
                deleted.append(meta["name"])
            self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        dynamic = _dynamic(self.api)
        for obj in description.get("objects") or []:
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            namespace = obj.get("metadata", {}).get("namespace") or ("default" if resource.namespaced else None)
            resource.create(body=obj, namespace=namespace)
        for name in deleted:
            self.core.delete_namespace(name)
        for fault in description.get("faults") or []:
            start_fault(self.api, self.state, fault)

    # ---------------------------------------------------------------- faults
    def reload_faults(self):
        """Faults added or removed (testcluster.py fault / faults --clear made their effects on the
        API already): the GPU faults' nodes have their plugin read again."""
        try:
            mtime = self.faults_file.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = None
        if mtime == self.faults_mtime:
            return
        self.faults_mtime = mtime
        old, new = self.faults, read_faults(self.state)
        self.faults = new
        for fault in [f for f in old if f not in new] + [f for f in new if f not in old]:
            if fault.get("type") == "plugin-crashloop":
                self.recheck_node(fault.get("node"))
            elif fault.get("type") == "gpu-lost":
                # the plugin's health check marks the lost GPU unhealthy (or healthy again): the
                # kubelet keeps the capacity and lowers (or raises) the allocatable
                for name, plugin in self.plugins.items():
                    if fault.get("node") in (None, name) and plugin["registered"]:
                        plugin["registered"] = False
                        plugin["since"] = 0
            if fault in new and fault.get("seconds"):
                self.fault_timers.append((time.monotonic() + float(fault["seconds"]), fault))

    def active(self, kind, node=None):
        return next((f for f in self.faults if f.get("type") == kind and (node is None or f.get("node") == node)), None)

    def expire_faults(self):
        now = time.monotonic()
        for deadline, fault in list(self.fault_timers):
            if fault not in self.faults:  # cleared before its time: nothing left to undo
                self.fault_timers.remove((deadline, fault))
            elif now >= deadline:
                self.fault_timers.remove((deadline, fault))
                end_fault(self.api, self.state, fault)
                write_faults(self.state, [f for f in read_faults(self.state) if f != fault])

    def recheck_node(self, node):
        """A fault on a node's GPUs or plugin came or went: the node's device plugin is read again,
        as the kubelet sees a plugin that reports its devices again (or restarts)."""
        for uid, pod in list(self.pods.items()):
            if node not in (None, pod["spec"].get("nodeName")):
                continue
            container = (pod["spec"].get("containers") or [{}])[0]
            if programs.daemon_kind(programs.argv_of(container)) in ("device-plugin", "dra-gpu-plugin"):
                self.done.discard(uid)
                self.events.put(("MODIFIED", pod))
        for name in list(self.plugins):
            if node in (None, name):
                # the kubelet marks a disconnected plugin's devices unhealthy: allocatable 0 at once
                del self.plugins[name]
                self.write_node_resources(name)

    # ---------------------------------------------------------------- the GPUs
    def healthy(self, node):
        gpus = self.gpus.get(node, [])
        if (self.entries.get(node, {}).get("gpus") or {}).get("command"):
            gpus = self.gpus[node] = gpu_model.node_gpus(self.entries[node]["gpus"], node, self.base_dir)
        lost = self.active("gpu-lost", node)
        if lost:
            gpus = gpus[:max(0, len(gpus) - int(lost.get("gpus", 1)))]
        return gpus

    def read_file(self, pod, container, path):
        """A file of the container from a ConfigMap volume (or the config manager's emptyDir)."""
        for mount in container.get("volumeMounts") or []:
            root = mount["mountPath"].rstrip("/") + "/"
            if not path.startswith(root):
                continue
            volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == mount["name"]), {})
            key = mount.get("subPath") or path[len(root):]
            if "emptyDir" in volume:
                return self.config_manager_file(pod, mount["name"], key)
            source = volume.get("configMap")
            if source is None:
                return None
            try:
                data = self.core.read_namespaced_config_map(source["name"], pod["metadata"]["namespace"]).data or {}
            except ApiException:
                return None
            for item in source.get("items") or []:
                if item["path"] == key:
                    key = item["key"]
            return data.get(key)
        return None

    def config_manager_file(self, pod, volume_name, key):
        """What NVIDIA's config manager wrote into the shared emptyDir: the config the node's
        label names (or DEFAULT_CONFIG) out of the configs folder."""
        containers = (pod["spec"].get("initContainers") or []) + (pod["spec"].get("containers") or [])
        for container in containers:
            argv, env = argv_env(container)
            if programs.daemon_kind(argv) != "config-manager":
                continue
            target = env.get("CONFIG_FILE_DST", "/config/config.yaml")
            mount = next((m for m in container.get("volumeMounts") or [] if m["name"] == volume_name), None)
            if mount is None or target != mount["mountPath"].rstrip("/") + "/" + key:
                continue
            node = self.core.read_node(pod["spec"]["nodeName"])
            label = env.get("NODE_LABEL", "nvidia.com/device-plugin.config")
            wanted = (node.metadata.labels or {}).get(label) or env.get("DEFAULT_CONFIG", "")
            source_dir = env.get("CONFIG_FILE_SRCDIR", "/available-configs")
            available = {}
            for item in container.get("volumeMounts") or []:
                if item["mountPath"].rstrip("/") == source_dir.rstrip("/"):
                    volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == item["name"]), {})
                    if volume.get("configMap"):
                        available = self.core.read_namespaced_config_map(
                            volume["configMap"]["name"], pod["metadata"]["namespace"]).data or {}
            if not wanted and len(available) == 1:
                wanted = next(iter(available))
            chosen = wanted if wanted in available else f"{wanted}.yaml" if f"{wanted}.yaml" in available else None
            return available.get(chosen) if chosen else None
        return None

    def visible(self, pod, container, node):
        """The devices the container sees, and whether the NVIDIA runtime gave it the tools."""
        runtime = self.runtime.get(node, dict(RUNTIME_DEFAULTS))
        handler = pod["spec"].get("runtimeClassName")
        if handler:
            try:
                handler = client.NodeV1Api(self.api).read_runtime_class(handler).handler
            except ApiException:
                pass
        else:
            handler = runtime["defaultRuntime"]
        gpus = self.healthy(node)
        # devices of DRA claims come as CDI devices: a runtime without CDI leaves them out
        dra_seen = self.dra_visible(pod, container, node) if runtime["cdi"] else []
        granted_ids = [d for ids in self.granted.get(pod["metadata"]["uid"], {}).values() for d in ids]
        plugin = self.plugins.get(node) or {}
        strategies = (plugin.get("config") or {}).get("deviceListStrategy") or ["envvar"]
        _argv, env = argv_env(container)
        env = dict(programs.image_env(container.get("image", "")), **env)
        via_cdi = any(s.startswith("cdi-") for s in strategies) and granted_ids
        if granted_ids and ("envvar" in strategies or ("volume-mounts" in strategies and runtime["acceptVolumeMounts"])):
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(sorted({d.split("::")[0] for d in granted_ids}))
        if handler != "nvidia" and not (via_cdi and runtime["cdi"]):
            return (dra_seen, True) if dra_seen else ([], False)
        seen = gpu_model.visible_devices(gpus, granted_ids) if via_cdi and runtime["cdi"] else []
        wanted = env.get("NVIDIA_VISIBLE_DEVICES")
        privileged = bool((container.get("securityContext") or {}).get("privileged"))
        if wanted and handler == "nvidia" and (runtime["acceptEnvvarUnprivileged"] or privileged) \
                and wanted not in ("void", "none"):
            extra = gpu_model.all_devices(gpus) if wanted == "all" else gpu_model.visible_devices(gpus, wanted.split(","))
            seen = seen + [d for d in extra if d not in seen]
        return seen + [d for d in dra_seen if d not in seen], True

    # ---------------------------------------------------------------- pods
    def allocate(self, pod, node):
        """The device manager's allocation at admission: distinct healthy devices per resource."""
        plugin = self.plugins.get(node)
        taken = {}
        for uid, granted in self.granted.items():
            other = self.pods.get(uid)
            if other is not None and other["spec"].get("nodeName") == node:
                for resource, ids in granted.items():
                    taken.setdefault(resource, set()).update(ids)
        granted = {}
        for container in pod["spec"].get("containers") or []:
            for resource, amount in ((container.get("resources") or {}).get("limits") or {}).items():
                if not plugin or resource not in plugin.get("resources", {}):
                    continue
                free = [d for d in plugin["healthy"].get(resource, []) if d not in taken.get(resource, set())
                        and d not in granted.get(resource, [])]
                granted.setdefault(resource, []).extend(free[:int(amount)])
        self.granted[pod["metadata"]["uid"]] = granted

    def handle(self, kind, pod):
        meta = pod["metadata"]
        uid = meta["uid"]
        node = pod["spec"].get("nodeName")
        if kind == "DELETED" or meta.get("deletionTimestamp") or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            if kind == "DELETED":
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = pod
            self.granted.pop(uid, None)
            for name, plugin in list(self.plugins.items()):
                if plugin["uid"] == uid:
                    del self.plugins[name]
                    self.write_node_resources(name)
            for name, plugin in list(self.dra.items()):
                if plugin["uid"] == uid:
                    del self.dra[name]
                    self.delete_slices(name)
            return
        self.pods[uid] = pod
        if not node or (pod.get("status") or {}).get("phase") != "Running" or uid in self.done:
            return
        if meta.get("annotations", {}).get(EXIT_CODE) is not None:
            self.done.add(uid)
            return
        if meta.get("annotations", {}).get(CRASH_CODE):
            if not self.recover(pod, node):
                self.done.add(uid)
                return
        self.done.add(uid)
        if uid not in self.granted:
            self.allocate(pod, node)
        for container in pod["spec"].get("containers") or []:
            argv, env = argv_env(container)
            kind_of = programs.daemon_kind(argv)
            if kind_of == "device-plugin":
                self.start_plugin(pod, container, node, argv, env)
                return
            if kind_of == "dra-gpu-plugin":
                self.start_dra_plugin(pod, container, node, argv)
                return
            if kind_of is None:
                slow = self.active("slow-pod-start")
                if slow:
                    self.later.append((time.monotonic() + float(slow.get("delay", 5)), uid))
                    return
                self.run_program(pod, container, node, argv)
                return

    def recover(self, pod, node):
        """A crash-looping plugin whose fault is gone starts at its next restart: the crash
        annotations go and kwok's Stage gpufleet-pod-crash-recover makes it run and be ready
        again, its restart count one higher."""
        container = pod["spec"]["containers"][0]
        argv, _env = argv_env(container)
        if programs.daemon_kind(argv) not in ("device-plugin", "dra-gpu-plugin") or self.active("plugin-crashloop", node):
            return False
        recovered = int((pod["metadata"].get("annotations") or {}).get(RECOVERED) or 0) + 1
        self.annotate(pod, {CRASH_CODE: None, CRASH_MESSAGE: None, RECOVERED: str(recovered)})
        return True

    def start_plugin(self, pod, container, node, argv, env):
        _devices, tools = self.visible(pod, container, node)
        try:
            if not tools:
                raise gpu_model.PluginError("Incompatible strategy detected auto\nIf this is a GPU node, did "
                                            "you configure the NVIDIA Container Toolkit?")
            plugin_config = gpu_model.plugin_config(argv, env, lambda path: self.read_file(pod, container, path))
            resources = gpu_model.advertised(self.healthy(node) if node in self.entries else [], plugin_config)
            if self.active("plugin-crashloop", node):
                raise gpu_model.PluginError("failed to initialize NVML: ERROR_UNKNOWN")
        except gpu_model.PluginError as err:
            fail = next((a.split("=", 1)[1] for a in argv if a.startswith("--fail-on-init-error=")), None) \
                or env.get("FAIL_ON_INIT_ERROR")
            self.write_log(pod, container, f"E {err}\n")
            if fail is None or str(fail).lower() == "true":
                self.annotate(pod, {CRASH_CODE: "1", CRASH_MESSAGE: f"E {err}\n"[-2048:]})
            return
        log = "I Starting FS watcher.\nI Starting OS watcher.\nI Starting Plugins.\nI Loading configuration.\n"
        log += "".join(f"I Starting GRPC server for '{r}'\n" for r in resources)
        self.write_log(pod, container, log)
        if not mounts_host_path(pod, container, DEVICE_PLUGIN_DIR):
            return  # its socket is not where the kubelet looks: it never registers
        self.plugins[node] = {"uid": pod["metadata"]["uid"], "since": time.monotonic(), "resources": resources,
                              "config": plugin_config, "registered": False, "healthy": {}}

    # ---------------------------------------------------------------- DRA
    def start_dra_plugin(self, pod, container, node, argv):
        """NVIDIA's gpu-kubelet-plugin (cmd/gpu-kubelet-plugin): its required flags (--node-name,
        --image-name, or their environment variables), NVML from the driver root mounted at
        /driver-root, the node's GPUs enumerated once, at start; then its ResourceSlice."""
        given = {e["name"] for e in container.get("env") or [] if e.get("value") or e.get("valueFrom")}
        missing = [flag for flag, variable in (("node-name", "NODE_NAME"), ("image-name", "IMAGE_NAME"))
                   if variable not in given and not any(a.startswith(f"--{flag}") for a in argv)]
        if missing:
            message = f'Required flags "{", ".join(missing)}" not set\n'
            self.write_log(pod, container, message)
            self.annotate(pod, {CRASH_CODE: "1", CRASH_MESSAGE: message})
            return
        healthy = self.healthy(node)
        driver_root = any(m["mountPath"].rstrip("/") == "/driver-root" and "hostPath" in next(
            (v for v in pod["spec"].get("volumes") or [] if v["name"] == m["name"]), {})
            for m in container.get("volumeMounts") or [])
        if not healthy or not driver_root or self.active("plugin-crashloop", node):
            message = ("E Error: error creating driver: failed to create device state: error enumerating all "
                       "possible devices: error initializing NVML: ERROR_LIBRARY_NOT_FOUND\n")
            self.write_log(pod, container, message)
            self.annotate(pod, {CRASH_CODE: "1", CRASH_MESSAGE: message})
            return
        devices, index = gpu_model.dra_devices(healthy)
        self.write_log(pod, container, "".join(f"I Publishing device {d['name']}\n" for d in devices))
        old = self.dra.get(node)
        generation = (old["generation"] + (old["devices"] != devices)) if old else 1
        self.dra[node] = {"uid": pod["metadata"]["uid"], "devices": devices, "index": index, "generation": generation}
        self.publish_slice(node)

    def slices(self, node):
        resource = client.ResourceV1Api(self.api)
        return [s for s in resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items
                if s.spec.driver == gpu_model.DRA_DRIVER]

    def publish_slice(self, node):
        """The plugin's slice, as its resourceslice controller writes it: pool <node>, one slice."""
        plugin = self.dra[node]
        spec = {"driver": gpu_model.DRA_DRIVER, "nodeName": node, "devices": plugin["devices"],
                "pool": {"name": node, "generation": plugin["generation"], "resourceSliceCount": 1}}
        resource = client.ResourceV1Api(self.api)
        existing = self.slices(node)
        owner = self.core.read_node(node).metadata.uid
        if existing:
            resource.patch_resource_slice(existing[0].metadata.name, {"spec": spec})
            for extra in existing[1:]:
                resource.delete_resource_slice(extra.metadata.name)
            return
        resource.create_resource_slice({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"generateName": f"{node}-{gpu_model.DRA_DRIVER}-",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner,
                                              "controller": True}]},
            "spec": spec})

    def republish(self):
        """The plugin's resourceslice controller publishes again a slice deleted behind its back
        (it watches its slices); looked at every two seconds here."""
        if not self.dra or time.monotonic() < getattr(self, "_next_republish", 0):
            return
        self._next_republish = time.monotonic() + 2  # pylint: disable=attribute-defined-outside-init
        present = {item.spec.node_name for item in client.ResourceV1Api(self.api).list_resource_slice().items
                   if item.spec.driver == gpu_model.DRA_DRIVER}
        for node in list(self.dra):
            if node not in present:
                self.publish_slice(node)

    def delete_slices(self, node):
        for item in self.slices(node):
            try:
                client.ResourceV1Api(self.api).delete_resource_slice(item.metadata.name)
            except ApiException as err:
                if err.status != 404:
                    raise

    def dra_visible(self, pod, container, node):
        """[(gpu, migs or None)] of the devices the container's claims were allocated here."""
        index = (self.dra.get(node) or {}).get("index", {})
        claims = {s["name"]: s.get("resourceClaimName")
                  for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        for entry in pod["spec"].get("resourceClaims") or []:
            if entry.get("resourceClaimName"):
                claims[entry["name"]] = entry["resourceClaimName"]
        picked = []
        for ref in (container.get("resources") or {}).get("claims") or []:
            claim_name = claims.get(ref.get("name"))
            if not claim_name:
                continue
            try:
                claim = client.ResourceV1Api(self.api).read_namespaced_resource_claim(
                    claim_name, pod["metadata"]["namespace"])
            except ApiException:
                continue
            allocation = claim.status.allocation if claim.status else None
            for result in (allocation.devices.results if allocation and allocation.devices else None) or []:
                if result.driver != gpu_model.DRA_DRIVER or result.pool != node:
                    continue
                if ref.get("request") and result.request.split("/")[0] != ref["request"] and result.request != ref["request"]:
                    continue
                if result.device in index and result.device not in picked:
                    picked.append(result.device)
        out = []
        for device in picked:
            gpu, mig = index[device]
            if mig is None:
                out.append((gpu, None))
                continue
            same = next((entry for entry in out if entry[0] is gpu and entry[1] is not None), None)
            if same:
                same[1].append(mig)
            else:
                out.append((gpu, [mig]))
        return out

    def run_later(self):
        """Programs whose end was put off (slow-pod-start), on nodes whose kubelet is there."""
        now = time.monotonic()
        for when, uid in list(self.later):
            pod = self.pods.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                self.later.remove((when, uid))
                continue
            if now < when or not self.kubelet_there(pod["spec"]["nodeName"]):
                continue
            self.later.remove((when, uid))
            container = pod["spec"]["containers"][0]
            self.run_program(pod, container, pod["spec"]["nodeName"], programs.argv_of(container))

    def sync_ready(self):
        """A kubelet back from silence writes its pods' status again: the node lifecycle controller
        marked them not Ready while the node was Unknown, and the kubelet's status manager sets
        Ready from the containers' own state at its next sync (kwok moves only Pending pods)."""
        if time.monotonic() < getattr(self, "_next_sync", 0):
            return
        self._next_sync = time.monotonic() + 2  # pylint: disable=attribute-defined-outside-init
        for pod in list(self.pods.values()):
            status = pod.get("status") or {}
            node = pod["spec"].get("nodeName")
            if status.get("phase") != "Running" or not node or not self.kubelet_there(node) \
                    or (pod["metadata"].get("annotations") or {}).get(CRASH_CODE) \
                    or pod["metadata"].get("deletionTimestamp"):
                continue
            containers = status.get("containerStatuses") or []
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
            if not containers or not all(c.get("ready") for c in containers) or not ready or ready.get("status") == "True":
                continue
            stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            conditions = [dict(c, status="True", lastTransitionTime=stamp, reason=None, message=None)
                          if c.get("type") in ("Ready", "ContainersReady") else c for c in status["conditions"]]
            try:
                self.core.patch_namespaced_pod_status(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                                      {"status": {"conditions": conditions}})
            except ApiException as err:
                if err.status != 404:
                    raise

    def kubelet_there(self, node):
        return not self.active("node-not-ready", node)

    def register_plugins(self):
        now = time.monotonic()
        for node, plugin in self.plugins.items():
            if not plugin["registered"] and now - plugin["since"] >= self.timing["pluginRegister"]:
                healthy = self.healthy(node)
                uuids = {g["uuid"] for g in healthy} | {m["uuid"] for g in healthy for m in g["mig"]}
                plugin["healthy"] = {r: [i for i in ids if i.split("::")[0] in uuids]
                                     for r, ids in plugin["resources"].items()}
                plugin["registered"] = True
                self.write_node_resources(node)

    def write_node_resources(self, node):
        """capacity and allocatable of the node's device-plugin resources, as the kubelet writes
        them: the devices registered, and the healthy ones (0 once the plugin is gone)."""
        try:
            current = self.core.read_node_status(node)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        plugin = self.plugins.get(node)
        capacity = dict(current.status.capacity or {})
        allocatable = dict(current.status.allocatable or {})
        known = self.known_resources.setdefault(node, set())
        if plugin and plugin["registered"]:
            for resource, ids in plugin["resources"].items():
                capacity[resource] = str(len(ids))
                allocatable[resource] = str(len(plugin["healthy"].get(resource, [])))
                known.add(resource)
        for resource in known:
            if not (plugin and plugin["registered"] and resource in plugin["resources"]):
                allocatable[resource] = "0"
        if capacity != (current.status.capacity or {}) or allocatable != (current.status.allocatable or {}):
            self.core.patch_node_status(node, {"status": {"capacity": capacity, "allocatable": allocatable}})

    def run_program(self, pod, container, node, argv):
        devices, tools = self.visible(pod, container, node)
        ctx = programs.Context(devices, tools)
        log, rc = programs.run(argv, ctx)
        if rc is None:  # a script that ends in a sleep forever: it runs on
            self.write_log(pod, container, log)
            return
        path = container.get("terminationMessagePath", "/dev/termination-log")
        message = ctx.files.get(path, "")
        if not message and container.get("terminationMessagePolicy") == "FallbackToLogsOnError" and rc:
            message = "".join(log.splitlines(True)[-80:]).encode()[-2048:].decode(errors="ignore")
        self.write_log(pod, container, log)
        self.annotate(pod, {EXIT_CODE: str(rc), MESSAGE: message[:4096]})

    def write_log(self, pod, container, text):
        """The container's log, in the CRI format, served by kwok through its Logs object."""
        meta = pod["metadata"]
        folder = self.logs / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{container['name']}.log"
        with path.open("a", encoding="utf-8") as handle:
            handle.write(cri_log(text))
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                  "uid": meta["uid"]}]},
                "spec": {"logs": [{"containers": [c["name"] for c in pod["spec"]["containers"]],
                                   "logsFile": str(path)}]}}
        try:
            self.custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", meta["namespace"], "logs", body)
        except ApiException as err:
            if err.status == 409:
                self.custom.replace_namespaced_custom_object(
                    "kwok.x-k8s.io", "v1alpha1", meta["namespace"], "logs", meta["name"],
                    dict(body, metadata=dict(body["metadata"], resourceVersion=self.custom.get_namespaced_custom_object(
                        "kwok.x-k8s.io", "v1alpha1", meta["namespace"], "logs", meta["name"])["metadata"]["resourceVersion"])))
            elif err.status != 404:
                raise

    def annotate(self, pod, annotations):
        try:
            self.core.patch_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                           {"metadata": {"uid": pod["metadata"]["uid"], "annotations": annotations}})
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    # ---------------------------------------------------------------- loop
    def watch_pods(self):
        while True:
            try:
                listing = json.loads(self.core.list_pod_for_all_namespaces(_preload_content=False).data)
                for item in listing["items"]:
                    self.events.put(("ADDED", item))
                stream = watch.Watch()
                for event in stream.stream(self.core.list_pod_for_all_namespaces,
                                           resource_version=listing["metadata"]["resourceVersion"],
                                           timeout_seconds=300):
                    self.events.put((event["type"], event["raw_object"]))
            except Exception as err:  # noqa: BLE001  pylint: disable=broad-except
                print(f"gpunodes: pod watch: {err}; listing again", flush=True)
                time.sleep(0.5)

    def run(self):
        threading.Thread(target=self.watch_pods, daemon=True).start()
        (self.state / "gpunodes.ready").write_text(f"{os.getpid()}\n")
        retries = {}
        while True:
            try:
                kind, pod = self.events.get(timeout=0.1)
            except queue.Empty:
                kind = pod = None
            if pod is not None:
                uid = pod["metadata"]["uid"]
                try:
                    self.handle(kind, pod)
                    retries.pop(uid, None)
                except Exception as err:  # noqa: BLE001  pylint: disable=broad-except
                    # what a kubelet does with a pod it could not sync: try again at the next pass
                    # (an API error, a fault proxy's answer), a few times, and say so
                    print(f"gpunodes: {pod['metadata'].get('namespace')}/{pod['metadata']['name']}: {err}", flush=True)
                    self.done.discard(uid)
                    retries[uid] = retries.get(uid, 0) + 1
                    if retries[uid] <= 5:
                        threading.Timer(0.5 * retries[uid], self.events.put, args=((kind, pod),)).start()
            for step in (self.reload_faults, self.expire_faults, self.register_plugins, self.run_later,
                         self.republish, self.sync_ready):
                try:
                    step()
                except Exception as err:  # noqa: BLE001  pylint: disable=broad-except
                    print(f"gpunodes: {step.__name__}: {err}", flush=True)


_DYNAMIC = {}


def _dynamic(api):
    from kubernetes.dynamic import DynamicClient  # pylint: disable=import-outside-toplevel
    if id(api) not in _DYNAMIC:
        _DYNAMIC[id(api)] = DynamicClient(api)
    return _DYNAMIC[id(api)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--populate", action="store_true", help="write the file's Nodes and objects, then exit")
    args = parser.parse_args()
    description = yaml.safe_load(pathlib.Path(args.cluster).read_text()) or {}
    nodes = GpuNodes(description, os.path.dirname(os.path.abspath(args.cluster)), args.kubeconfig, args.state)
    if args.populate:
        nodes.populate(description)
        return
    nodes.run()


if __name__ == "__main__":
    main()
