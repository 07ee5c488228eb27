"""Dynamic Resource Allocation in the simulated cluster's controllers: the resource claim controller,
the scheduler's DynamicResources plugin, the kubelet's DRA manager and NVIDIA's DRA kubelet plugin.

Sources (dra.py names those of the types, selectors and allocator):
- Resource claim controller (pkg/controller/resourceclaim/controller.go): a claim per pod entry
  that names a template, made with generateName ``<pod>-<entry>-`` (both cut to fit 57
  characters), the pod as its controlling owner, the ``resource.kubernetes.io/pod-claim-name``
  annotation and the template's labels and annotations; the pod's
  ``status.resourceClaimStatuses`` then names it. A template that is not there is a
  ``FailedResourceClaimCreation`` event. Reservations of pods that are done or gone are
  dropped; a claim reserved for no one is deallocated and its finalizer removed; a claim made
  for a pod that is done or gone is deleted (for a pod gone, the garbage collector's part).
- Scheduler (pkg/scheduler/framework/plugins/dynamicresources): a pod whose claims are not all
  there waits in the queue with no event; a claim's request naming no DeviceClass fails
  PreFilter; a node where the claims cannot all be allocated is "cannot allocate all claims"
  (unresolvable: preemption does not help), an allocated claim's node selector not matching
  "resourceclaim not available on the node"; the plugin's PostFilter adds "still not
  schedulable". Binding adds the ``resource.kubernetes.io/delete-protection`` finalizer, then
  writes the allocation (its nodeSelector a ``metadata.name`` matchFields term for a node's
  pool) and the pod in ``reservedFor``.
- Kubelet (pkg/kubelet/cm/dra/manager.go): before the sandbox, each claim is read, must be
  reserved for the pod and its drivers registered; else ``FailedPrepareDynamicResources``
  ("Failed to prepare dynamic resources: prepare dynamic resources: ...") and the pod waits in
  ContainerCreating, retried. A container gets the CDI devices of the claims (or requests) its
  ``resources.claims`` names; without CDI in the runtime it gets none (containerd ignores CRI's
  CDI devices unless CDI is enabled).
- NVIDIA's DRA kubelet plugin (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin):
  recognised by what its container runs (``gpu-kubelet-plugin``, also inside a ``bash -c``
  script as the chart runs it). It needs its node and image names (flags or NODE_NAME and IMAGE_NAME)
  and the driver root at /driver-root, else it exits and crash-loops, as it does on a node
  without GPUs (NVML's initialisation fails). Once it runs it publishes one ResourceSlice for
  its node (driver ``gpu.nvidia.com``, pool named after the node, one slice) from the GPUs the
  node has when it starts (gpus.dra_devices); a slice deleted or changed behind its back is
  written again. It registers with the kubelet after ``pluginRegister`` seconds, only with the
  kubelet's plugin directories mounted: until then a pod allocated its devices waits. When the
  plugin stops, the kubelet removes the node's slices of the driver (STAND-IN: at once; a real
  kubelet waits 30 s for the plugin to come back).
"""

import copy
import time

from . import dra
from . import gpus as gpu_model
from .resources import BY_KEY
from .selectors import node_selector_term_match
from .store import ApiError

PODS = BY_KEY[("", "pods")]
CLAIMS = BY_KEY[("resource.k8s.io", "resourceclaims")]
TEMPLATES = BY_KEY[("resource.k8s.io", "resourceclaimtemplates")]
SLICES = BY_KEY[("resource.k8s.io", "resourceslices")]
CLASSES = BY_KEY[("resource.k8s.io", "deviceclasses")]
PLUGIN_DIRS = ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins")
CLAIM_CONTROLLER = "resource-claim-controller"
# The source of the claim controller's events (controller.go's event recorder).
CLAIM_EVENTS = "resource_claim"


