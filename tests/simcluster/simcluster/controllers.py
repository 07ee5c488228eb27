"""Controllers of the simulated cluster, run as one loop over the store.

Each is a function from the store's state to writes through the API's write
path, as kwok's stages are data-driven steps (STYLE.md). Behaviour sources:
- DaemonSet controller: kubernetes.io/docs/concepts/workloads/controllers/daemonset/
  ("How Daemon Pods are scheduled", the tolerations it adds, rolling update
  with maxUnavailable) and kubectl's rollout status for DaemonSets.
- ReplicaSet / Deployment: workloads/controllers docs (simplified: a new
  template replaces the old ReplicaSet at once).
- PodDisruptionBudget status: concepts/workloads/pods/disruptions/.
- Scheduler: concepts/scheduling-eviction (filters NodeUnschedulable,
  TaintToleration, NodeAffinity, NodeResourcesFit in the default profile's
  order; the FailedScheduling message's "0/N nodes are available" histogram).
- Node lifecycle: taint-nodes-by-condition (node.kubernetes.io/unschedulable,
  not-ready, unreachable) and the node lifecycle controller
  (pkg/controller/nodelifecycle/node_lifecycle_controller.go, monitorNodeHealth
  and tryUpdateNodeHealth): every --node-monitor-period it marks the conditions
  of a node whose kubelet has been silent longer than
  --node-monitor-grace-period Unknown ("NodeStatusUnknown", "Kubelet stopped
  posting node status.", the last heartbeat kept) and taints it unreachable
  (NoSchedule as the Ready condition changes, NoExecute on its pass, which is
  also when a node Ready again loses it).
- Taint eviction (pkg/controller/tainteviction/taint_eviction.go,
  processPodOnNode and addConditionAndDeletePod): a pod on a node with
  NoExecute taints it does not all tolerate is deleted at once; one that
  tolerates them is deleted after the smallest tolerationSeconds of the
  tolerations used, counted from when the controller saw it there (none:
  never); the DisruptionTarget condition (DeletionByTaintManager) comes first,
  and TaintManagerEviction events mark the deletion or its cancelling when the
  taints go first.
- Namespace deletion: the namespace controller's deleter
  (pkg/controller/namespace/deletion/namespaced_resources_deleter.go: phase
  Terminating, a background delete of every namespaced resource that can be
  deleted, pods given their grace period as an estimate, objects held by
  finalizers counted, then "kubernetes" removed through namespaces/finalize
  once nothing is left) and its conditions (status_condition_utils.go: the
  five NamespaceDeletion*/Namespace*Remaining conditions, their reasons and
  messages).
- Kubelet: pod lifecycle (phases, container states, restart policy with
  CrashLoopBackOff: the restart back-off of kuberuntime_manager.go doBackOff
  over client-go's flowcontrol.Backoff, see CrashLoopBackOff below),
  termination messages (FallbackToLogsOnError), device
  plugin registration and device allocation (concepts/extend-kubernetes/
  compute-storage-net/device-plugins/): a resource's allocatable drops to 0
  when its plugin stops, and a pod is refused with UnexpectedAdmissionError
  when the devices it was scheduled for are not there. A kubelet that the
  node-not-ready fault takes away does nothing on its node and posts nothing
  (no node or pod status) until it is back.
Durations come from cluster.timing (cluster.py: the compressed or the real
profile).
"""

import calendar
import copy
import hashlib
import json
import math
import time

from . import gpus as gpu_model
from . import programs
from .admission import quantity
from .cluster import owned_by, random_suffix, selector_matches
from .dra import AllocationError
from .dra_controllers import PLUGIN_DIRS, SLICES, DraMixin
from .resources import BY_KEY, RESOURCES
from .selectors import pod_matches_node_affinity, tolerates, untolerated_taints
from .store import ApiError, now_rfc3339

PODS = BY_KEY[("", "pods")]
NODES = BY_KEY[("", "nodes")]
NAMESPACES = BY_KEY[("", "namespaces")]
DAEMONSETS = BY_KEY[("apps", "daemonsets")]
REPLICASETS = BY_KEY[("apps", "replicasets")]
DEPLOYMENTS = BY_KEY[("apps", "deployments")]
PDBS = BY_KEY[("policy", "poddisruptionbudgets")]
CONFIGMAPS = BY_KEY[("", "configmaps")]
REVISIONS = BY_KEY[("apps", "controllerrevisions")]
DS_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# The namespace controller's conditions in the order it adds them, each with the reason and
# message it has while nothing is wrong (status_condition_utils.go).
NAMESPACE_CONDITIONS = (
    ("NamespaceDeletionDiscoveryFailure", "ResourcesDiscovered", "All resources successfully discovered"),
    ("NamespaceDeletionGroupVersionParsingFailure", "ParsedGroupVersions",
     "All legacy kube types successfully parsed"),
    ("NamespaceDeletionContentFailure", "ContentDeleted",
     "All content successfully deleted, may be waiting on finalization"),
    ("NamespaceContentRemaining", "ContentRemoved", "All content successfully removed"),
    ("NamespaceFinalizersRemaining", "ContentHasNoFinalizers", "All content-preserving finalizers finished"),
)
# How long the deleter expects objects held by finalizers to take (finalizerEstimateSeconds).
FINALIZER_ESTIMATE = 15


def _hash(value):
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:10]


def terminal(pod):
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def pod_ready(pod):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def pod_requests(spec):
    """Effective requests: max(sum over containers, max over init containers) plus overhead."""
    total = {}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, 0) + quantity(value)
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, 0), quantity(value))
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + quantity(value)
    return total


def _percent(value, total, round_up=True):
    if isinstance(value, str) and value.endswith("%"):
        amount = total * int(value[:-1]) / 100
        return math.ceil(amount) if round_up else math.floor(amount)
    return int(value)


