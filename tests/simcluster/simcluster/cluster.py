"""The simulated cluster: its objects, the API's write path, and faults.

The write path is the one every request and every controller goes through,
so objects a controller makes pass the same admission as a client's. Order
and rules: kubernetes.io/docs/reference/access-authn-authz/admission-controllers/
and the registry strategies in kubernetes/pkg/registry (PrepareForCreate /
PrepareForUpdate: status is dropped on create and kept from the old object on
update of the main resource; the status subresource changes only status;
generation counts spec changes).

Namespaces: the NamespaceLifecycle admission plugin
(staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go:
no creates in a Terminating namespace, 403 with a NamespaceTerminating cause;
default, kube-system and kube-public may not be deleted), the namespace
storage (pkg/registry/core/namespace/storage/storage.go: DELETE sets
deletionTimestamp and phase Terminating and adds orphan/foregroundDeletion
as the delete options ask; the object goes only once spec.finalizers and
metadata.finalizers are both empty, on a DELETE or during an update) and its
strategies (pkg/registry/core/namespace/strategy.go: create always adds the
"kubernetes" finalizer and sets phase Active; an update keeps spec.finalizers
and status; only the finalize subresource changes spec.finalizers).

Timing: the cluster file's `timing` picks a profile of durations, compressed
(the default: fractions of a second, so that tests run in seconds) or real
(the durations a real cluster of the configured kubernetesVersion has), and
may override single durations. The real ones come from upstream's defaults:
kube-controller-manager's --node-monitor-period (5s,
SetDefaults_KubeCloudSharedConfiguration) and --node-monitor-grace-period
(pkg/controller/nodelifecycle/config/v1alpha1/defaults.go: 40s, 50s since
v1.32.0, kubernetes/kubernetes#126287); the kubelet's restart back-off
(pkg/kubelet/kubelet.go initialCrashLoopBackOff 10s and MaxCrashLoopBackOff,
pkg/kubelet/apis/config/v1beta1/defaults.go MaxContainerBackOff 300s; the
ReduceDefaultCrashLoopBackOffDecay gate that lowers them is alpha and off);
its nodeStatusUpdateFrequency (10s) and PLEG relist period (1s); the
DefaultTolerationSeconds admission plugin
(plugin/pkg/admission/defaulttolerationseconds: kube-apiserver's
--default-not-ready-toleration-seconds and
--default-unreachable-toleration-seconds, 300); kube-apiserver's --event-ttl
(1h). Pod start and device-plugin registration vary with the machine; the
figures chosen are said where they are set (real_timing).
"""

import copy
import os
import random
import threading
import time

import yaml

from . import admission, merge
from . import gpus as gpu_model
from .resources import BY_KIND, BY_KEY
from .selectors import label_selector_object_match
from .store import ApiError, Store, not_found, now_rfc3339

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# The compressed profile, the default (seconds). Every key is a duration a cluster file may set.
DEFAULT_TIMING = {
    "tick": 0.05,                     # the controllers' loop period: the resolution of every timer
    "podStart": 0.3,                  # bound pod -> containers running
    "programRun": 0.2,                # a short program's run, until the kubelet reports its exit
    "pluginRegister": 1.0,            # device plugin running -> node advertises its resources
    "podShutdown": 0.2,               # graceful deletion -> containers stopped (at most the grace period)
    "crashBackoff": 1.0,              # the kubelet's first restart back-off (doubles with each restart)
    "crashBackoffMax": None,          # ... up to this (None: 8 x crashBackoff)
    "nodeMonitorPeriod": 0.0,         # how often the node lifecycle controller looks (0: every tick)
    "nodeMonitorGracePeriod": 0.0,    # a kubelet silent this long -> its node's conditions Unknown
    "defaultTolerationSeconds": 300,  # tolerationSeconds of the not-ready/unreachable tolerations pods get
    "eventTTL": 3600,                 # not used yet: events are never expired
}
TIMING_PROFILES = ("compressed", "real")
EMPTY_STATUS = {
    "DaemonSet": {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                  "numberReady": 0},
    "ReplicaSet": {"replicas": 0},
    "Deployment": {},
    "PodDisruptionBudget": {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0},
}
# Namespaces NamespaceLifecycle refuses to delete (admission.go's immortal namespaces).
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
RUNTIME_DEFAULTS = {"defaultRuntime": "runc", "handlers": ["runc", "nvidia"], "cdi": False,
                    "acceptEnvvarUnprivileged": True, "acceptVolumeMounts": False}


def random_suffix(length=5):
    return "".join(random.choice(_NAME_CHARS) for _index in range(length))


def _major_minor(version):
    """(1, 37) for "1.37.0" (and (1, 32) for "v1.32.0-alpha.2")."""
    parts = str(version).lstrip("v").split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        raise ValueError(f"kubernetesVersion: {version!r} is not a version such as 1.37.0") from None