def claim_generate_name(pod_name, entry_name):
    """generateName of a claim made for a pod's entry (controller.go, handleClaim)."""
    name = f"{pod_name}-{entry_name}-"
    if len(name) > 57:
        pod_name = pod_name[:len(pod_name) * 57 // len(name)]
        entry_name = entry_name[:len(entry_name) * 57 // len(name)]
        name = f"{pod_name}-{entry_name}"
    return name


def pod_done(pod):
    """isPodDone: finished, or deleted before it was bound."""
    phase = (pod.get("status") or {}).get("phase")
    deleted_unbound = bool(pod["metadata"].get("deletionTimestamp")) and not pod["spec"].get("nodeName")
    return phase in ("Succeeded", "Failed") or deleted_unbound


def claim_names(pod):
    """[(entry name, claim name or None)] of a pod: a template's claim is the one its status names."""
    made = {s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses")
            or []}
    out = []
    for entry in pod["spec"].get("resourceClaims") or []:
        out.append((entry["name"], entry.get("resourceClaimName") or made.get(entry["name"])))
    return out


def node_selector_matches(selector, node):
    """A core NodeSelector: any of its terms."""
    return any(node_selector_term_match(term, node) for term in selector.get("nodeSelectorTerms") or [])


def _controlling_uid(obj):
    return next((r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


class DraMixin:
    """DRA parts of Controllers (controllers.py), which sets ``dra_pods``, ``dra_nodes``, ``dra_retry``."""

    # ------------------------------------------------- resource claim controller
    def resource_claims(self):
        for key in list(self.dra_pods):
            pod = self.store.peek(PODS, *key)
            if pod is None or not pod["spec"].get("resourceClaims"):
                self.dra_pods.discard(key)
                continue
            if pod["metadata"].get("deletionTimestamp") or pod_done(pod):
                continue
            self._claims_for_pod(pod)
        claims = self.store.peek_list(CLAIMS)
        if not claims:
            return
        for claim in list(claims):
            self._sync_claim(claim)

    def _claims_for_pod(self, pod):
        meta = pod["metadata"]
        made = {s.get("name") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        added = []
        for entry in pod["spec"].get("resourceClaims") or []:
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name or entry["name"] in made:
                continue
            existing = next((c for c in self.store.peek_list(CLAIMS, meta["namespace"])
                             if _controlling_uid(c) == meta["uid"]
                             and (c["metadata"].get("annotations") or {}).get(dra.POD_CLAIM_ANNOTATION)
                             == entry["name"]), None)
            if existing is None:
                template = self.store.peek(TEMPLATES, meta["namespace"], template_name)
                if template is None:
                    # Retried with the work queue's back-off: an event per try, not per tick.
                    key = ("template", meta["uid"], entry["name"])
                    if time.monotonic() >= self.dra_retry.get(key, 0):
                        self.dra_retry[key] = time.monotonic() + self.timing["crashBackoff"]
                        self._event(pod, "FailedResourceClaimCreation",
                                    f'PodResourceClaim {entry["name"]}: resource claim template "{template_name}": '
                                    f'resourceclaimtemplate.resource.k8s.io "{template_name}" not found', "Warning",
                                    component=CLAIM_EVENTS)
                    continue
                tmeta = (template.get("spec") or {}).get("metadata") or {}
                claim = {"apiVersion": CLAIMS.api_version, "kind": "ResourceClaim",
                         "metadata": {"generateName": claim_generate_name(meta["name"], entry["name"]),
                                      "namespace": meta["namespace"],
                                      "annotations": dict(tmeta.get("annotations") or {},
                                                          **{dra.POD_CLAIM_ANNOTATION: entry["name"]}),
                                      "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                           "uid": meta["uid"], "controller": True,
                                                           "blockOwnerDeletion": True}]},
                         "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {})}
                if tmeta.get("labels"):
                    claim["metadata"]["labels"] = dict(tmeta["labels"])
                try:
                    existing = self.cluster.create(CLAIMS, meta["namespace"], claim, manager=CLAIM_CONTROLLER)
                except ApiError as err:
                    self._event(pod, "FailedResourceClaimCreation", f"PodResourceClaim {entry['name']}: create "
                                f"ResourceClaim {claim['metadata']['generateName']}: {err.message}", "Warning",
                                component=CLAIM_EVENTS)
                    continue
            added.append({"name": entry["name"], "resourceClaimName": existing["metadata"]["name"]})
        if added:
            status = copy.deepcopy(pod.get("status") or {})
            status["resourceClaimStatuses"] = list(status.get("resourceClaimStatuses") or []) + added
            self._set_status(PODS, pod, status, "ResourceClaimController")

    def _sync_claim(self, claim):
        meta = claim["metadata"]
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        keep = []
        for entry in reserved:
            pod = self.store.peek(PODS, meta["namespace"], entry.get("name")) if entry.get("resource") == "pods" \
                else None
            if entry.get("resource") != "pods" or (pod is not None and pod["metadata"]["uid"] == entry.get("uid")
                                                   and not pod_done(pod)):
                keep.append(entry)
        if keep != reserved:
            new_status = dict(status, reservedFor=keep) if keep else {k: v for k, v in status.items()
                                                                      if k != "reservedFor"}
            claim = self._set_status(CLAIMS, claim, new_status, CLAIM_CONTROLLER, copy_back=True) or claim
            status = claim.get("status") or {}
        if status.get("reservedFor"):
            return
        finalizers = meta.get("finalizers") or []
        if status.get("allocation") and (dra.FINALIZER in finalizers or not finalizers):
            claim = self._set_status(CLAIMS, claim, {k: v for k, v in status.items() if k != "allocation"},
                                     CLAIM_CONTROLLER, copy_back=True) or claim
        if dra.FINALIZER in (claim["metadata"].get("finalizers") or []) and not (claim.get("status") or {}).get(
                "allocation"):
            changed = copy.deepcopy(claim)
            changed["metadata"]["finalizers"] = [f for f in finalizers if f != dra.FINALIZER]
            try:
                claim = self.cluster.update(CLAIMS, meta["namespace"], meta["name"], changed,
                                            manager=CLAIM_CONTROLLER, internal=True)
            except ApiError:
                return
            if claim is None or claim["metadata"].get("deletionTimestamp"):
                return
        owner = _controlling_uid(claim)
        annotated = dra.POD_CLAIM_ANNOTATION in (claim["metadata"].get("annotations") or {})
        if owner and annotated and not claim["metadata"].get("deletionTimestamp"):
            ref = next(r for r in claim["metadata"]["ownerReferences"] if r.get("controller"))
            pod = self.store.peek(PODS, meta["namespace"], ref.get("name"))
            if pod is None or pod["metadata"]["uid"] != owner or pod_done(pod):
                try:
                    self.cluster.delete(CLAIMS, meta["namespace"], meta["name"])
                except ApiError:
                    pass

    # ----------------------------------------------------------------- scheduler
    def dra_schedule_state(self):
        """What the scheduler's pass reads once: slices by node, classes, devices in use."""
        by_node, shared = {}, []
        for item in self.store.peek_list(SLICES):
            node_name = (item.get("spec") or {}).get("nodeName")
            if node_name:
                by_node.setdefault(node_name, []).append(item)
            else:
                shared.append(item)
        classes = {c["metadata"]["name"]: c for c in self.store.peek_list(CLASSES)}
        return {"by_node": by_node, "shared": shared, "classes": classes,
                "in_use": dra.results_in_use(self.store.peek_list(CLAIMS)), "choice": {}}

    def dra_prefilter(self, pod, state):
        """(claims, message): None claims when the pod waits in the queue; a message when it is
        unschedulable before any node is looked at."""
        claims = []
        for _entry, name in claim_names(pod):
            if name is None:
                return None, None
            claim = self.store.peek(CLAIMS, pod["metadata"]["namespace"], name)
            if claim is None or claim["metadata"].get("deletionTimestamp"):
                return None, None
            owner = _controlling_uid(claim)
            if owner and owner != pod["metadata"]["uid"] and dra.POD_CLAIM_ANNOTATION in (
                    claim["metadata"].get("annotations") or {}):
                return None, None
            claims.append(claim)
        for claim in claims:
            status = claim.get("status") or {}
            reserved = status.get("reservedFor") or []
            if status.get("allocation") and reserved and len(reserved) >= dra.RESERVED_MAX:
                return claims, "resourceclaim in use"
            if status.get("allocation"):
                continue
            for request in (claim["spec"].get("devices") or {}).get("requests") or []:
                options = [request["exactly"]] if request.get("exactly") else request.get("firstAvailable") or []
                for option in options:
                    if option.get("deviceClassName") not in state["classes"]:
                        return claims, (f"request {request['name']}: device class {option.get('deviceClassName')} "
                                        "does not exist")
        return claims, None

    def dra_filter(self, pod, node, claims, state):
        """None when the node can take the pod's claims (the allocation kept for binding), else the
        reason; AllocationError for the allocator's errors."""
        name = node["metadata"]["name"]
        pending = []
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                selector = allocation.get("nodeSelector")
                if selector and not node_selector_matches(selector, node):
                    return "resourceclaim not available on the node"
            else:
                pending.append(claim)
        if not pending:
            state["choice"][(pod["metadata"]["uid"], name)] = []
            return None
        pools = dra.node_pools(state["by_node"].get(name, []) + state["shared"], node, node_selector_matches)
        in_use = set(state["in_use"])
        chosen = []
        for claim in pending:
            results = dra.allocate(claim, state["classes"], pools, in_use)
            if results is None:
                return "cannot allocate all claims"
            chosen.append((claim, results))
        state["choice"][(pod["metadata"]["uid"], name)] = chosen
        return None

    def dra_bind(self, pod, node, claims, state):
        """Write the claims' allocations and reservations before the pod is bound; False when a write failed."""
        name = node["metadata"]["name"]
        picked = state["choice"].get((pod["metadata"]["uid"], name), [])
        chosen = {c["metadata"]["name"]: results for c, results in picked}
        entry = {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        for claim in claims:
            meta = claim["metadata"]
            try:
                if meta["name"] in chosen:
                    if dra.FINALIZER not in (meta.get("finalizers") or []):
                        changed = copy.deepcopy(claim)
                        changed["metadata"]["finalizers"] = list(meta.get("finalizers") or []) + [dra.FINALIZER]
                        claim = self.cluster.update(CLAIMS, meta["namespace"], meta["name"], changed,
                                                    manager="kube-scheduler", internal=True)
                    results = chosen[meta["name"]]
                    allocation = {"devices": {"results": results},
                                  "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                      {"key": "metadata.name", "operator": "In", "values": [name]}]}]}}
                    status = dict(claim.get("status") or {}, allocation=allocation,
                                  reservedFor=list((claim.get("status") or {}).get("reservedFor") or []) + [entry])
                    for result in results:
                        state["in_use"].add((result["driver"], result["pool"], result["device"]))
                else:
                    status = dict(claim.get("status") or {},
                                  reservedFor=list((claim.get("status") or {}).get("reservedFor") or []) + [entry])
                self.cluster.update(CLAIMS, meta["namespace"], meta["name"], dict(claim, status=status),
                                    manager="kube-scheduler", subresource="status", internal=True)
            except ApiError:
                return False
        return True

    # ------------------------------------------------------------------- kubelet
    def dra_prepare(self, pod, node_name):
        """{claim entry name: [(request, device name)]} of the pod's claims, or the error that keeps it waiting."""
        prepared = {}
        record = self.dra_nodes.get(node_name) or {}
        for entry, name in claim_names(pod):
            if name is None:
                return None, f'pod "{pod["metadata"]["namespace"]}/{pod["metadata"]["name"]}": ResourceClaim not ' \
                             "created yet"
            claim = self.store.peek(CLAIMS, pod["metadata"]["namespace"], name)
            if claim is None:
                return None, (f'fetch ResourceClaim {name}: resourceclaims.resource.k8s.io "{name}" not found')
            reserved = {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []}
            if pod["metadata"]["uid"] not in reserved:
                return None, (f"pod {pod['metadata']['name']} ({pod['metadata']['uid']}) is not allowed to use "
                              f"ResourceClaim {name} ({claim['metadata']['uid']})")
            devices = []
            results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
            for result in results:
                if result["driver"] != gpu_model.DRA_DRIVER or not record.get("registered"):
                    return None, f"DRA driver {result['driver']} is not registered"
                if result["device"] not in record.get("index", {}) or result["pool"] != node_name:
                    return None, (f"NodePrepareResources failed for ResourceClaim {name}: error preparing devices "
                                  f"for claim {claim['metadata']['uid']}: device {result['device']} not found")
                devices.append((result["request"], result["device"]))
            prepared[entry] = devices
        return prepared, None

    def dra_visible(self, container, state, node_name):
        """[(gpu, migs or None)] of the DRA devices this container gets."""
        prepared = state.get("dra") or {}
        index = (self.dra_nodes.get(node_name) or {}).get("index", {})
        picked = []
        for ref in (container.get("resources") or {}).get("claims") or []:
            for request, device in prepared.get(ref.get("name"), []):
                if ref.get("request") and request.split("/")[0] != ref["request"] and request != ref["request"]:
                    continue
                if device in index and device not in picked:
                    picked.append(device)
        out = []
        for device in picked:
            gpu, mig = index[device]
            if mig is None:
                out.append((gpu, None))
            else:
                same = next((entry for entry in out if entry[0] is gpu and entry[1] is not None), None)
                if same:
                    same[1].append(mig)
                else:
                    out.append((gpu, [mig]))
        return out

    def dra_slices_by_node(self):
        """{node name: [ResourceSlice of NVIDIA's driver]}, read once per kubelets' pass."""
        out = {}
        for item in self.store.peek_list(SLICES):
            spec = item.get("spec") or {}
            if spec.get("driver") == gpu_model.DRA_DRIVER and spec.get("nodeName"):
                out.setdefault(spec["nodeName"], []).append(item)
        return out

    def dra_plugin(self, node, now, states, slices_by_node):
        """NVIDIA's DRA kubelet plugin on the node: its ResourceSlice, which it publishes itself once it
        runs (the vendored resourceslice controller: pool generation 1, names <index>-<driver>-<node>-,
        the same generation while the devices stay the same), and its registration with the kubelet
        (the plugin directories mounted, after pluginRegister seconds)."""
        name = node["metadata"]["name"]
        running = None
        for state in states:
            for cstate in state["containers"].values():
                plugin = cstate.get("dra_plugin")
                if cstate["state"] == "running" and plugin:
                    running = plugin
                    if plugin["registrable"] and now - plugin["since"] < self.timing["pluginRegister"]:
                        self.plugins_pending.add(name)
        record = self.dra_nodes.get(name)
        if running is None and record is None:
            return
        if record is None:
            record = self.dra_nodes[name] = {}
        record["registered"] = bool(running and running["registrable"]
                                    and now - running["since"] >= self.timing["pluginRegister"])
        record["index"] = running["index"] if running else {}
        slices = slices_by_node.get(name, [])
        if running is None:
            for item in slices:
                try:
                    self.cluster.delete(SLICES, "", item["metadata"]["name"])
                except ApiError:
                    pass
            del self.dra_nodes[name]
            return
        devices = running["devices"]
        if len(slices) == 1 and slices[0]["spec"].get("devices") == devices \
                and slices[0]["spec"].get("pool") == record.get("pool"):
            return
        pool = dict(record.get("pool") or {"name": name, "generation": 1, "resourceSliceCount": 1})
        if record.get("devices") is not None and record["devices"] != devices:
            pool["generation"] += 1
        record["pool"], record["devices"] = pool, devices
        spec = {"driver": gpu_model.DRA_DRIVER, "pool": pool, "nodeName": name, "devices": devices}
        try:
            if slices:
                item = copy.deepcopy(slices[0])
                item["spec"] = spec
                self.cluster.update(SLICES, "", item["metadata"]["name"], item, manager="gpu-kubelet-plugin",
                                    internal=True)
                for extra in slices[1:]:
                    self.cluster.delete(SLICES, "", extra["metadata"]["name"])
            else:
                self.cluster.create(SLICES, "", {
                    "apiVersion": SLICES.api_version, "kind": "ResourceSlice",
                    "metadata": {"generateName": f"00000-{gpu_model.DRA_DRIVER}-{name}-",
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                                      "uid": node["metadata"]["uid"], "controller": True}]},
                    "spec": spec}, manager="gpu-kubelet-plugin")
        except ApiError:
            record.pop("pool", None)