class Controllers(DraMixin):
    def __init__(self, cluster):
        self.cluster = cluster
        self.store = cluster.store
        self.timing = cluster.timing
        self.pods = {}
        self.plugins = {}
        self.backoff = {}
        self.ip_counter = {}
        self.heartbeats = {}
        self.next_monitor = 0.0
        self.evictions = {}
        # DaemonSet uid -> the resourceVersions its last pass read, when that pass wrote nothing.
        self.ds_settled = {}
        # Node name -> its resourceVersion when node_lifecycle's last pass over it wrote nothing.
        self.nodes_settled = {}
        # The kubelets' pass visits what may sync differently since the last one (see kubelets): the
        # pods and nodes written since (kept by the store listener below), the pods whose last sync
        # was not steady, and the nodes whose device plugin waits to register. None: every pod and node.
        self.kubelet_pods_written = None
        self.kubelet_nodes_written = set()
        self.kubelet_unsteady = set()
        self.kubelet_pods_on_node = {}
        self.plugins_pending = set()
        self.kubelet_faults = False
        # DRA: the pods with spec.resourceClaims (the claim controller's queue), NVIDIA's DRA kubelet
        # plugin by node, and when a pod whose claims could not be prepared is tried again.
        self.dra_pods = set()
        self.dra_nodes = {}
        self.dra_retry = {}
        self.dra_active = False
        self.store.listeners.append(self._kubelet_written)

    # ------------------------------------------------------------ helpers
    def _set_status(self, res, obj, status, component, copy_back=False):
        """Write ``status``; with ``copy_back``, return the object as stored. Without, ``obj`` when its status
        is already ``status`` or the write is refused, else None."""
        if obj.get("status") == status:
            return obj
        meta = obj["metadata"]
        try:
            return self.cluster.update(res, meta.get("namespace", ""), meta["name"],
                                       dict(obj, status=status), manager=component, subresource="status",
                                       internal=True, copy_back=copy_back)
        except ApiError:
            return obj

    def _event(self, obj, reason, message, kind="Normal", component="kubelet", host=None):
        self.cluster.record_event(obj, reason, message, kind, component, host)

    def tick(self):
        with self.store.lock:
            self.node_lifecycle()
            self.taint_eviction()
            self.namespaces()
            self.garbage_collect()
            self.resource_claims()
            self.deployments()
            self.replicasets()
            self.daemonsets()
            self.disruption_budgets()
            self.schedule()
            self.kubelets()

    # ------------------------------------------------------- node lifecycle
    def kubelet_away(self, name):
        """Whether the node-not-ready fault has taken this node's kubelet away."""
        return self.cluster.faults.active("node-not-ready", node=name) is not None

    def node_lifecycle(self):
        """The kubelets' node conditions and the node lifecycle controller. A kubelet posts its
        conditions while it runs, each tick being a heartbeat (a real one renews its Lease every
        10 s, so its last heartbeat may lie up to that much before it stopped). The controller
        looks every nodeMonitorPeriod: a node silent for longer than nodeMonitorGracePeriod gets
        all its conditions Unknown and the unreachable NoExecute taint; the unreachable NoSchedule
        taint follows the Ready condition at once (taint-nodes-by-condition acts on node updates)."""
        now = time.monotonic()
        monitor = now >= self.next_monitor
        if monitor:
            self.next_monitor = now + self.timing["nodeMonitorPeriod"]
        for node in list(self.store.peek_list(NODES)):
            name = node["metadata"]["name"]
            away = self.kubelet_away(name)
            if not away or name not in self.heartbeats:
                self.heartbeats[name] = now
            # A node whose kubelet runs, which the last pass left as it was, gets the same conditions and
            # taints again (nothing else they depend on changes while its kubelet runs): passed over
            # until the node is written. Not one still tainted unreachable: the controller's next
            # monitor pass takes the NoExecute taint away.
            seen = node["metadata"]["resourceVersion"]
            if not away and self.nodes_settled.get(name) == seen:
                continue
            before = self.store.rv
            self._node_lifecycle(node, name, away, now, monitor)
            if not away and self.store.rv == before and not any(
                    taint.get("key") == "node.kubernetes.io/unreachable" for taint in node["spec"].get("taints") or []):
                self.nodes_settled[name] = seen
            else:
                self.nodes_settled.pop(name, None)

    def _node_lifecycle(self, node, name, away, now, monitor):
        """One node's pass of node_lifecycle."""
        # The status is copied (shallowly: _set_status's update copies it) only to be written.
        status = node["status"]
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        wanted = None
        if not away:
            # The kubelet posts its conditions.
            wanted = [("MemoryPressure", "False", "KubeletHasSufficientMemory",
                       "kubelet has sufficient memory available"),
                      ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                      ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                      ("Ready", "True", "KubeletReady", "kubelet is posting ready status")]
        elif monitor and now - self.heartbeats[name] > self.timing["nodeMonitorGracePeriod"]:
            wanted = [(t, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
                      for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
        if wanted:
            new = []
            for ctype, value, reason, message in wanted:
                old = conditions.get(ctype)
                if old and old["status"] == value and old["reason"] == reason:
                    new.append(old)
                else:
                    stamp = now_rfc3339()
                    # The controller keeps the last heartbeat it saw; the kubelet stamps its own.
                    heartbeat = old.get("lastHeartbeatTime", stamp) if old and value == "Unknown" else stamp
                    new.append({"type": ctype, "status": value, "reason": reason, "message": message,
                                "lastHeartbeatTime": heartbeat, "lastTransitionTime": stamp})
            if new != status.get("conditions"):
                node = self._set_status(NODES, node, dict(status, conditions=new),
                                        "kubelet" if not away else "node-controller", copy_back=True)
        ready = next((c["status"] for c in node["status"].get("conditions") or [] if c["type"] == "Ready"),
                     None)
        self._node_taints(node, ready, monitor)

    def _node_taints(self, node, ready, monitor):
        name = node["metadata"]["name"]
        old_taints = node["spec"].get("taints") or []
        unreachable = "node.kubernetes.io/unreachable"
        had = {t["effect"] for t in old_taints if t["key"] == unreachable}
        wanted = set()
        if ready == "Unknown":
            wanted.add("NoSchedule")
        # The NoExecute taint changes only on the controller's pass.
        if (ready == "Unknown") if monitor else ("NoExecute" in had):
            wanted.add("NoExecute")
        taints = [t for t in old_taints if t["key"] not in ("node.kubernetes.io/unschedulable", unreachable)]
        if node["spec"].get("unschedulable"):
            taints.append(next((t for t in old_taints if t["key"] == "node.kubernetes.io/unschedulable"),
                               {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                                "timeAdded": now_rfc3339()}))
        for effect in ("NoSchedule", "NoExecute"):
            if effect in wanted:
                taints.append(next((t for t in old_taints if t["key"] == unreachable and t["effect"] == effect),
                                   {"key": unreachable, "effect": effect, "timeAdded": now_rfc3339()}))
        if taints != old_taints:
            obj = copy.deepcopy(node)
            if taints:
                obj["spec"]["taints"] = taints
            else:
                obj["spec"].pop("taints", None)
            self.cluster.update(NODES, "", name, obj, manager="node-lifecycle-controller", internal=True)

    def taint_eviction(self):
        """The taint eviction controller (see the module's docstring)."""
        now = time.monotonic()
        tainted = {n["metadata"]["name"]: [t for t in n["spec"].get("taints") or [] if t["effect"] == "NoExecute"]
                   for n in self.store.peek_list(NODES)}
        if not self.evictions and not any(tainted.values()):
            # No NoExecute taint anywhere and no eviction pending: the pass below would do nothing.
            return
        live = set()
        for pod in list(self.store.peek_list(PODS)):
            uid = pod["metadata"]["uid"]
            live.add(uid)
            taints = tainted.get(pod["spec"].get("nodeName")) or []
            if not taints:
                if self.evictions.pop(uid, None) is not None:
                    self._taint_event(pod, "Cancelling deletion of Pod")
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            used = []
            for taint in taints:
                toleration = next((t for t in pod["spec"].get("tolerations") or [] if tolerates(t, taint)), None)
                if toleration is None:
                    used = None
                    break
                used.append(toleration)
            if used is None:
                wait = 0
            else:
                seconds = [t["tolerationSeconds"] for t in used if t.get("tolerationSeconds") is not None]
                if not seconds:
                    # Tolerated for good: anything scheduled is cancelled.
                    if self.evictions.pop(uid, None) is not None:
                        self._taint_event(pod, "Cancelling deletion of Pod")
                    continue
                wait = max(0, min(seconds))
            since = self.evictions.setdefault(uid, now)
            if now - since < wait:
                continue
            del self.evictions[uid]
            self._taint_event(pod, "Marking for deletion Pod")
            status = copy.deepcopy(pod.get("status") or {})
            conditions = [c for c in status.get("conditions") or [] if c["type"] != "DisruptionTarget"]
            status["conditions"] = conditions + [
                {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": now_rfc3339(), "reason": "DeletionByTaintManager",
                 "message": "Taint manager: deleting due to NoExecute taint"}]
            self._set_status(PODS, pod, status, "taint-eviction-controller")
            try:
                self.cluster.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
            except ApiError:
                pass
        for uid in list(self.evictions):
            if uid not in live:
                del self.evictions[uid]

    def _taint_event(self, pod, text):
        """The controller's events name the pod by a reference without its uid."""
        meta = pod["metadata"]
        ref = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
        self._event(ref, "TaintManagerEviction", f"{text} {meta['namespace']}/{meta['name']}",
                    component="taint-eviction-controller")

    # -------------------------------------------------- namespaces and GC
    def namespaces(self):
        for ns in list(self.store.peek_list(NAMESPACES)):
            if ns["metadata"].get("deletionTimestamp"):
                self._delete_namespace_content(ns["metadata"]["name"])

    def _delete_namespace_content(self, name):
        """One pass of the namespace deleter over a deleted namespace; it runs again every tick
        until the namespace is finalized (the real controller requeues after its estimate)."""
        ns = self.store.peek(NAMESPACES, "", name)
        if (ns.get("status") or {}).get("phase") != "Terminating":
            self._set_status(NAMESPACES, ns, dict(copy.deepcopy(ns.get("status") or {}), phase="Terminating"),
                             "kube-controller-manager")
            ns = self.store.peek(NAMESPACES, "", name)
            if ns is None:
                return
        if not (ns.get("spec") or {}).get("finalizers"):
            return
        deleted_at = _epoch(ns["metadata"]["deletionTimestamp"])
        estimate, remaining, held, errors = 0, {}, {}, []
        for res in RESOURCES:
            if not res.namespaced or "delete" not in res.verbs:
                continue
            local = 0
            if res is PODS:
                # Pods get their grace period, counted from the namespace's deletion.
                local = max((p["spec"].get("terminationGracePeriodSeconds") or 0
                             for p in self.store.peek_list(PODS, name) if not terminal(p)), default=0)
                if time.time() - deleted_at >= local:
                    local = 0
            for obj in list(self.store.peek_list(res, name)):
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    self.cluster.delete(res, name, obj["metadata"]["name"], {"propagationPolicy": "Background"})
                except ApiError:
                    pass
            items = self.store.peek_list(res, name)
            if not items:
                continue
            remaining[(res.plural, res.group)] = len(items)
            finalizers = {}
            for item in items:
                for finalizer in item["metadata"].get("finalizers") or []:
                    finalizers[finalizer] = finalizers.get(finalizer, 0) + 1
            if not local and not finalizers:
                errors.append(f"unexpected items still remain in namespace: {name} for gvr: "
                              f"{res.group}/{res.version}, Resource={res.plural}")
                continue
            estimate = max(estimate, local or FINALIZER_ESTIMATE)
            for finalizer, count in finalizers.items():
                held[finalizer] = held.get(finalizer, 0) + count
        failing = {}
        if remaining:
            failing["NamespaceContentRemaining"] = ("SomeResourcesRemain", "Some resources are remaining: " + ", ".join(
                sorted(f"{plural}.{group} has {count} resource instances"
                       for (plural, group), count in remaining.items())))
        if held:
            failing["NamespaceFinalizersRemaining"] = (
                "SomeFinalizersRemain", "Some content in the namespace has finalizers remaining: " + ", ".join(
                    sorted(f"{finalizer} in {count} resource instances" for finalizer, count in held.items())))
        if errors:
            failing["NamespaceDeletionContentFailure"] = (
                "ContentDeletionFailed",
                f"Failed to delete all resource types, {len(errors)} remaining: {', '.join(sorted(errors))}")
        status = copy.deepcopy(ns.get("status") or {})
        conditions = status.setdefault("conditions", [])
        stamp = now_rfc3339()
        for ctype, ok_reason, ok_message in NAMESPACE_CONDITIONS:
            value, (reason, message) = ("True", failing[ctype]) if ctype in failing else ("False",
                                                                                          (ok_reason, ok_message))
            old = next((c for c in conditions if c["type"] == ctype), None)
            if old is None:
                conditions.append({"type": ctype, "status": value, "lastTransitionTime": stamp, "reason": reason,
                                   "message": message})
            elif (old["status"], old.get("reason"), old.get("message")) != (value, reason, message):
                if old["status"] != value:
                    old["lastTransitionTime"] = stamp
                old.update(status=value, reason=reason, message=message)
        ns = self._set_status(NAMESPACES, ns, status, "kube-controller-manager", copy_back=True)
        if estimate or errors or self.store.peek(NAMESPACES, "", name) is None:
            return
        # The content is gone: finalize, removing this controller's token from spec.finalizers.
        finalized = copy.deepcopy(ns)
        finalized["spec"]["finalizers"] = sorted(set(f for f in ns["spec"]["finalizers"] if f != "kubernetes"))
        try:
            self.cluster.update(NAMESPACES, "", name, finalized, manager="kube-controller-manager",
                                subresource="finalize", internal=True)
        except ApiError:
            pass

    def garbage_collect(self):
        owners = set()
        for res in (DAEMONSETS, REPLICASETS, DEPLOYMENTS):
            owners |= {o["metadata"]["uid"] for o in self.store.peek_list(res)}
        foreground = {}
        orphaning = {}
        for res in (DAEMONSETS, REPLICASETS, DEPLOYMENTS, NAMESPACES):
            for owner in self.store.peek_list(res):
                finalizers = owner["metadata"].get("finalizers") or []
                if "foregroundDeletion" in finalizers:
                    foreground[owner["metadata"]["uid"]] = (res, owner)
                if "orphan" in finalizers:
                    orphaning[owner["metadata"]["uid"]] = (res, owner)
        dependents_left = set()
        orphaning_uids, foreground_uids = set(orphaning), set(foreground)
        for res in (PODS, REPLICASETS, BY_KEY[("apps", "controllerrevisions")]):
            for obj in list(self.store.peek_list(res)):
                refs = obj["metadata"].get("ownerReferences") or []
                if not refs:
                    continue
                uids = {r["uid"] for r in refs}
                if uids & orphaning_uids:
                    changed = copy.deepcopy(obj)
                    changed["metadata"]["ownerReferences"] = [r for r in refs if r["uid"] not in orphaning]
                    self.cluster.update(res, obj["metadata"].get("namespace", ""), obj["metadata"]["name"],
                                        changed, manager="generic-garbage-collector", internal=True)
                    continue
                if uids & foreground_uids:
                    dependents_left |= uids & foreground_uids
                if not uids & owners or uids & foreground_uids:
                    if not obj["metadata"].get("deletionTimestamp"):
                        # A dependent of an owner deleted in the foreground is deleted in the
                        # foreground too, so the owner waits for the whole tree (garbagecollector.go,
                        # attemptToDeleteItem; concepts/architecture/garbage-collection/).
                        options = {"propagationPolicy": "Foreground"} if uids & foreground_uids \
                            and res is REPLICASETS else None
                        try:
                            self.cluster.delete(res, obj["metadata"].get("namespace", ""), obj["metadata"]["name"],
                                                options)
                        except ApiError:
                            pass
        for table, name in ((foreground, "foregroundDeletion"), (orphaning, "orphan")):
            for uid, (res, owner) in table.items():
                if name == "foregroundDeletion" and uid in dependents_left:
                    continue
                changed = copy.deepcopy(owner)
                changed["metadata"]["finalizers"] = [f for f in owner["metadata"]["finalizers"] if f != name]
                self.cluster.update(res, owner["metadata"].get("namespace", ""), owner["metadata"]["name"], changed,
                                    manager="generic-garbage-collector", internal=True)

    # ---------------------------------------------- Deployments, ReplicaSets
    def deployments(self):
        for deploy in list(self.store.peek_list(DEPLOYMENTS)):
            if deploy["metadata"].get("deletionTimestamp"):
                continue
            spec = deploy["spec"]
            template_hash = _hash(spec["template"])
            ns = deploy["metadata"]["namespace"]
            owned = [rs for rs in self.store.peek_list(REPLICASETS, ns) if owned_by(rs, deploy)]
            current = next((rs for rs in owned
                            if rs["metadata"].get("labels", {}).get("pod-template-hash") == template_hash), None)
            if current is None:
                template = copy.deepcopy(spec["template"])
                template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = template_hash
                selector = copy.deepcopy(spec["selector"])
                selector.setdefault("matchLabels", {})["pod-template-hash"] = template_hash
                rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                      "metadata": {"name": f"{deploy['metadata']['name']}-{template_hash}", "namespace": ns,
                                   "labels": template["metadata"]["labels"],
                                   "ownerReferences": [_owner_ref(deploy)]},
                      "spec": {"replicas": spec.get("replicas", 1), "selector": selector, "template": template}}
                try:
                    current = self.cluster.create(REPLICASETS, ns, rs, manager="kube-controller-manager",
                                                  internal=True)
                except ApiError:
                    continue
            elif current["spec"].get("replicas") != spec.get("replicas", 1):
                changed = copy.deepcopy(current)
                changed["spec"]["replicas"] = spec.get("replicas", 1)
                current = self.cluster.update(REPLICASETS, ns, current["metadata"]["name"], changed,
                                              manager="kube-controller-manager", internal=True)
            for rs in owned:
                if rs["metadata"]["uid"] != current["metadata"]["uid"] and rs["spec"].get("replicas"):
                    changed = copy.deepcopy(rs)
                    changed["spec"]["replicas"] = 0
                    self.cluster.update(REPLICASETS, ns, rs["metadata"]["name"], changed,
                                        manager="kube-controller-manager", internal=True)
            rs_status = current.get("status") or {}
            replicas = spec.get("replicas", 1)
            available = rs_status.get("availableReplicas", 0)
            stamp = now_rfc3339()
            status = {"observedGeneration": deploy["metadata"]["generation"],
                      "replicas": sum((r.get("status") or {}).get("replicas", 0) for r in owned) or
                      rs_status.get("replicas", 0),
                      "updatedReplicas": rs_status.get("replicas", 0),
                      "readyReplicas": rs_status.get("readyReplicas", 0),
                      "availableReplicas": available,
                      "unavailableReplicas": max(0, replicas - available)}
            status = {k: v for k, v in status.items() if v or k == "observedGeneration"}
            old_conditions = {c["type"]: c for c in (deploy.get("status") or {}).get("conditions") or []}
            conditions = []
            for ctype, ok, reason, message in (
                    ("Available", available >= replicas, "MinimumReplicasAvailable" if available >= replicas
                     else "MinimumReplicasUnavailable", "Deployment has minimum availability." if available >=
                     replicas else "Deployment does not have minimum availability."),
                    ("Progressing", True, "NewReplicaSetAvailable" if available >= replicas
                     else "ReplicaSetUpdated", f'ReplicaSet "{current["metadata"]["name"]}" has successfully '
                                               "progressed." if available >= replicas else
                     f'ReplicaSet "{current["metadata"]["name"]}" is progressing.')):
                value = "True" if ok else "False"
                old = old_conditions.get(ctype)
                if old and old["status"] == value and old["reason"] == reason:
                    conditions.append(old)
                else:
                    conditions.append({"type": ctype, "status": value, "reason": reason, "message": message,
                                       "lastUpdateTime": stamp, "lastTransitionTime": stamp})
            status["conditions"] = conditions
            self._set_status(DEPLOYMENTS, deploy, status, "kube-controller-manager")

    def replicasets(self):
        for rs in list(self.store.peek_list(REPLICASETS)):
            ns = rs["metadata"]["namespace"]
            pods = [p for p in self.store.peek_list(PODS, ns) if owned_by(p, rs)]
            active = [p for p in pods if not terminal(p) and not p["metadata"].get("deletionTimestamp")]
            want = 0 if rs["metadata"].get("deletionTimestamp") else rs["spec"].get("replicas", 1)
            for _missing in range(want - len(active)):
                self._create_pod_from_template(rs, rs["spec"]["template"], f"{rs['metadata']['name']}-",
                                               REPLICASETS)
            extra = sorted(active, key=lambda p: (bool(p["spec"].get("nodeName")), pod_ready(p)))
            for pod in extra[:max(0, len(active) - want)]:
                try:
                    self.cluster.delete(PODS, ns, pod["metadata"]["name"])
                except ApiError:
                    pass
            ready = [p for p in active if pod_ready(p)]
            status = {"replicas": len(active), "fullyLabeledReplicas": len(active), "readyReplicas": len(ready),
                      "availableReplicas": len(ready), "observedGeneration": rs["metadata"]["generation"]}
            status = {k: v for k, v in status.items() if v or k in ("replicas", "observedGeneration")}
            self._set_status(REPLICASETS, rs, status, "kube-controller-manager")

    def _create_pod_from_template(self, owner, template, prefix, owner_res, extra_labels=None, node=None):
        ns = owner["metadata"]["namespace"]
        key = owner["metadata"]["uid"]
        if self.backoff.get(key, 0) > time.monotonic():
            return None
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": prefix + random_suffix(), "namespace": ns,
                            "labels": dict((template.get("metadata") or {}).get("labels") or {},
                                           **(extra_labels or {})),
                            "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                            "ownerReferences": [_owner_ref(owner)]},
               "spec": copy.deepcopy(template.get("spec") or {})}
        if not pod["metadata"]["annotations"]:
            pod["metadata"].pop("annotations")
        if node is not None:
            spec = pod["spec"]
            affinity = spec.setdefault("affinity", {})
            affinity["nodeAffinity"] = dict(affinity.get("nodeAffinity") or {}, **{
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}})
            tolerations = spec.setdefault("tolerations", [])
            for tol in DS_TOLERATIONS:
                if not any(t.get("key") == tol["key"] and t.get("effect") == tol["effect"] for t in tolerations):
                    tolerations.append(dict(tol))
        try:
            return self.cluster.create(PODS, ns, pod, manager="kube-controller-manager", internal=True)
        except ApiError as err:
            self._event(owner, "FailedCreate", f"Error creating: {err.message}", "Warning",
                        "daemonset-controller" if owner_res is DAEMONSETS else "replicaset-controller")
            self.backoff[key] = time.monotonic() + 2.0
            return None

    # ------------------------------------------------------------ DaemonSets
    def _ds_should_run(self, ds, node):
        return self._ds_placement(ds, node)[0]

    @staticmethod
    def _ds_placement(ds, node):
        """(should run, should continue running), as the DaemonSet controller's NodeShouldRunDaemonPod:
        an untolerated NoSchedule taint keeps new pods off but leaves a running one; NoExecute evicts."""
        spec = ds["spec"]["template"].get("spec") or {}
        tolerations = (spec.get("tolerations") or []) + DS_TOLERATIONS
        if not pod_matches_node_affinity(spec, node):
            return False, False
        taints = node["spec"].get("taints")
        if untolerated_taints(tolerations, taints, ("NoExecute",)):
            return False, False
        return not untolerated_taints(tolerations, taints, ("NoSchedule",)), True

    def _ds_history(self, ds, template_hash):
        """A ControllerRevision per template, named after its hash; the current one has the highest
        revision (daemon_controller's constructHistory: a template seen before gets its revision
        raised; `kubectl rollout history` reads these)."""
        ns = ds["metadata"]["namespace"]
        owned = [r for r in self.store.peek_list(REVISIONS, ns) if owned_by(r, ds)]
        top = max((r.get("revision", 0) for r in owned), default=0)
        current = next((r for r in owned if (r["metadata"].get("labels") or {}).get("controller-revision-hash")
                        == template_hash), None)
        try:
            if current is None:
                template = dict(copy.deepcopy(ds["spec"]["template"]), **{"$patch": "replace"})
                labels = dict((template.get("metadata") or {}).get("labels") or {},
                              **{"controller-revision-hash": template_hash})
                self.cluster.create(REVISIONS, ns, {
                    "apiVersion": "apps/v1", "kind": "ControllerRevision",
                    "metadata": {"name": f"{ds['metadata']['name']}-{template_hash}", "namespace": ns,
                                 "labels": labels, "ownerReferences": [_owner_ref(ds)]},
                    "data": {"spec": {"template": template}}, "revision": top + 1},
                    manager="kube-controller-manager", internal=True)
            elif current.get("revision", 0) < top:
                self.cluster.update(REVISIONS, ns, current["metadata"]["name"], dict(current, revision=top + 1),
                                    manager="kube-controller-manager", internal=True)
        except ApiError:
            pass

    def daemonsets(self):
        nodes = list(self.store.peek_list(NODES))
        for ds in list(self.store.peek_list(DAEMONSETS)):
            if ds["metadata"].get("deletionTimestamp"):
                continue
            ns = ds["metadata"]["namespace"]
            # A DaemonSet whose last pass wrote nothing is passed over until it, a node, or a pod or
            # ControllerRevision of its namespace is written (the pass reads nothing else but the
            # create back-off, which keeps it from being passed over).
            inputs = (ds["metadata"]["resourceVersion"], self.store.written.get(NODES.key),
                      self.store.written.get((PODS.key, ns)), self.store.written.get((REVISIONS.key, ns)))
            if self.ds_settled.get(ds["metadata"]["uid"]) == inputs:
                continue
            before = self.store.rv
            self._daemonset(ds, ns, nodes)
            settled = self.store.rv == before and self.backoff.get(ds["metadata"]["uid"], 0) <= time.monotonic()
            self.ds_settled[ds["metadata"]["uid"]] = inputs if settled else None

    def _daemonset(self, ds, ns, nodes):
        """One DaemonSet's pass: its pods on the nodes it should run on, its rollout, its status."""
        template_hash = _hash(ds["spec"]["template"])
        self._ds_history(ds, template_hash)
        pods = [p for p in self.store.peek_list(PODS, ns) if owned_by(p, ds)]
        by_node = {}
        for pod in pods:
            target = pod["spec"].get("nodeName") or _pinned_node(pod)
            by_node.setdefault(target, []).append(pod)
        strategy = ds["spec"].get("updateStrategy") or {}
        desired = [n for n in nodes if self._ds_should_run(ds, n)]
        max_unavailable = max(1, _percent((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1),
                                          len(desired))) if strategy.get("type") == "RollingUpdate" else 0
        desired_names = {n["metadata"]["name"] for n in desired}
        unavailable = 0
        for node in desired:
            live = [p for p in by_node.get(node["metadata"]["name"], [])
                    if not p["metadata"].get("deletionTimestamp")]
            if not live or not any(pod_ready(p) for p in live):
                unavailable += 1
        for node in desired:
            name = node["metadata"]["name"]
            live = [p for p in by_node.get(name, []) if not p["metadata"].get("deletionTimestamp")]
            failed = [p for p in live if p.get("status", {}).get("phase") == "Failed"]
            for pod in failed:
                self._event(ds, "FailedDaemonPod", f"Found failed daemon pod {ns}/{pod['metadata']['name']} on "
                                                   f"node {name}, will try to kill it", "Warning",
                            "daemonset-controller")
                self.cluster.delete(PODS, ns, pod["metadata"]["name"])
            live = [p for p in live if p not in failed]
            if not live and not any(p["metadata"].get("deletionTimestamp") for p in by_node.get(name, [])):
                created = self._create_pod_from_template(
                    ds, ds["spec"]["template"], f"{ds['metadata']['name']}-", DAEMONSETS,
                    {"controller-revision-hash": template_hash, "pod-template-generation":
                     str(ds["metadata"]["generation"])}, node=name)
                if created:
                    self._event(ds, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}",
                                component="daemonset-controller")
                continue
            old = [p for p in live if p["metadata"].get("labels", {}).get("controller-revision-hash")
                   != template_hash]
            if old and strategy.get("type") == "RollingUpdate":
                for pod in old:
                    if not pod_ready(pod):
                        self.cluster.delete(PODS, ns, pod["metadata"]["name"])
                    elif unavailable < max_unavailable:
                        unavailable += 1
                        self.cluster.delete(PODS, ns, pod["metadata"]["name"])
                        self._event(ds, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}",
                                    component="daemonset-controller")
        keep = {n["metadata"]["name"] for n in nodes if self._ds_placement(ds, n)[1]}
        for name, pods_there in by_node.items():
            if name not in desired_names and name not in keep:
                for pod in pods_there:
                    if not pod["metadata"].get("deletionTimestamp"):
                        self.cluster.delete(PODS, ns, pod["metadata"]["name"])
        pods = [p for p in self.store.peek_list(PODS, ns) if owned_by(p, ds)
                and not p["metadata"].get("deletionTimestamp")]
        scheduled = {p["spec"].get("nodeName") or _pinned_node(p) for p in pods}
        ready_nodes = {p["spec"].get("nodeName") for p in pods if pod_ready(p)}
        updated = {p["spec"].get("nodeName") or _pinned_node(p) for p in pods
                   if p["metadata"].get("labels", {}).get("controller-revision-hash") == template_hash}
        status = {"currentNumberScheduled": len(scheduled & desired_names),
                  "numberMisscheduled": len(scheduled - desired_names),
                  "desiredNumberScheduled": len(desired_names),
                  "numberReady": len(ready_nodes & desired_names),
                  "observedGeneration": ds["metadata"]["generation"],
                  "updatedNumberScheduled": len(updated & desired_names),
                  "numberAvailable": len(ready_nodes & desired_names),
                  "numberUnavailable": len(desired_names - ready_nodes)}
        status = {k: v for k, v in status.items()
                  if v or k in ("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled",
                                "numberReady")}
        self._set_status(DAEMONSETS, ds, status, "kube-controller-manager")

    # ------------------------------------------------- disruption budgets
    def disruption_budgets(self):
        for pdb in list(self.store.peek_list(PDBS)):
            ns = pdb["metadata"]["namespace"]
            selector = pdb["spec"].get("selector")
            pods = [p for p in self.store.peek_list(PODS, ns) if selector is not None
                    and selector_matches(selector, p) and not terminal(p)
                    and not p["metadata"].get("deletionTimestamp")]
            expected = len(pods)
            healthy = len([p for p in pods if pod_ready(p)])
            spec = pdb["spec"]
            if spec.get("minAvailable") is not None:
                desired = _percent(spec["minAvailable"], expected)
            elif spec.get("maxUnavailable") is not None:
                desired = max(0, expected - _percent(spec["maxUnavailable"], expected))
            else:
                desired = expected
            old = pdb.get("status") or {}
            disrupted = {k: v for k, v in (old.get("disruptedPods") or {}).items()
                         if any(p["metadata"]["name"] == k for p in pods)}
            allowed = max(0, healthy - desired - len(disrupted))
            stamp = now_rfc3339()
            value = "True" if allowed > 0 else "False"
            old_condition = next(iter(old.get("conditions") or []), None)
            condition = old_condition if old_condition and old_condition["status"] == value else {
                "type": "DisruptionAllowed", "status": value,
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods", "message": "",
                "lastTransitionTime": stamp, "observedGeneration": pdb["metadata"]["generation"]}
            condition = dict(condition, observedGeneration=pdb["metadata"]["generation"])
            status = {"observedGeneration": pdb["metadata"]["generation"], "disruptionsAllowed": allowed,
                      "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
                      "conditions": [condition]}
            if disrupted:
                status["disruptedPods"] = disrupted
            self._set_status(PDBS, pdb, status, "kube-controller-manager")

    # ------------------------------------------------------------ scheduler
    def _used(self):
        used = {}
        for pod in self.store.peek_list(PODS):
            node = pod["spec"].get("nodeName")
            if node and not terminal(pod):
                bucket = used.setdefault(node, {"pods": 0})
                bucket["pods"] += 1
                for name, amount in pod_requests(pod["spec"]).items():
                    bucket[name] = bucket.get(name, 0) + amount
        return used

    def schedule(self):
        pending = [p for p in self.store.peek_list(PODS) if not p["spec"].get("nodeName") and not terminal(p)
                   and not p["metadata"].get("deletionTimestamp")
                   and p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"
                   and not p["spec"].get("schedulingGates")]
        if not pending:
            return
        nodes = list(self.store.peek_list(NODES))
        by_name = {n["metadata"]["name"]: n for n in nodes}
        used = self._used()
        dra_state = None
        for pod in sorted(pending, key=lambda p: (-p["spec"].get("priority", 0),
                                                  p["metadata"]["creationTimestamp"])):
            requests = pod_requests(pod["spec"])
            claims = None
            if pod["spec"].get("resourceClaims"):
                dra_state = dra_state or self.dra_schedule_state()
                claims, refusal = self.dra_prefilter(pod, dra_state)
                if claims is None:
                    # PreEnqueue: a claim not made yet (or not the pod's) keeps the pod in the queue, silently.
                    continue
                if refusal:
                    total = len(nodes)
                    self._unschedulable(pod, f"0/{total} nodes are available: {refusal}. still not schedulable, "
                                             f"preemption: 0/{total} nodes are available: {total} Preemption is not "
                                             "helpful for scheduling.")
                    continue
            try:
                self._schedule_one(pod, nodes, by_name, used, requests, claims, dra_state)
            except AllocationError as err:
                self._unschedulable(pod, f'running "DynamicResources" filter plugin: {err}', "SchedulerError")

    def _schedule_one(self, pod, nodes, by_name, used, requests, claims, dra_state):
        """Filter the nodes for one pod and bind it to the least loaded one, or say why none fits."""
        reasons, unresolvable, fits = {}, {}, []
        # A pod whose node affinity names its nodes (a DaemonSet's pod, a pod pinned with
        # matchFields metadata.name) can fit no other node: those are filtered first, and all
        # nodes only when none fits, for the FailedScheduling message's count over all of them.
        named = _affinity_node_names(pod["spec"])
        if named is not None:
            for name in named:
                node = by_name.get(name)
                if node is not None and not self._filter(pod, node, requests, used.get(name, {}), claims,
                                                         dra_state):
                    fits.append(node)
        for node in nodes if not fits else ():
            why = self._filter(pod, node, requests, used.get(node["metadata"]["name"], {}), claims, dra_state)
            if not why:
                fits.append(node)
                continue
            for text, hopeless in why:
                reasons[text] = reasons.get(text, 0) + 1
                unresolvable[text] = hopeless
        if fits:
            choice = min(fits, key=lambda n: (used.get(n["metadata"]["name"], {}).get("pods", 0),
                                              n["metadata"]["name"]))
            if claims is not None and not self.dra_bind(pod, choice, claims, dra_state):
                return
            self._bind(pod, choice)
            bucket = used.setdefault(choice["metadata"]["name"], {"pods": 0})
            bucket["pods"] += 1
            for name, amount in requests.items():
                bucket[name] = bucket.get(name, 0) + amount
            return
        total = len(nodes)
        histogram = ", ".join(sorted(f"{count} {text}" for text, count in reasons.items()))
        hopeless = sum(c for t, c in reasons.items() if unresolvable[t])
        preempt = ", ".join(sorted(([f"{total - hopeless} No preemption victims found for incoming pod"]
                                    if total - hopeless else []) +
                                   ([f"{hopeless} Preemption is not helpful for scheduling"]
                                    if hopeless else [])))
        # The DynamicResources plugin's PostFilter speaks before preemption for a pod with claims.
        still = "still not schedulable, " if claims is not None else ""
        message = (f"0/{total} nodes are available: {histogram}. {still}preemption: 0/{total} nodes are "
                   f"available: {preempt}." if total else "no nodes available to schedule pods")
        self._unschedulable(pod, message)

    def _filter(self, pod, node, requests, used, claims=None, dra_state=None):
        spec = pod["spec"]
        tolerations = spec.get("tolerations") or []
        if node["spec"].get("unschedulable") and not any(
                (t.get("key") == "node.kubernetes.io/unschedulable" or (not t.get("key") and
                                                                        t.get("operator") == "Exists"))
                and t.get("effect") in (None, "", "NoSchedule") for t in tolerations):
            return [("node(s) were unschedulable", True)]
        bad = untolerated_taints(tolerations, node["spec"].get("taints"))
        if bad:
            taint = bad[0]
            return [(f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}", True)]
        if not pod_matches_node_affinity(spec, node):
            return [("node(s) didn't match Pod's node affinity/selector", True)]
        allocatable = node["status"].get("allocatable") or {}
        out = []
        if used.get("pods", 0) + 1 > int(allocatable.get("pods", "110")):
            out.append(("Too many pods", False))
        for name, amount in sorted(requests.items()):
            if amount <= 0:
                continue
            have = quantity(allocatable.get(name, "0")) or 0
            if used.get(name, 0) + amount > have:
                out.append((f"Insufficient {name}", False))
        if not out and claims is not None:
            why = self.dra_filter(pod, node, claims, dra_state)
            if why:
                out.append((why, True))
        return out

    def _bind(self, pod, node):
        obj = copy.deepcopy(pod)
        obj["spec"]["nodeName"] = node["metadata"]["name"]
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        stored = self.store.replace(PODS, _with_binding_fields(obj))
        status = copy.deepcopy(stored.get("status") or {})
        status["conditions"] = [c for c in status.get("conditions") or [] if c["type"] != "PodScheduled"] + [
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}]
        self._set_status(PODS, stored, status, "default-scheduler")
        self._event(stored, "Scheduled", f"Successfully assigned {ns}/{name} to {node['metadata']['name']}",
                    component="default-scheduler")

    def _unschedulable(self, pod, message, reason="Unschedulable"):
        status = copy.deepcopy(pod.get("status") or {})
        old = next((c for c in status.get("conditions") or [] if c["type"] == "PodScheduled"), None)
        if old and old.get("message") == message:
            return
        status["conditions"] = [c for c in status.get("conditions") or [] if c["type"] != "PodScheduled"] + [
            {"type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": now_rfc3339(),
             "reason": reason, "message": message}]
        self._set_status(PODS, pod, status, "default-scheduler")
        self._event(pod, "FailedScheduling", message, "Warning", "default-scheduler")

    # -------------------------------------------------------------- kubelet
    def _kubelet_written(self, res, kind, obj, old):
        """Store listener: the pods and nodes written since the kubelets' last pass."""
        if res is PODS:
            meta = obj["metadata"]
            if self.kubelet_pods_written is not None:
                self.kubelet_pods_written.add((meta.get("namespace", ""), meta["name"]))
            if (obj.get("spec") or {}).get("resourceClaims"):
                self.dra_pods.add((meta.get("namespace", ""), meta["name"]))
        elif res is NODES:
            self.kubelet_nodes_written.add(obj["metadata"]["name"])
        elif res is SLICES and (obj.get("spec") or {}).get("nodeName"):
            # A slice written (or deleted) behind the DRA plugin's back: its node is checked again.
            self.kubelet_nodes_written.add(obj["spec"]["nodeName"])

    def kubelets(self):
        """Each kubelet syncs its pods, then its device plugin's registration. A pass visits only what
        may sync differently from the last one: a pod whose containers all run for good or have all
        finished, which its last sync left as it was, syncs again only once the pod or its node is
        written (nothing else changes what a sync does to it while no fault is set), and a node's
        device plugin is checked again only once the node or a pod on it changed, or while a plugin
        waits to register. While a fault is set and once after (faults come and go without a
        write), every pod and node is visited, as on the first pass."""
        now = time.monotonic()
        nodes = {n["metadata"]["name"]: n for n in self.store.peek_list(NODES)}
        faults = bool(self.cluster.faults.items)
        # A fault's end is no write either: the pass after the last fault went visits everything too.
        full = self.kubelet_pods_written is None or faults or self.kubelet_faults
        self.kubelet_faults = faults
        if full:
            pods, keys = self.store.peek_list(PODS), None
        else:
            keys = self.kubelet_pods_written | self.kubelet_unsteady
            bucket = self.store.bucket(PODS)
            for name in self.kubelet_nodes_written:
                # The pods bound to a node written since (created too: a pod may name a node before it
                # exists), less those gone from the store.
                on_node = self.kubelet_pods_on_node.get(name, set())
                on_node.intersection_update(bucket)
                keys |= on_node
            # In the store's order, as on a full pass.
            pods = [pod for key, pod in bucket.items() if key in keys]
        check = set(self.kubelet_nodes_written)
        self.kubelet_pods_written, self.kubelet_nodes_written = set(), set()
        # The states of pods no longer there (deleted, or another pod under the same name), or whose
        # node is gone: on a full pass every state not of a pod visited, else those of the keys visited.
        live = {}
        for pod in pods:
            if pod["spec"].get("nodeName") in nodes:
                live[(pod["metadata"].get("namespace", ""), pod["metadata"]["name"])] = pod["metadata"]["uid"]
        for uid, state in list(self.pods.items()):
            key = state.get("key")
            if (full or key in keys) and live.get(key) != uid:
                check.add(state.get("node"))
                self.kubelet_unsteady.discard(key)
                del self.pods[uid]
        if full:
            self.kubelet_pods_on_node = {}
        for pod in pods:
            meta = pod["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            node_name = pod["spec"].get("nodeName")
            if node_name:
                # Kept also while the node is not there: its creation is a write that brings the pod back.
                self.kubelet_pods_on_node.setdefault(node_name, set()).add(key)
            if key not in live:
                self.kubelet_unsteady.discard(key)
                continue
            check.add(node_name)
            node = nodes[node_name]
            if self.kubelet_away(node_name):
                self.kubelet_unsteady.add(key)
                continue
            seen = (meta["resourceVersion"], node["metadata"]["resourceVersion"])
            state = self.pods.get(meta["uid"])
            if state is None or state.get("steady") != seen:
                before = self.store.rv
                self._run_pod(pod, node, now)
                state = self.pods.get(meta["uid"])
                if state is not None:
                    state["key"] = key
                    state["steady"] = seen if self.store.rv == before and _steady(pod, state) else None
            if state is not None and state.get("steady") is not None:
                self.kubelet_unsteady.discard(key)
            else:
                self.kubelet_unsteady.add(key)
        # The kubelets' pod states by node, in self.pods' order, built once per pass: each node's
        # device plugin check reads its own pods' states rather than every pod's.
        check = set(nodes) if full else (check | self.plugins_pending) & set(nodes)
        states = {}
        for state in self.pods.values():
            if not state.get("released") and state.get("node") in check:
                states.setdefault(state.get("node"), []).append(state)
        slices_by_node = self.dra_slices_by_node() if self.dra_active else None
        for name, node in nodes.items():
            if name in check and not self.kubelet_away(name):
                self._device_plugin(node, now, states.get(name, ()))
                if slices_by_node is not None:
                    self.dra_plugin(node, now, states.get(name, ()), slices_by_node)

    def _read_file(self, pod, container, path):
        """A file in the container from a ConfigMap volume, or None."""
        for mount in container.get("volumeMounts") or []:
            root = mount["mountPath"].rstrip("/") + "/"
            if not path.startswith(root):
                continue
            volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == mount["name"]), {})
            source = volume.get("configMap")
            key = mount.get("subPath") or path[len(root):]
            if source is None and "emptyDir" in volume:
                return self.pods.get(pod["metadata"]["uid"], {}).get("files", {}).get((mount["name"], key))
            if source is None:
                return None
            cm = self.store.peek(CONFIGMAPS, pod["metadata"]["namespace"], source["name"])
            if cm is None:
                return None
            for item in source.get("items") or []:
                if item["path"] == key:
                    key = item["key"]
            return (cm.get("data") or {}).get(key)
        return None

    def _allocate(self, pod, node_name):
        """Device allocation at admission; returns (granted, error message)."""
        plugin = self.plugins.get(node_name) or {}
        granted = {}
        taken = {}
        for state in self.pods.values():
            if state.get("node") == node_name and not state.get("released"):
                for resource, ids in state.get("granted", {}).items():
                    taken.setdefault(resource, set()).update(ids)
        for resource, amount in pod_requests(pod["spec"]).items():
            if "/" not in resource or resource.startswith(("kubernetes.io/", "hugepages-")):
                continue
            if amount <= 0:
                continue
            # Only resources a device plugin registered are allocated; others (a node's extended
            # resources patched into its status) are the scheduler's accounting alone (device
            # manager's isDevicePluginResource).
            if resource not in plugin.get("capacity", {}):
                continue
            healthy = plugin.get("healthy", {}).get(resource) if plugin.get("registered") else None
            if healthy is None:
                return None, (f"Allocate failed due to no healthy devices present; cannot allocate unhealthy "
                              f"devices {resource}, which is unexpected")
            free = [d for d in healthy if d not in taken.get(resource, set())]
            if len(free) < int(amount):
                return None, (f"Allocate failed due to requested number of devices unavailable for {resource}. "
                              f"Requested: {int(amount)}, Available: {len(free)}, which is unexpected")
            shared = plugin.get("shared", {}).get(resource)
            if shared and shared.get("failRequestsGreaterThanOne") and int(amount) > 1:
                return None, (f"Allocate failed due to rpc error: code = Unknown desc = request for "
                              f"'{resource}: {int(amount)}' too large: maximum request size for shared resources "
                              f"is 1, which is unexpected")
            granted[resource] = free[:int(amount)]
        return granted, None

    def _visible(self, pod, container, state, node):
        """What the container sees (gpus), and whether the NVIDIA runtime set it up."""
        runtime = self.cluster.node_runtime(node["metadata"]["name"])
        handler = pod["spec"].get("runtimeClassName")
        if handler:
            rc = self.store.peek(BY_KEY[("node.k8s.io", "runtimeclasses")], "", handler)
            handler = rc["handler"] if rc else handler
        else:
            handler = runtime["defaultRuntime"]
        gpus = self._healthy_gpus(node["metadata"]["name"])
        # Devices of DRA claims come as CDI devices: a runtime without CDI leaves them out.
        dra_seen = self.dra_visible(container, state, node["metadata"]["name"]) \
            if state.get("dra") and runtime["cdi"] else []
        granted_ids = [d for ids in state.get("granted", {}).values() for d in ids]
        plugin = self.plugins.get(node["metadata"]["name"]) or {}
        strategies = plugin.get("strategies") or ["envvar"]
        env = programs.image_env(container.get("image", ""))
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
        via_cdi = any(s.startswith("cdi-") for s in strategies) and granted_ids
        if granted_ids and "envvar" in strategies:
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(sorted({d.split("::")[0] for d in granted_ids}))
        if granted_ids and "volume-mounts" in strategies and not runtime["acceptVolumeMounts"]:
            pass
        elif granted_ids and "volume-mounts" in strategies:
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(sorted({d.split("::")[0] for d in granted_ids}))
        if handler != "nvidia" and not (via_cdi and runtime["cdi"]):
            return (dra_seen, True) if dra_seen else ([], False)
        seen = gpu_model.visible_devices(gpus, granted_ids) if via_cdi and runtime["cdi"] else []
        wanted = env.get("NVIDIA_VISIBLE_DEVICES")
        envvar_honoured = handler == "nvidia" and (runtime["acceptEnvvarUnprivileged"] or _privileged(container))
        if wanted and envvar_honoured and wanted not in ("void", "none"):
            if wanted == "all":
                seen = gpu_model.all_devices(gpus)
            else:
                extra = gpu_model.visible_devices(gpus, wanted.split(","))
                seen = seen + [d for d in extra if d not in seen]
        return seen + [d for d in dra_seen if d not in seen], True

    def _healthy_gpus(self, node_name):
        gpus = self.cluster.gpus.get(node_name, [])
        lost = self.cluster.faults.active("gpu-lost", node=node_name)
        if lost:
            gpus = gpus[:max(0, len(gpus) - int(lost.get("gpus", 1)))]
        return gpus

    def _run_pod(self, pod, node, now):
        uid = pod["metadata"]["uid"]
        state = self.pods.get(uid)
        node_name = node["metadata"]["name"]
        if state is None:
            if terminal(pod):
                self.pods[uid] = {"node": node_name, "released": True, "containers": {}}
                return
            prepared = None
            if pod["spec"].get("resourceClaims") and not pod["metadata"].get("deletionTimestamp"):
                # The kubelet's DRA manager prepares the claims before the sandbox; until then the pod
                # waits in ContainerCreating and is tried again.
                if now < self.dra_retry.get(uid, 0):
                    return
                prepared, error = self.dra_prepare(pod, node_name)
                if error:
                    self.dra_retry[uid] = now + self.timing["podStart"]
                    self._event(pod, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: "
                                f"prepare dynamic resources: {error}", "Warning", host=node_name)
                    self._write_pod_status(pod, {"containers": {}, "init_index": 0}, node)
                    return
                self.dra_retry.pop(uid, None)
            slow = self.cluster.faults.active("slow-pod-start")
            granted, error = self._allocate(pod, node_name)
            state = self.pods[uid] = {"node": node_name, "granted": granted or {}, "dra": prepared, "containers": {},
                                      "start_at": now + self.timing["podStart"] +
                                      (float(slow.get("delay", 5)) if slow else 0),
                                      "started": now_rfc3339(), "files": {}, "init_index": 0}
            if error:
                state["released"] = True
                status = {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                          "message": f"Pod was rejected: {error}",
                          "startTime": now_rfc3339(), "qosClass": pod["status"].get("qosClass", "BestEffort")}
                self._set_status(PODS, pod, status, "kubelet")
                self._event(pod, "UnexpectedAdmissionError", error, "Warning", host=node_name)
                return
            self.ip_counter[node_name] = self.ip_counter.get(node_name, 1) + 1
            state["ip"] = f"10.244.{self.cluster.node_index.get(node_name, 0)}.{self.ip_counter[node_name] % 250 + 2}"
        if state.get("released") and not pod["metadata"].get("deletionTimestamp"):
            return
        if pod["metadata"].get("deletionTimestamp"):
            self._stop_pod(pod, state, now)
            return
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline and not terminal(pod) and now - state.get("t0", now) > int(deadline):
            for cstate in state["containers"].values():
                if cstate["state"] != "terminated":
                    self._terminate(cstate, 137, "Error", now)
            state["deadline"] = True
        if now < state["start_at"] and not state.get("deadline"):
            self._write_pod_status(pod, state, node)
            return
        state.setdefault("t0", now)
        if not state.get("deadline"):
            self._advance(pod, state, node, now)
        self._write_pod_status(pod, state, node)

    def _advance(self, pod, state, node, now):
        spec = pod["spec"]
        inits = spec.get("initContainers") or []
        restart = spec.get("restartPolicy", "Always")
        while state["init_index"] < len(inits):
            container = inits[state["init_index"]]
            cstate = state["containers"].setdefault(container["name"], self._new_container())
            self._step(pod, container, cstate, state, node, now, "OnFailure" if restart == "Always" else restart,
                       init=True)
            if cstate["state"] == "terminated" and cstate["rc"] == 0:
                state["init_index"] += 1
                continue
            return
        for container in spec.get("containers") or []:
            cstate = state["containers"].setdefault(container["name"], self._new_container())
            self._step(pod, container, cstate, state, node, now, restart)

    @staticmethod
    def _new_container():
        return {"state": "waiting", "reason": "ContainerCreating", "restarts": 0, "log": "", "next": 0}

    def _step(self, pod, container, cstate, state, node, now, restart, init=False):
        if cstate["state"] == "waiting" and now >= cstate["next"]:
            if cstate["reason"] == "CrashLoopBackOff":
                cstate["backoff"].restart(cstate["exited"], now)
            self._start(pod, container, cstate, state, node, now, init)
            return
        if cstate["state"] == "running" and cstate.get("ends_at") is not None and now >= cstate["ends_at"]:
            self._terminate(cstate, cstate["result_rc"], "Completed" if cstate["result_rc"] == 0 else "Error", now)
            cstate["message"] = self._termination_message(container, cstate)
            cstate["exited"] = now
            if not (restart == "Always" or (restart == "OnFailure" and cstate["rc"] != 0)):
                cstate["final"] = True
            # The exit is reported first; a restart (or the back-off) comes with the next sync.
            return
        if cstate["state"] == "terminated" and not cstate.get("final"):
            cstate["last"] = {k: cstate[k] for k in ("rc", "reason", "started_at", "finished_at", "message")
                              if k in cstate}
            backoff = cstate.setdefault("backoff", CrashLoopBackOff(self.timing["crashBackoff"],
                                                                    self.timing["crashBackoffMax"]))
            delay = backoff.waiting(cstate["exited"], now)
            if not delay:
                backoff.restart(cstate["exited"], now)
                self._start(pod, container, cstate, state, node, now, init)
                return
            cstate.update(state="waiting", reason="CrashLoopBackOff", delay=delay, next=cstate["exited"] + delay)
            self._event(pod, "BackOff", f"Back-off restarting failed container {container['name']} in pod "
                                        f"{pod['metadata']['name']}_{pod['metadata']['namespace']}"
                                        f"({pod['metadata']['uid']})", "Warning", host=node["metadata"]["name"])

    def _start(self, pod, container, cstate, state, node, now, init):
        if cstate.get("started_at"):
            # A new instance of the container: its log starts empty, the last one becomes "previous",
            # and the restart count is the new instance's (the kubelet's restart-count label).
            cstate.setdefault("history", []).append(cstate["log"])
            cstate["log"] = ""
            cstate["restarts"] += 1
        argv = programs.argv_of(container)
        kind = programs.daemon_kind(argv)
        devices, tools = self._visible(pod, container, state, node)
        ctx = programs.Context(devices, tools)
        cstate.update(state="running", started_at=now_rfc3339(), ends_at=None, kind=kind,
                      container_id="containerd://" + hashlib.sha256(f"{pod['metadata']['uid']}/{container['name']}/"
                                                                    f"{cstate['restarts']}".encode()).hexdigest())
        if cstate["restarts"] == 0:
            self._event(pod, "Pulled", f'Container image "{container["image"]}" already present on machine',
                        host=node["metadata"]["name"])
        self._event(pod, "Created", f"Created container: {container['name']}", host=node["metadata"]["name"])
        self._event(pod, "Started", f"Started container {container['name']}", host=node["metadata"]["name"])
        env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
        if kind == "dra-gpu-plugin":
            self._start_dra_plugin(pod, container, cstate, node, now)
            return
        if kind == "device-plugin":
            try:
                if not tools:
                    # Without the NVIDIA runtime no NVML reaches the container: the plugin cannot see a GPU.
                    raise gpu_model.PluginError("Incompatible strategy detected auto\nIf this is a GPU node, did "
                                                "you configure the NVIDIA Container Toolkit?")
                config = gpu_model.plugin_config(argv, env, lambda p: self._read_file(pod, container, p))
                self.cluster.read_gpus(node["metadata"]["name"])
                resources = gpu_model.advertised(self._healthy_gpus(node["metadata"]["name"]), config)
                if self.cluster.faults.active("plugin-crashloop", node=node["metadata"]["name"]):
                    raise gpu_model.PluginError("failed to initialize NVML: ERROR_UNKNOWN")
                cstate["log"] += ("I Starting FS watcher.\nI Starting OS watcher.\nI Starting Plugins.\n"
                                  "I Loading configuration.\nI Retrieving plugins.\n")
                for resource in resources:
                    cstate["log"] += (f"I Starting GRPC server for '{resource}'\nI Starting to serve '{resource}' on "
                                      f"{DEVICE_PLUGIN_DIR}/nvidia-{resource.split('/')[-1]}.sock\n")
                cstate["plugin"] = {"resources": resources, "config": config, "since": now,
                                    "socket_dir": _mounts_host_path(pod, container, DEVICE_PLUGIN_DIR)}
            except gpu_model.PluginError as err:
                cstate["log"] += f"E {err}\n"
                if config_fail_on_init(argv, env):
                    cstate.update(ends_at=now + self.timing["programRun"], result_rc=1)
            return
        if kind == "config-manager":
            oneshot = env.get("ONESHOT", "false").lower() == "true"
            chosen, error = self._config_manager(pod, container, env, node)
            if error:
                cstate["log"] += f"Error: {error}\n"
                cstate.update(ends_at=now + self.timing["programRun"], result_rc=1)
            else:
                cstate["log"] += f'Updating to config: {chosen}\nSuccessfully updated to config: {chosen}\n'
                if oneshot:
                    cstate.update(ends_at=now + self.timing["programRun"], result_rc=0)
            return
        if kind is not None:
            if programs.is_script(argv):
                # A script that ends in a sleep forever prints what comes before it first.
                cstate["log"] += programs.run(argv, ctx)[0]
                cstate["files"] = ctx.files
            return
        log, rc = programs.run(argv, ctx)
        cstate["log"] += log
        cstate["files"] = ctx.files
        cstate.update(ends_at=now + self.timing["programRun"], result_rc=rc)

    def _start_dra_plugin(self, pod, container, cstate, node, now):
        """NVIDIA's gpu-kubelet-plugin (cmd/gpu-kubelet-plugin/main.go): its required flags (--node-name,
        --image-name, or their environment variables), NVML from the driver root mounted at /driver-root,
        the node's GPUs enumerated once, at start."""
        self.dra_active = True
        name = node["metadata"]["name"]
        argv = programs.argv_of(container)
        given = {e["name"] for e in container.get("env") or [] if e.get("value") or e.get("valueFrom")}
        missing = [flag for flag, variable in (("node-name", "NODE_NAME"), ("image-name", "IMAGE_NAME"))
                   if variable not in given and not any(a.startswith(f"--{flag}") for a in argv)]
        if missing:
            cstate["log"] += f'Required flags "{", ".join(missing)}" not set\n'
            cstate.update(ends_at=now + self.timing["programRun"], result_rc=1)
            return
        self.cluster.read_gpus(name)
        healthy = self._healthy_gpus(name)
        if not healthy or not _mounts_host_volume(pod, container, "/driver-root") \
                or self.cluster.faults.active("plugin-crashloop", node=name):
            cstate["log"] += ("E Error: error creating driver: failed to create device state: error enumerating all "
                              "possible devices: error initializing NVML: ERROR_LIBRARY_NOT_FOUND\n")
            cstate.update(ends_at=now + self.timing["programRun"], result_rc=1)
            return
        devices, index = gpu_model.dra_devices(healthy)
        registrable = all(_mounts_host_path(pod, container, folder) for folder in PLUGIN_DIRS)
        cstate["log"] += "".join(f"I Publishing device {d['name']}\n" for d in devices)
        if not registrable:
            cstate["log"] += (f"E failed to register with the kubelet: {PLUGIN_DIRS[0]} is not the kubelet's "
                              "plugin registration directory\n")
        cstate["dra_plugin"] = {"since": now, "devices": devices, "index": index, "registrable": registrable}

    def _config_manager(self, pod, container, env, node):
        """NVIDIA's config-manager: pick <label value>.yaml (or DEFAULT_CONFIG) from the configs directory."""
        label = env.get("NODE_LABEL", "nvidia.com/device-plugin.config")
        wanted = (node["metadata"].get("labels") or {}).get(label) or env.get("DEFAULT_CONFIG", "")
        source_dir = env.get("CONFIG_FILE_SRCDIR", "/available-configs")
        target = env.get("CONFIG_FILE_DST", "/config/config.yaml")
        available = None
        for mount in container.get("volumeMounts") or []:
            if mount["mountPath"].rstrip("/") == source_dir.rstrip("/"):
                volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == mount["name"]), {})
                if volume.get("configMap"):
                    cm = self.store.peek(CONFIGMAPS, pod["metadata"]["namespace"], volume["configMap"]["name"])
                    available = (cm or {}).get("data") or {}
        if available is None:
            return None, f"unable to read configs from {source_dir}"
        if not wanted:
            if len(available) == 1:
                wanted = next(iter(available))
            else:
                return None, (f"unable to get config: no default config set and {label} label not set on "
                              f"node, {len(available)} configs available")
        key = wanted if wanted in available else f"{wanted}.yaml" if f"{wanted}.yaml" in available else None
        if key is None:
            return None, f"unable to get config: config '{wanted}' not found in {source_dir}"
        for mount in container.get("volumeMounts") or []:
            if target.startswith(mount["mountPath"].rstrip("/") + "/"):
                state = self.pods.setdefault(pod["metadata"]["uid"], {})
                state.setdefault("files", {})[(mount["name"], target[len(mount["mountPath"].rstrip("/")) + 1:])] = \
                    available[key]
        return wanted, None

    def _terminate(self, cstate, rc, reason, now):
        cstate.update(state="terminated", rc=rc, reason=reason, finished_at=now_rfc3339(), ends_at=None)
        cstate.pop("plugin", None)
        cstate.pop("dra_plugin", None)

    @staticmethod
    def _termination_message(container, cstate):
        path = container.get("terminationMessagePath", "/dev/termination-log")
        message = (cstate.get("files") or {}).get(path, "")
        if not message and container.get("terminationMessagePolicy") == "FallbackToLogsOnError" \
                and cstate.get("rc"):
            # The last 80 lines, then at most their last 2048 bytes (kubelet's fallback).
            message = "".join(cstate["log"].splitlines(True)[-80:]).encode()[-2048:].decode(errors="ignore")
        return message[:4096]

    def _stop_pod(self, pod, state, now):
        if "stop_at" not in state:
            state["stop_at"] = now + min(self.timing["podShutdown"],
                                         float(pod["metadata"].get("deletionGracePeriodSeconds") or 0) or 0.01)
            self._event(pod, "Killing", "Stopping container " + ", ".join(
                c["name"] for c in pod["spec"].get("containers") or []), host=state.get("node"))
        if now >= state["stop_at"]:
            for cstate in state["containers"].values():
                if cstate["state"] != "terminated":
                    self._terminate(cstate, 0, "Completed", now)
            state["released"] = True
            self.cluster.finish_pod_deletion(pod)

    def _write_pod_status(self, pod, state, node):
        spec = pod["spec"]
        old = pod.get("status") or {}
        stamp = now_rfc3339()
        inits, mains = spec.get("initContainers") or [], spec.get("containers") or []
        init_statuses = [self._container_status(c, state["containers"].get(c["name"]), init=True, pod=pod)
                         for c in inits]
        main_statuses = [self._container_status(c, state["containers"].get(c["name"])
                                                if state["init_index"] >= len(inits) else None, init=False,
                                                initializing=state["init_index"] < len(inits), pod=pod)
                         for c in mains]
        main_states = [state["containers"].get(c["name"]) for c in mains]
        restart = spec.get("restartPolicy", "Always")
        phase = "Pending"
        if state.get("deadline"):
            phase = "Failed"
        elif all(s and s["state"] == "terminated" and s.get("final") for s in main_states) and main_states:
            phase = "Succeeded" if all(s["rc"] == 0 for s in main_states) else "Failed"
        elif any(s and s["state"] == "terminated" and s.get("final") and s["rc"] != 0 for s in main_states) \
                and restart == "Never" and all(s and s["state"] == "terminated" for s in main_states):
            phase = "Failed"
        elif state["init_index"] >= len(inits) and all(s and s["state"] != "waiting" or (s and s["restarts"])
                                                       for s in main_states) and main_states:
            phase = "Running"
        elif any(s and s.get("final") and s["rc"] != 0 for s in
                 (state["containers"].get(c["name"]) for c in inits)):
            phase = "Failed"
        ready = phase == "Running" and all(cs["ready"] for cs in main_statuses)
        initialized = state["init_index"] >= len(inits)
        started = any(s and s["state"] != "waiting" for s in state["containers"].values()) or phase != "Pending"
        cond_values = [("PodReadyToStartContainers", "True" if started or initialized else "False", None),
                       ("Initialized", "True" if initialized else "False",
                        None if initialized else "ContainersNotInitialized"),
                       ("Ready", "True" if ready else "False",
                        None if ready else ("PodCompleted" if phase in ("Succeeded", "Failed") else
                                            "ContainersNotReady")),
                       ("ContainersReady", "True" if ready else "False",
                        None if ready else ("PodCompleted" if phase in ("Succeeded", "Failed") else
                                            "ContainersNotReady")),
                       ("PodScheduled", "True", None)]
        old_conditions = {c["type"]: c for c in old.get("conditions") or []}
        conditions = []
        for ctype, value, reason in cond_values:
            previous = old_conditions.get(ctype)
            if previous and previous["status"] == value and previous.get("reason") == reason:
                conditions.append(previous)
                continue
            condition = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": stamp}
            if reason:
                condition["reason"] = reason
                if reason == "ContainersNotReady":
                    waiting = [c["name"] for c, s in zip(mains, main_statuses) if not s["ready"]]
                    condition["message"] = f"containers with unready status: [{' '.join(waiting)}]"
                if reason == "ContainersNotInitialized":
                    condition["message"] = f"containers with incomplete status: [{' '.join(c['name'] for c in inits)}]"
            conditions.append(condition)
        # Conditions others own (DisruptionTarget from an eviction, readiness gates) stay.
        owned = {entry[0] for entry in cond_values}
        conditions += [c for c in old.get("conditions") or [] if c["type"] not in owned]
        status = {"phase": phase, "conditions": conditions, "hostIP": _internal_ip(node),
                  "hostIPs": [{"ip": _internal_ip(node)}], "podIP": state.get("ip"),
                  "podIPs": [{"ip": state.get("ip")}], "startTime": old.get("startTime", stamp),
                  "containerStatuses": main_statuses, "qosClass": old.get("qosClass", "BestEffort")}
        if not state.get("ip"):
            # No sandbox yet (claims not prepared): no pod IP.
            del status["podIP"], status["podIPs"]
        if old.get("resourceClaimStatuses"):
            status["resourceClaimStatuses"] = old["resourceClaimStatuses"]
        if inits:
            status["initContainerStatuses"] = init_statuses
        if state.get("deadline"):
            status.update(reason="DeadlineExceeded",
                          message="Pod was active on the node longer than the specified deadline")
        if status["phase"] in ("Succeeded", "Failed"):
            state["released"] = True
        self._set_status(PODS, pod, status, "kubelet")

    @staticmethod
    def _container_status(container, cstate, init=False, initializing=False, pod=None):
        status = {"name": container["name"], "image": container["image"],
                  "imageID": "", "ready": False, "restartCount": 0, "started": False,
                  "state": {"waiting": {"reason": "PodInitializing" if initializing else "ContainerCreating"}},
                  "lastState": {}}
        if cstate is None:
            return status
        status["restartCount"] = cstate["restarts"]
        if cstate.get("container_id"):
            status["containerID"] = cstate["container_id"]
            status["imageID"] = container["image"].split(":")[0] + "@sha256:" + hashlib.sha256(
                container["image"].encode()).hexdigest()
        if cstate["state"] == "running":
            status["state"] = {"running": {"startedAt": cstate["started_at"]}}
            status["ready"] = not init
            status["started"] = True
        elif cstate["state"] == "terminated":
            term = {"exitCode": cstate["rc"], "reason": cstate["reason"], "startedAt": cstate.get("started_at"),
                    "finishedAt": cstate["finished_at"], "containerID": cstate.get("container_id", "")}
            if cstate.get("message"):
                term["message"] = cstate["message"]
            status["state"] = {"terminated": term}
        else:
            waiting = {"reason": cstate["reason"]}
            if cstate["reason"] == "CrashLoopBackOff":
                # The back-off being waited as a Go duration, and the pod as format.Pod writes it:
                # name_namespace(uid) (kuberuntime_manager.go doBackOff).
                delay = cstate["delay"]
                meta = (pod or {}).get("metadata") or {}
                waiting["message"] = (f"back-off {_go_duration(delay)} restarting failed container="
                                      f"{container['name']} pod={meta.get('name')}_{meta.get('namespace')}"
                                      f"({meta.get('uid')})")
            status["state"] = {"waiting": waiting}
        last = cstate.get("last")
        if last:
            status["lastState"] = {"terminated": {"exitCode": last.get("rc"), "reason": last.get("reason"),
                                                  "startedAt": last.get("started_at"),
                                                  "finishedAt": last.get("finished_at"),
                                                  "containerID": cstate.get("container_id", ""),
                                                  **({"message": last["message"]} if last.get("message") else {})}}
        return status

    def log_of(self, pod, container_name, previous=False):
        """The log of the container's latest instance (the one that ended, while it waits to restart),
        or of the one before it with previous (kubelet keeps logs per container instance)."""
        state = self.pods.get(pod["metadata"]["uid"])
        if state is None:
            return None
        cstate = state["containers"].get(container_name)
        if cstate is None:
            return None
        if previous:
            return cstate["history"][-1] if cstate.get("history") else None
        return cstate["log"]

    # ---------------------------------------------------- device plugins
    def _device_plugin(self, node, now, states):
        """The node's device plugin registration, from the states of the pods the node runs."""
        name = node["metadata"]["name"]
        running = None
        self.plugins_pending.discard(name)
        for state in states:
            for cstate in state["containers"].values():
                plugin = cstate.get("plugin")
                if cstate["state"] == "running" and plugin and plugin["socket_dir"]:
                    if now - plugin["since"] >= self.timing["pluginRegister"]:
                        running = plugin
                    else:
                        # Registers once its time has come, with no write before: checked again until then.
                        self.plugins_pending.add(name)
        record = self.plugins.setdefault(name, {"registered": False, "capacity": {}, "healthy": {}})
        healthy = self._healthy_gpus(name) if running else None
        # What this check reads: the registered plugin, the node, the node's healthy GPUs. When none
        # of them changed since the last check, that check's outcome stands (and it wrote nothing
        # that it would write again): the check is passed over.
        seen = record.get("seen")
        if seen is not None and seen[0] is running and seen[1] == node["metadata"]["resourceVersion"] \
                and seen[2] == healthy:
            return
        record["seen"] = (running, node["metadata"]["resourceVersion"], healthy)
        if running:
            healthy_uuids = {g["uuid"] for g in healthy} | {m["uuid"] for g in healthy for m in g["mig"]}
            record["registered"] = True
            record["strategies"] = running["config"]["deviceListStrategy"]
            slicing = (running["config"].get("sharing") or {}).get("timeSlicing") or {}
            record["shared"] = {r: slicing for r, ids in running["resources"].items() if any("::" in i for i in ids)}
            for resource, ids in running["resources"].items():
                record["capacity"][resource] = len(ids)
                record["healthy"][resource] = [i for i in ids if i.split("::")[0] in healthy_uuids]
            for resource in list(record["healthy"]):
                if resource not in running["resources"]:
                    record["healthy"][resource] = []
        else:
            record["registered"] = False
            for resource in record["healthy"]:
                record["healthy"][resource] = []
        # Only capacity and allocatable change here: copies of those two, not of the whole status
        # (nothing is written when they come out the same).
        capacity, allocatable = dict(node["status"]["capacity"]), dict(node["status"]["allocatable"])
        for resource, count in record["capacity"].items():
            capacity[resource] = str(count)
            allocatable[resource] = str(len(record["healthy"].get(resource, [])))
        # Extended resources a client put into the capacity (PATCH nodes/status) become
        # allocatable, and leave it with the capacity (kubelet's nodestatus.MachineInfo;
        # tasks/administer-cluster/extended-resource-node/).
        for resource in list(allocatable):
            if "/" in resource and resource not in capacity:
                del allocatable[resource]
        for resource, value in capacity.items():
            if "/" in resource and resource not in record["capacity"]:
                allocatable[resource] = value
        if capacity != node["status"]["capacity"] or allocatable != node["status"]["allocatable"]:
            self._set_status(NODES, node, dict(node["status"], capacity=capacity, allocatable=allocatable),
                             "kubelet")