def real_timing(version):
    """The durations of a real cluster of this Kubernetes version: upstream's defaults where
    Kubernetes sets them, a representative figure where they vary with the machine."""
    return {
        # Not a Kubernetes duration: how often the simulator's controllers look (upstream's are
        # driven by watch events and react within milliseconds).
        "tick": 0.05,
        # Varies. Bound pod -> containers running with the image already on the node: the kubelet
        # sees the binding at once (watch), creates the sandbox (runtime and CNI), and creates and
        # starts the containers; about 1-3 s on containerd. 2 s is taken, well inside the
        # sig-scalability pod startup SLO (kubernetes/community sig-scalability/slos/
        # pod_startup_latency.md: 5 s at the 99th percentile, image pulls excluded). No image is
        # ever pulled here (the kubelet's "already present on machine").
        "podStart": 2.0,
        # A short program (echo, nvidia-smi -L) ends within a fraction of a second; the kubelet
        # reports the exit at its next PLEG relist (pkg/kubelet/kubelet.go genericPlegRelistPeriod,
        # 1 s).
        "programRun": 1.0,
        # Varies. The device plugin starts and registers with the kubelet within about a second;
        # the node shows the resources at the kubelet's next node status sync
        # (nodeStatusUpdateFrequency, 10 s, pkg/kubelet/apis/config/v1beta1/defaults.go), 5 s
        # later on average: 6 s is taken (1 s to 11 s in practice).
        "pluginRegister": 6.0,
        # Varies. A container that exits on SIGTERM stops within about a second, then the kubelet
        # deletes the pod object; 1 s is taken. One that ignores SIGTERM (a shell or sleep as PID 1)
        # takes its whole terminationGracePeriodSeconds on a real node, which is not modelled.
        "podShutdown": 1.0,
        # The kubelet's restart back-off: pkg/kubelet/kubelet.go initialCrashLoopBackOff (10 s)
        # and MaxCrashLoopBackOff = pkg/kubelet/apis/config/v1beta1 MaxContainerBackOff (300 s);
        # also the default of crashLoopBackOff.maxContainerRestartPeriod (KubeletCrashLoopBackOffMax,
        # beta since 1.35). ReduceDefaultCrashLoopBackOffDecay (1 s / 60 s) is alpha and off.
        "crashBackoff": 10.0,
        "crashBackoffMax": 300.0,
        # kube-controller-manager --node-monitor-period (SetDefaults_KubeCloudSharedConfiguration).
        "nodeMonitorPeriod": 5.0,
        # kube-controller-manager --node-monitor-grace-period
        # (pkg/controller/nodelifecycle/config/v1alpha1/defaults.go): 40 s until v1.31, 50 s since
        # v1.32.0 (kubernetes/kubernetes#126287).
        "nodeMonitorGracePeriod": 50.0 if _major_minor(version) >= (1, 32) else 40.0,
        # kube-apiserver --default-not-ready-toleration-seconds and
        # --default-unreachable-toleration-seconds (plugin/pkg/admission/defaulttolerationseconds).
        "defaultTolerationSeconds": 300,
        # kube-apiserver --event-ttl (1h).
        "eventTTL": 3600,
    }


def resolve_timing(setting, version):
    """The cluster file's `timing`: a profile's name (`compressed`, the default, or `real`), or a
    mapping of durations over a profile (`profile:` names it; compressed when it is absent)."""
    if setting is None:
        setting = {}
    if isinstance(setting, str):
        setting = {"profile": setting}
    if not isinstance(setting, dict):
        raise ValueError(f"timing: expected a profile ({' or '.join(TIMING_PROFILES)}) or a mapping of "
                         f"durations, not {setting!r}")
    overrides = dict(setting)
    profile = overrides.pop("profile", "compressed")
    if profile not in TIMING_PROFILES:
        raise ValueError(f"timing: unknown profile {profile!r}; the profiles are {', '.join(TIMING_PROFILES)}")
    unknown = sorted(set(overrides) - set(DEFAULT_TIMING))
    if unknown:
        raise ValueError(f"timing: unknown durations {', '.join(unknown)}; the durations are "
                         f"{', '.join(DEFAULT_TIMING)}")
    timing = dict(DEFAULT_TIMING) if profile == "compressed" else real_timing(version)
    timing.update(overrides)
    if timing["crashBackoffMax"] is None:
        timing["crashBackoffMax"] = 8 * timing["crashBackoff"]
    timing["profile"] = profile
    return timing