def config_fail_on_init(argv, env):
    value = None
    for arg in argv:
        if arg.startswith("--fail-on-init-error="):
            value = arg.split("=", 1)[1]
    value = value or env.get("FAIL_ON_INIT_ERROR")
    return value is None or str(value).lower() == "true"


def _privileged(container):
    return bool((container.get("securityContext") or {}).get("privileged"))


def _mounts_host_path(pod, container, path):
    for mount in container.get("volumeMounts") or []:
        if mount["mountPath"].rstrip("/") != path:
            continue
        volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == mount["name"]), {})
        if (volume.get("hostPath") or {}).get("path", "").rstrip("/") == path:
            return True
    return False


def _mounts_host_volume(pod, container, mount_path):
    """Whether a hostPath volume is mounted at mount_path (whatever host folder it is)."""
    for mount in container.get("volumeMounts") or []:
        if mount["mountPath"].rstrip("/") == mount_path:
            volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == mount["name"]), {})
            if "hostPath" in volume:
                return True
    return False


def _epoch(stamp):
    """Seconds since the epoch of an RFC 3339 timestamp as the store writes them."""
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def _go_duration(seconds):
    """time.Duration's String(): 200ms, 1.6s, 10s, 1m20s, 5m0s, 1h0m0s."""
    nanos = int(round(seconds * 1e9))
    sign, nanos = ("-", -nanos) if nanos < 0 else ("", nanos)
    if nanos == 0:
        return "0s"
    if nanos < 1000:
        return f"{sign}{nanos}ns"
    if nanos < 10 ** 6:
        return f"{sign}{_decimal(nanos, 1000)}\u00b5s"
    if nanos < 10 ** 9:
        return f"{sign}{_decimal(nanos, 10 ** 6)}ms"
    hours, rest = divmod(nanos, 3600 * 10 ** 9)
    minutes, rest = divmod(rest, 60 * 10 ** 9)
    text = f"{_decimal(rest, 10 ** 9)}s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    return f"{sign}{minutes}m{text}" if minutes else sign + text