class Faults:
    """Faults on demand (STYLE.md: faults are data). Each is a dict kept until it expires or is cleared."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items = []

    def add(self, fault):
        fault = dict(fault)
        fault.setdefault("id", random_suffix(8))
        if fault.get("seconds"):
            fault["until"] = time.monotonic() + float(fault["seconds"])
        with self.lock:
            self.items.append(fault)
        return fault

    def clear(self, fault_id=None):
        with self.lock:
            self.items = [f for f in self.items if fault_id and f["id"] != fault_id]

    def active(self, kind, **match):
        if not self.items:
            # No fault at all, the usual case: nothing to expire or match (asked per node and pod).
            return None
        moment = time.monotonic()
        with self.lock:
            self.items = [f for f in self.items if f.get("until", moment + 1) > moment
                          and f.get("count", 1) > 0]
            for fault in self.items:
                if fault["type"] == kind and all(fault.get(k) in (None, v) for k, v in match.items()):
                    return fault
        return None

    def consume(self, fault):
        with self.lock:
            if "count" in fault:
                fault["count"] -= 1


class Cluster:
    def __init__(self, description, base_dir="."):
        self.description = description
        self.version = str(description.get("kubernetesVersion", "1.37.0")).lstrip("v")
        self.release = _major_minor(self.version)
        self.timing = resolve_timing(description.get("timing"), self.version)
        self.pod_security_default = description.get("podSecurityDefault", "privileged")
        self.store = Store()
        self.faults = Faults()
        self.base_dir = base_dir
        self.gpus = {}
        self.gpu_specs = {}
        self.runtime = {}
        self.node_index = {}
        self.requests = 0
        self.request_counts = {}
        self.lock = self.store.lock
        # Index of the stored Events for record_event: (namespace, involvedObject.uid, reason,
        # message) -> {name: creation order}, kept by a store listener on every write to events,
        # so that a repeated event is found without a scan of its namespace's events.
        self.event_index = {}
        self.event_order = {}
        self.store.listeners.append(self._index_event)
        self._bootstrap()

    # ------------------------------------------------------------- set-up
    def _bootstrap(self):
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.internal_create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        for name, value in admission.SYSTEM_PRIORITIES.items():
            self.internal_create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                  "metadata": {"name": name}, "value": value,
                                  "description": "Used for system critical pods that must not be moved from "
                                                 "their current node." if "node" in name else
                                                 "Used for system critical pods that must run in the cluster, "
                                                 "but can be moved to another node if necessary.",
                                  "preemptionPolicy": "PreemptLowerPriority"})
        for index, node in enumerate(self.description.get("nodes") or []):
            self.add_node(node, index)
        deleted = []
        for obj in self.description.get("namespaces") or []:
            meta = {"name": obj} if isinstance(obj, str) else dict(obj)
            if meta.pop("deleted", False):
                deleted.append(meta["name"])
            self.internal_create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        for obj in self.description.get("objects") or []:
            self.internal_create(copy.deepcopy(obj))
        # `deleted: true`: the namespace is deleted once its objects exist, as a client's DELETE
        # would; the namespace controller then removes its content (and waits on its finalizers).
        for name in deleted:
            self.delete(BY_KEY[("", "namespaces")], "", name)
        for fault in self.description.get("faults") or []:
            self.faults.add(fault)

    def read_gpus(self, name):
        """Read a node's GPUs again where they come from a command (its nvidia-smi), as a starting
        device plugin enumerates them."""
        spec = self.gpu_specs.get(name) or {}
        if spec.get("command"):
            self.gpus[name] = gpu_model.node_gpus(spec, name, self.base_dir)
        return self.gpus.get(name, [])

    def add_node(self, entry, index):
        name = entry["name"]
        self.node_index[name] = index
        self.gpu_specs[name] = entry.get("gpus")
        self.gpus[name] = gpu_model.node_gpus(entry.get("gpus"), name, self.base_dir)
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}
        labels.update(entry.get("labels") or {})
        capacity = {"cpu": "64", "memory": "527957648Ki", "pods": "110", "ephemeral-storage": "959786032Ki",
                    "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
        capacity.update({k: str(v) for k, v in (entry.get("capacity") or {}).items()})
        octet = index % 250 + 1
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels,
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"podCIDR": f"10.244.{index}.0/24", "podCIDRs": [f"10.244.{index}.0/24"]},
                "status": {"capacity": dict(capacity), "allocatable": dict(capacity),
                           "addresses": [{"type": "InternalIP", "address": f"10.0.{index // 250}.{octet}"},
                                         {"type": "Hostname", "address": name}],
                           "conditions": [], "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                           "nodeInfo": {"kubeletVersion": f"v{self.version}", "kubeProxyVersion": "",
                                        "containerRuntimeVersion": entry.get("containerRuntime",
                                                                             "containerd://1.7.24"),
                                        "operatingSystem": "linux", "architecture": "amd64",
                                        "osImage": entry.get("osImage", "Debian GNU/Linux 12 (bookworm)"),
                                        "kernelVersion": entry.get("kernelVersion", "6.1.0-28-amd64"),
                                        "machineID": f"{index:032x}", "systemUUID": f"{index:08x}-0000-0000-0000-"
                                                                                    f"000000000000",
                                        "bootID": f"{index:08x}-b007-0000-0000-000000000000"}}}
        if entry.get("unschedulable"):
            node["spec"]["unschedulable"] = True
        if entry.get("taints"):
            node["spec"]["taints"] = copy.deepcopy(entry["taints"])
        self.runtime.setdefault("nodes", {})[name] = dict(RUNTIME_DEFAULTS, **(entry.get("runtime") or {}))
        self.internal_create(node)

    def node_runtime(self, name):
        return self.runtime.get("nodes", {}).get(name, dict(RUNTIME_DEFAULTS))

    # -------------------------------------------------------- write path
    def resource_of(self, obj):
        api_version = obj.get("apiVersion", "")
        group = api_version.split("/", 1)[0] if "/" in api_version else ""
        res = BY_KIND.get((group, obj.get("kind")))
        if res is None or res.api_version != api_version or (res.since and self.release < res.since):
            raise ApiError(404, f"the server could not find the requested resource ({obj.get('kind')} "
                                f"{api_version})", "NotFound")
        return res

    def internal_create(self, obj):
        res = self.resource_of(obj)
        return self.create(res, obj.get("metadata", {}).get("namespace") or ("default" if res.namespaced else ""),
                           obj, manager="simcluster", internal=True)

    def check_namespace(self, res, namespace, creating, name=None):
        """NamespaceLifecycle: a namespaced write needs its namespace; a create (subresource creates
        such as pods/eviction and pods/binding too) is refused while the namespace is Terminating."""
        if not res.namespaced:
            return
        ns = self.store.peek(BY_KEY[("", "namespaces")], "", namespace)
        if ns is None:
            raise ApiError(404, f'namespaces "{namespace}" not found', "NotFound",
                           {"name": namespace, "kind": "namespaces"})
        if creating and (ns.get("status") or {}).get("phase") == "Terminating":
            qualified = f'{res.plural}{"." + res.group if res.group else ""}'
            raise ApiError(403, f'{qualified} "{name or "Unknown"}" is forbidden: unable to create new content in '
                                f"namespace {namespace} because it is being terminated", "Forbidden",
                           {"name": name or "Unknown", "group": res.group, "kind": res.plural,
                            "causes": [{"reason": "NamespaceTerminating",
                                        "message": f"namespace {namespace} is being terminated",
                                        "field": "metadata.namespace"}]})

    def _prepare_meta(self, res, namespace, obj):
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on "
                                    "the request", "BadRequest")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + random_suffix()
        return meta

    def _mutate_pod(self, pod, namespace):
        spec = pod.setdefault("spec", {})
        spec.setdefault("serviceAccountName", "default")
        spec["serviceAccount"] = spec["serviceAccountName"]
        # ServiceAccount admission (plugin/pkg/admission/serviceaccount): the account must exist.
        if self.store.peek(BY_KEY[("", "serviceaccounts")], namespace, spec["serviceAccountName"]) is None:
            raise ApiError(403, f'pods "{pod["metadata"]["name"]}" is forbidden: error looking up service account '
                                f'{namespace}/{spec["serviceAccountName"]}: serviceaccount '
                                f'"{spec["serviceAccountName"]}" not found', "Forbidden")
        # DefaultTolerationSeconds admission: a pod with no NoExecute (or effect-less) toleration for
        # the not-ready or unreachable taint, by that key or by an empty key, gets one for
        # defaultTolerationSeconds (the kube-apiserver flags' 300 s).
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") in (None, "", key) and t.get("effect") in (None, "", "NoExecute")
                       for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": int(self.timing["defaultTolerationSeconds"])})
        pc_name = spec.get("priorityClassName")
        if pc_name:
            pc = self.store.peek(BY_KEY[("scheduling.k8s.io", "priorityclasses")], "", pc_name)
            if pc is None:
                raise ApiError(403, f'pods "{pod["metadata"]["name"]}" is forbidden: no PriorityClass with name '
                                    f'{pc_name} was found', "Forbidden")
            spec["priority"] = pc["value"]
        else:
            spec.setdefault("priority", 0)
        rc_name = spec.get("runtimeClassName")
        if rc_name:
            rc = self.store.peek(BY_KEY[("node.k8s.io", "runtimeclasses")], "", rc_name)
            if rc is None:
                raise ApiError(403, f'pods "{pod["metadata"]["name"]}" is forbidden: pod rejected: RuntimeClass '
                                    f'"{rc_name}" not found', "Forbidden")
            scheduling = rc.get("scheduling") or {}
            if scheduling.get("nodeSelector"):
                selector = spec.setdefault("nodeSelector", {})
                for key, value in scheduling["nodeSelector"].items():
                    if selector.get(key, value) != value:
                        raise ApiError(403, f'pods "{pod["metadata"]["name"]}" is forbidden: conflict: '
                                            f'runtimeClass.scheduling.nodeSelector[{key}] = {value}; '
                                            f'pod.spec.nodeSelector[{key}] = {selector[key]}', "Forbidden")
                    selector[key] = value
            for tol in scheduling.get("tolerations") or []:
                if tol not in tolerations:
                    tolerations.append(copy.deepcopy(tol))
            if rc.get("overhead"):
                spec["overhead"] = copy.deepcopy(rc["overhead"]["podFixed"])
        return pod

    def pod_security_level(self, namespace):
        ns = self.store.peek(BY_KEY[("", "namespaces")], "", namespace) or {}
        return (ns.get("metadata", {}).get("labels") or {}).get("pod-security.kubernetes.io/enforce",
                                                                self.pod_security_default)

    def _admit(self, res, obj, old, warnings):
        namespace = obj["metadata"].get("namespace")
        if res.kind == "Pod" and old is None:
            self._mutate_pod(obj, namespace)
        admission.validate(res, obj, old, self.version)
        if res.kind == "Pod" and old is None:
            level = self.pod_security_level(namespace)
            problems = admission.pod_security_violations(obj["spec"], level)
            if problems:
                raise ApiError(403, f'pods "{obj["metadata"]["name"]}" is forbidden: violates PodSecurity '
                                    f'"{level}:latest": {", ".join(problems)}', "Forbidden")
        if res.kind in ("DaemonSet", "Deployment", "ReplicaSet"):
            level = self.pod_security_level(namespace)
            problems = admission.pod_security_violations((obj["spec"].get("template") or {}).get("spec") or {},
                                                         level)
            if problems:
                warnings.append(f'would violate PodSecurity "{level}:latest": {", ".join(problems)}')

    def _initial_status(self, res, obj):
        if res.kind == "Pod":
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj["spec"])}
        elif res.kind == "Namespace":
            # PrepareForCreate: phase Active, and the "kubernetes" finalizer whatever else is listed.
            obj["status"] = {"phase": "Active"}
            spec = obj.setdefault("spec", {})
            if "kubernetes" not in (spec.get("finalizers") or []):
                spec["finalizers"] = list(spec.get("finalizers") or []) + ["kubernetes"]
        elif res.kind == "ResourceClaim":
            # The claim strategy's PrepareForCreate: a new claim has no status.
            obj.pop("status", None)
        elif res.kind in EMPTY_STATUS:
            # Fields without omitempty in the Go types serialise even when zero.
            obj["status"] = dict(EMPTY_STATUS[res.kind])

    def create(self, res, namespace, obj, dry_run=False, manager=None, field_validation="Warn",
               internal=False, warnings=None, applied=False):
        warnings = [] if warnings is None else warnings
        obj = copy.deepcopy(obj)
        if obj.get("kind") not in (None, res.kind):
            raise ApiError(400, f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                                f"expected API version ({res.api_version})", "BadRequest")
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        with self.lock:
            # Admission sees the name asked for; a generateName is resolved later, in the storage.
            requested = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName")
            meta = self._prepare_meta(res, namespace, obj)
            if not internal:
                warnings += admission.decode(obj, self.version, field_validation)
            self.check_namespace(res, namespace, True, requested)
            # rest.BeforeCreate: a new object is not being deleted.
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
            # Nodes keep the status they are created with (the kubelet registers that way).
            if res.kind != "Node":
                self._initial_status(res, obj)
            admission.default(obj)
            if res.group == "resource.k8s.io":
                from . import dra
                dra.drop_disabled(obj, self.release)
            self._admit(res, obj, None, warnings)
            if self.store.peek(res, meta.get("namespace", ""), meta["name"]) is not None:
                from .store import already_exists
                raise already_exists(res, meta["name"])
            if not applied and manager:
                merge.track_update({}, obj, manager, res.api_version, now_rfc3339())
            if dry_run:
                meta.update({"uid": "00000000-0000-0000-0000-000000000000", "creationTimestamp": now_rfc3339(),
                             "resourceVersion": ""})
                if res.generation:
                    meta["generation"] = 1
                return obj
            created = self.store.create(res, obj)
            if res.kind == "Namespace":
                # The service account controller gives every namespace its "default" account.
                self.store.create(BY_KEY[("", "serviceaccounts")], {
                    "apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": meta["name"]}})
            return created

    def update(self, res, namespace, name, obj, dry_run=False, manager=None, subresource=None,
               field_validation="Warn", warnings=None, tracked=False, internal=False, copy_back=True):
        """PUT semantics on the main resource or the status subresource. ``copy_back`` false: a controller that
        does not read the result gets None instead of a copy of the stored object."""
        warnings = [] if warnings is None else warnings
        if internal and subresource == "status":
            # A controller's status write uses only the metadata and status of what it passes; of the
            # metadata, only its top-level keys are read or set below before it is replaced.
            obj = dict(obj, metadata=dict(obj.get("metadata") or {}), status=copy.deepcopy(obj.get("status")))
        else:
            obj = copy.deepcopy(obj)
        with self.lock:
            old = self.store.peek(res, namespace, name)
            if old is None:
                raise not_found(res, name)
            meta = obj.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError(400, f'the name of the object ({meta.get("name")}) does not match the name on the '
                                    f'URL ({name})', "BadRequest")
            meta["name"] = name
            self._prepare_meta(res, namespace, obj)
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            if not internal:
                warnings += admission.decode(obj, self.version, field_validation)
            expect_rv = meta.get("resourceVersion")
            for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                        "generation"):
                if key in old["metadata"]:
                    meta[key] = old["metadata"][key]
                else:
                    meta.pop(key, None)
            if "status" in res.subresources:
                if subresource == "status":
                    status = obj.get("status")
                    # The stored object with the new status; only top-level keys of its metadata are set
                    # below (managedFields, resourceVersion), so the rest is shared with the stored one
                    # (stored objects are never changed in place).
                    obj = dict(old, metadata=dict(old["metadata"]))
                    obj["status"] = status if status is not None else {}
                    meta = obj["metadata"]
                else:
                    if "status" in old:
                        obj["status"] = copy.deepcopy(old["status"])
                    else:
                        obj.pop("status", None)
            if res.kind == "Namespace" and subresource is None and isinstance(obj.get("spec") or {}, dict):
                # Only the finalize subresource changes spec.finalizers (strategy.go, PrepareForUpdate).
                spec = obj["spec"] = obj.get("spec") or {}
                if "finalizers" in (old.get("spec") or {}):
                    spec["finalizers"] = copy.deepcopy(old["spec"]["finalizers"])
                else:
                    spec.pop("finalizers", None)
            if subresource != "status":
                admission.default(obj)
                if res.group == "resource.k8s.io":
                    from . import dra
                    dra.drop_disabled(obj, self.release)
                self._admit(res, obj, old, warnings)
            elif res.kind == "ResourceClaim":
                from . import dra
                causes = dra.claim_status_causes(obj.get("status"), old.get("status"),
                                                 bool(old["metadata"].get("deletionTimestamp")))
                if causes:
                    from .store import invalid
                    raise invalid(res, name, causes)
            if res.generation and _spec_of(obj) != _spec_of(old):
                obj["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            if manager and not tracked:
                merge.track_update(old, obj, manager, res.api_version, now_rfc3339(), subresource)
            elif not manager:
                obj["metadata"]["managedFields"] = copy.deepcopy(old["metadata"].get("managedFields", []))
            if not dry_run and self._delete_during_update(res, obj, old):
                return self.store.delete(res, namespace, name)
            # A write that changes nothing but managedFields timestamps is no write: same
            # resourceVersion, no watch event (apiserver's fieldmanager ignores those timestamps).
            if _without_times(obj) == _without_times(old):
                if expect_rv not in (None, "") and expect_rv != old["metadata"]["resourceVersion"]:
                    from .store import conflict
                    raise conflict(res, name)
                return copy.deepcopy(old) if copy_back else None
            if dry_run:
                obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                return copy.deepcopy(obj)
            return self.store.replace(res, obj, expect_rv, copy_back)

    @staticmethod
    def _delete_during_update(res, obj, old):
        """An update that leaves a deleted object without finalizers deletes it, unless a grace period
        still runs (a pod the kubelet has not stopped yet); a namespace also needs spec.finalizers empty
        (registry/generic/registry ShouldDeleteDuringUpdate, namespace storage's
        ShouldDeleteNamespaceDuringUpdate)."""
        if not old["metadata"].get("deletionTimestamp") or obj["metadata"].get("finalizers"):
            return False
        if res.kind == "Namespace" and (obj.get("spec") or {}).get("finalizers"):
            return False
        return not old["metadata"].get("deletionGracePeriodSeconds")

    def patch(self, res, namespace, name, patch_type, body, dry_run=False, manager=None, force=False,
              subresource=None, field_validation="Warn", warnings=None):
        with self.lock:
            old = self.store.peek(res, namespace, name)
            if patch_type == "apply":
                if not manager:
                    raise ApiError(422, "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is "
                                        "required for apply patch", "Invalid")
                if not isinstance(body, dict):
                    raise ApiError(400, "error decoding YAML: invalid apply configuration", "BadRequest")
                if body.get("apiVersion") != res.api_version or body.get("kind") != res.kind:
                    raise ApiError(400, f"the API version in the data ({body.get('apiVersion')}) does not match "
                                        f"the expected API version ({res.api_version})" if body.get("kind") ==
                                   res.kind else f'Kind "{body.get("kind")}" does not match "{res.kind}"',
                                   "BadRequest")
                if (body.get("metadata") or {}).get("name", name) != name:
                    raise ApiError(400, "the name of the object does not match the name on the URL", "BadRequest")
                stamp = now_rfc3339()
                if old is None:
                    if subresource:
                        raise not_found(res, name)
                    created = merge.apply(None, body, manager, force, res.api_version, stamp)
                    created.setdefault("metadata", {})["name"] = name
                    return self.create(res, namespace, created, dry_run, manager, field_validation,
                                       warnings=warnings, applied=True)
                result = merge.apply(old, body, manager, force, res.api_version, stamp, subresource)
                return self.update(res, namespace, name, result, dry_run, manager, subresource, field_validation,
                                   warnings, tracked=True)
            if old is None:
                raise not_found(res, name)
            if patch_type == "json":
                result = merge.json_patch(old, body)
            elif patch_type == "merge":
                if not isinstance(body, dict):
                    raise ApiError(400, "json: cannot unmarshal array into Go value of type map[string]interface {}",
                                   "BadRequest")
                result = merge.merge_patch(old, body)
            else:
                if not isinstance(body, dict):
                    raise ApiError(400, "json: cannot unmarshal array into Go value of type map[string]interface {}",
                                   "BadRequest")
                result = merge.strategic_merge(old, body)
            if "resourceVersion" not in (body.get("metadata") or {} if isinstance(body, dict) else {}):
                result.setdefault("metadata", {})["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self.update(res, namespace, name, result, dry_run, manager, subresource, field_validation,
                               warnings)

    def delete(self, res, namespace, name, options=None, dry_run=False):
        options = options or {}
        with self.lock:
            if res.kind == "Namespace" and name in IMMORTAL_NAMESPACES:
                raise ApiError(403, f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                               "Forbidden", {"name": name, "kind": "namespaces"})
            old = self.store.peek(res, namespace, name)
            if old is None:
                raise not_found(res, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                from .store import conflict
                raise conflict(res, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                                          f"meta: {old['metadata']['uid']}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                from .store import conflict
                raise conflict(res, name)
            if res.kind == "Namespace":
                return self._delete_namespace(res, old, options, dry_run)
            if dry_run:
                return copy.deepcopy(old)
            obj = copy.deepcopy(old)
            meta = obj["metadata"]
            policy = options.get("propagationPolicy") or ("Background" if res.group == "apps" else None)
            if options.get("orphanDependents") is True:
                policy = "Orphan"
            finalizers = list(meta.get("finalizers") or [])
            if policy == "Foreground" and "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            if policy == "Orphan" and "orphan" not in finalizers:
                finalizers.append("orphan")
            if res.kind == "Pod":
                grace = options.get("gracePeriodSeconds")
                if grace is None:
                    grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
                terminal = obj.get("status", {}).get("phase") in ("Succeeded", "Failed")
                if obj["spec"].get("nodeName") and not terminal and int(grace) > 0:
                    if not meta.get("deletionTimestamp"):
                        meta["deletionTimestamp"] = now_rfc3339()
                        meta["deletionGracePeriodSeconds"] = int(grace)
                        if finalizers:
                            meta["finalizers"] = finalizers
                        return self.store.replace(res, obj)
                    return obj
            if finalizers:
                meta["finalizers"] = finalizers
                if not meta.get("deletionTimestamp"):
                    meta["deletionTimestamp"] = now_rfc3339()
                    meta["deletionGracePeriodSeconds"] = 0
                return self.store.replace(res, obj)
            return self.store.delete(res, namespace, name)

    def _delete_namespace(self, res, old, options, dry_run):
        """The namespace storage's Delete: the first DELETE only marks the namespace Terminating (the
        namespace controller empties it and then finalizes it); a later one deletes it once
        spec.finalizers and metadata.finalizers are empty."""
        obj = copy.deepcopy(old)
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            if (obj.get("spec") or {}).get("finalizers") or meta.get("finalizers") or dry_run:
                return obj
            return self.store.delete(res, "", meta["name"])
        meta["deletionTimestamp"] = now_rfc3339()
        obj.setdefault("status", {})["phase"] = "Terminating"
        # orphan / foregroundDeletion follow orphanDependents, else propagationPolicy, else stay as they are.
        finalizers = list(meta.get("finalizers") or [])
        orphan_dependents = options.get("orphanDependents")
        policy = options.get("propagationPolicy")
        for finalizer, wanted in (("orphan", orphan_dependents if orphan_dependents is not None else
                                   policy == "Orphan" if policy else "orphan" in finalizers),
                                  ("foregroundDeletion", orphan_dependents is False if orphan_dependents is not None
                                   else policy == "Foreground" if policy else "foregroundDeletion" in finalizers)):
            if wanted and finalizer not in finalizers:
                finalizers.append(finalizer)
            elif not wanted and finalizer in finalizers:
                finalizers.remove(finalizer)
        if finalizers:
            meta["finalizers"] = finalizers
        else:
            meta.pop("finalizers", None)
        if dry_run:
            return obj
        return self.store.replace(res, obj)

    def finish_pod_deletion(self, pod):
        """What the kubelet does once the containers stopped: delete with grace 0 (finalizers still hold it)."""
        res = BY_KEY[("", "pods")]
        meta = pod["metadata"]
        current = self.store.peek(res, meta["namespace"], meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        if current["metadata"].get("finalizers"):
            obj = copy.deepcopy(current)
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            self.store.replace(res, obj)
            return
        self.store.delete(res, meta["namespace"], meta["name"])

    # ------------------------------------------------------------- events
    @staticmethod
    def _event_key(event):
        return (event["metadata"].get("namespace", ""), (event.get("involvedObject") or {}).get("uid"),
                event.get("reason"), event.get("message"))

    def _index_event(self, res, kind, obj, old):
        if res.key != ("", "events"):
            return
        name = obj["metadata"]["name"]
        if kind == "ADDED":
            self.event_order[(obj["metadata"].get("namespace", ""), name)] = int(obj["metadata"]["resourceVersion"])
        order = self.event_order.get((obj["metadata"].get("namespace", ""), name), 0)
        for previous in (old, obj if kind == "DELETED" else None):
            if previous is not None:
                names = self.event_index.get(self._event_key(previous)) or {}
                names.pop(name, None)
                if not names:
                    self.event_index.pop(self._event_key(previous), None)
        if kind == "DELETED":
            self.event_order.pop((obj["metadata"].get("namespace", ""), name), None)
        else:
            self.event_index.setdefault(self._event_key(obj), {})[name] = order

    def record_event(self, involved, reason, message, kind="Normal", component="kubelet", host=None):
        res = BY_KEY[("", "events")]
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        stamp = now_rfc3339()
        # The first stored event (in creation order) of this object with this reason and message.
        names = self.event_index.get((namespace, meta.get("uid"), reason, message))
        existing = self.store.peek(res, namespace, min(names, key=names.get)) if names else None
        if existing is not None:
            obj = copy.deepcopy(existing)
            obj["count"] = obj.get("count", 1) + 1
            obj["lastTimestamp"] = stamp
            self.store.replace(res, obj)
            return
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"name": f"{meta['name']}.{random.getrandbits(64):016x}"[:253],
                              "namespace": namespace},
                 "involvedObject": {"kind": involved["kind"], "namespace": meta.get("namespace", ""),
                                    "name": meta["name"], "uid": meta.get("uid", ""),
                                    "apiVersion": involved["apiVersion"],
                                    "resourceVersion": meta.get("resourceVersion", "")},
                 "reason": reason, "message": message, "type": kind, "count": 1,
                 "source": {"component": component, **({"host": host} if host else {})},
                 "firstTimestamp": stamp, "lastTimestamp": stamp, "eventTime": None,
                 "reportingComponent": component, "reportingInstance": host or ""}
        if not event["involvedObject"]["namespace"]:
            event["involvedObject"].pop("namespace")
        # NamespaceLifecycle refuses events too: none into a missing or Terminating namespace.
        ns = self.store.peek(BY_KEY[("", "namespaces")], "", namespace)
        if ns is None or (ns.get("status") or {}).get("phase") == "Terminating":
            return
        self.store.create(res, event)


def _without_times(obj):
    """obj without managedFields timestamps and resourceVersion, for 'did anything change'."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta["managedFields"] = [{k: v for k, v in entry.items() if k != "time"}
                             for entry in meta.get("managedFields") or []]
    return dict(obj, metadata=meta)


def _spec_of(obj):
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def qos_class(spec):
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    requests_all = limits_all = True
    any_set = False
    for container in containers:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        if limits or requests:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits:
                limits_all = False
            if requests.get(name, limits.get(name)) != limits.get(name):
                requests_all = False
    if not any_set:
        return "BestEffort"
    if limits_all and requests_all:
        return "Guaranteed"
    return "Burstable"


def load(path):
    with open(path, encoding="utf-8") as handle:
        description = yaml.safe_load(handle) or {}
    return Cluster(description, os.path.dirname(os.path.abspath(path)))


def owned_by(obj, owner):
    return any(ref.get("uid") == owner["metadata"]["uid"] for ref in obj["metadata"].get("ownerReferences") or [])


def selector_matches(selector, obj):
    return label_selector_object_match(selector, obj["metadata"].get("labels"))