def _decimal(value, unit):
    """value / unit with the fraction's trailing zeros dropped, as Go prints durations."""
    whole, part = divmod(value, unit)
    if not part:
        return str(whole)
    return f"{whole}." + str(part).rjust(len(str(unit)) - 1, "0").rstrip("0")


class CrashLoopBackOff:
    """The kubelet's restart back-off for one container: client-go's flowcontrol.Backoff as
    pkg/kubelet/kubelet.go builds it (initial crashBackoff, at most crashBackoffMax, no jitter) and
    kuberuntime_manager.go doBackOff uses it. A container that exited is restarted at once when
    no back-off is recorded for it, or when its last restart lies more than twice the maximum
    before this exit (it ran that long: the back-off starts over, the documented "10 minutes
    without any problems"); otherwise it waits the current back-off, counted from its exit.
    Each restart doubles the back-off up to the maximum: restarts at once, then after 10 s,
    20 s, 40 s... 300 s with the real durations."""

    def __init__(self, initial, maximum):
        self.initial = initial
        self.maximum = maximum
        self.delay = None
        self.updated = None

    def _expired(self, exited):
        return self.delay is None or exited - self.updated > 2 * self.maximum

    def waiting(self, exited, now):
        """The back-off an exit at `exited` waits, as the waiting message names it (Get), while
        it lasts (IsInBackOffSince); 0 once the container is to restart."""
        if self._expired(exited) or now - exited >= self.delay:
            return 0
        return self.delay

    def restart(self, exited, now):
        """A restart (Next): the back-off starts, starts over, or doubles."""
        if self._expired(exited):
            self.delay = self.initial
        else:
            self.delay = min(self.delay * 2, self.maximum)
        self.updated = now


def _internal_ip(node):
    return next((a["address"] for a in node["status"].get("addresses") or [] if a["type"] == "InternalIP"), "")


def _pinned_node(pod):
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field["key"] == "metadata.name" and field.get("values"):
                return field["values"][0]
    return None


def _steady(pod, state):
    """Whether a kubelet's sync of the pod would do nothing until the pod or its node changes: every
    container started and running with no end, no deadline, no deletion; or the pod finished
    (Succeeded or Failed), every container terminated, not being deleted; or its resources given back."""
    spec = pod["spec"]
    if state.get("released") and not pod["metadata"].get("deletionTimestamp"):
        # Its resources given back (finished before the kubelet saw it, refused at admission): a sync returns at once.
        return True
    if terminal(pod) and not pod["metadata"].get("deletionTimestamp") and "t0" in state:
        containers = [state["containers"].get(c["name"]) for c in spec.get("containers") or []]
        return bool(containers) and all(c is not None and c["state"] == "terminated" for c in containers)
    if pod["metadata"].get("deletionTimestamp") or spec.get("activeDeadlineSeconds") is not None \
            or state.get("released") or state.get("deadline") or "t0" not in state \
            or state.get("init_index", 0) < len(spec.get("initContainers") or []):
        return False
    containers = [state["containers"].get(c["name"]) for c in spec.get("containers") or []]
    return bool(containers) and all(c is not None and c["state"] == "running" and c.get("ends_at") is None
                                    for c in containers)


def _affinity_node_names(spec):
    """The names of the only nodes the pod's required node affinity can match, when each of its
    terms requires metadata.name In a list (terms are ORed, a term's requirements ANDed); else None."""
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = (required or {}).get("nodeSelectorTerms") or []
    names = {}
    for term in terms:
        fields = [f for f in term.get("matchFields") or [] if f.get("key") == "metadata.name"
                  and f.get("operator") == "In"]
        if not fields:
            return None
        names.update(dict.fromkeys(fields[0].get("values") or []))
    return list(names) if terms else None


def _owner_ref(owner):
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _with_binding_fields(pod):
    return pod
