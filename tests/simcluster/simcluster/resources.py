"""The API resources the simulated cluster serves, as data.

Discovery documents, URL routing, field selectors and list merge keys all
come from this table. Merge keys follow the ``patchMergeKey`` and
``x-kubernetes-list-map-keys`` markers of the upstream types
(k8s.io/api/core/v1/types.go and friends); a list not named here is atomic,
which is what the OpenAPI schema says for lists without a marker.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple = ()
    subresources: tuple = ()
    categories: tuple = ()
    # Resources whose spec changes bump metadata.generation.
    generation: bool = False
    # Field selectors the API server accepts besides metadata.name/namespace.
    fields: tuple = ()
    verbs: tuple = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
    # The first release that serves it by default ((major, minor)); () for every release.
    since: tuple = ()

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self):
        return (self.group, self.plural)


RESOURCES = [
    Resource("", "v1", "Namespace", "namespaces", False, ("ns",), ("status", "finalize"),
             fields=("status.phase",), verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    Resource("", "v1", "Node", "nodes", False, ("no",), ("status", "proxy"), fields=("spec.unschedulable",)),
    Resource("", "v1", "Pod", "pods", True, ("po",), ("status", "log", "eviction", "binding", "ephemeralcontainers"),
             categories=("all",),
             fields=("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                     "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")),
    Resource("", "v1", "ConfigMap", "configmaps", True, ("cm",)),
    Resource("", "v1", "Secret", "secrets", True, fields=("type",)),
    Resource("", "v1", "ServiceAccount", "serviceaccounts", True, ("sa",)),
    Resource("", "v1", "Service", "services", True, ("svc",), ("status",), categories=("all",)),
    Resource("", "v1", "Event", "events", True, ("ev",),
             fields=("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                     "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                     "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")),
    Resource("apps", "v1", "DaemonSet", "daemonsets", True, ("ds",), ("status",), ("all",), generation=True),
    Resource("apps", "v1", "Deployment", "deployments", True, ("deploy",), ("status", "scale"), ("all",),
             generation=True),
    Resource("apps", "v1", "ReplicaSet", "replicasets", True, ("rs",), ("status", "scale"), ("all",),
             generation=True),
    Resource("apps", "v1", "ControllerRevision", "controllerrevisions", True),
    Resource("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ("pdb",), ("status",),
             generation=True),
    Resource("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
    Resource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",)),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    Resource("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
    Resource("coordination.k8s.io", "v1", "Lease", "leases", True),
    # Dynamic Resource Allocation (pkg/registry/resource: no short names; a DeviceClass's spec changes bump
    # its generation, and so do a ResourceSlice's; slices select on spec.nodeName and spec.driver).
    # resource.k8s.io/v1 is served by default from 1.34 (DRA GA); before, the group is off by default.
    Resource("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", False, generation=True, since=(1, 34)),
    Resource("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", True, subresources=("status",),
             since=(1, 34)),
    Resource("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates", True, since=(1, 34)),
    Resource("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", False, generation=True,
             fields=("spec.nodeName", "spec.driver"), since=(1, 34)),
]

# Subresources that are their own kind in discovery (apiserver's storage map). Group and
# version are listed only where the storage names another group-version (installer.go sets
# them from rest.GroupVersionKindProvider, which eviction and scale implement; binding, log
# and proxy do not, so discovery shows just their kind).
SUBRESOURCE_KINDS = {
    ("pods", "eviction"): ("policy", "v1", "Eviction", ("create",)),
    ("pods", "binding"): (None, None, "Binding", ("create",)),
    ("pods", "log"): (None, None, "Pod", ("get",)),
    ("pods", "ephemeralcontainers"): (None, None, "Pod", ("get", "patch", "update")),
    ("nodes", "proxy"): (None, None, "NodeProxyOptions", ("create", "delete", "get", "patch", "update")),
    ("namespaces", "finalize"): (None, None, "Namespace", ("update",)),
    ("deployments", "scale"): ("autoscaling", "v1", "Scale", ("get", "patch", "update")),
    ("replicasets", "scale"): ("autoscaling", "v1", "Scale", ("get", "patch", "update")),
}

BY_KEY = {r.key: r for r in RESOURCES}
BY_KIND = {(r.group, r.kind): r for r in RESOURCES}


def served(res, release=None):
    """Whether a cluster of this release ((major, minor); None: any) serves the resource."""
    return release is None or not res.since or tuple(release) >= res.since


def group_versions(release=None):
    """{group: [version, ...]} in discovery order, core group excluded."""
    groups = {}
    for res in RESOURCES:
        if res.group and served(res, release):
            groups.setdefault(res.group, [])
            if res.version not in groups[res.group]:
                groups[res.group].append(res.version)
    return groups


def lookup(group, version, plural, release=None):
    res = BY_KEY.get((group, plural))
    if res is None or res.version != version or not served(res, release):
        return None
    return res


# Lists merged by key rather than replaced whole, by JSON path of the list with
# '*' for "any item" / "any map key". (patchMergeKey / listMapKeys upstream.)
_POD_SPEC = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "volumes": ("name",),
    "imagePullSecrets": ("name",),
    "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
    "resourceClaims": ("name",),
    "schedulingGates": ("name",),
    "readinessGates": None,
}
_CONTAINER = {
    "env": ("name",),
    "ports": ("containerPort", "protocol"),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "resizePolicy": ("resourceName",),
}
_STATUS_CONDITIONS = {"conditions": ("type",)}

MERGE_KEYS = {}


def _add(prefix, table):
    for name, keys in table.items():
        if keys:
            MERGE_KEYS[prefix + (name,)] = keys


for _tpl in [("spec",), ("spec", "template", "spec")]:
    _add(_tpl, _POD_SPEC)
    for _list in ("containers", "initContainers", "ephemeralContainers"):
        _add(_tpl + (_list, "*"), _CONTAINER)
_add(("metadata",), {"ownerReferences": ("uid",)})
_add(("status",), _STATUS_CONDITIONS)
_add(("status",), {"addresses": ("type",), "images": None})
_add(("status",), {"containerStatuses": ("name",), "initContainerStatuses": ("name",)})
_add(("spec",), {"ports": ("port", "protocol")})
# ResourceClaim status (resource/v1 types.go: reservedFor listMapKey uid; devices by driver, device, pool, shareID).
_add(("status",), {"reservedFor": ("uid",), "devices": ("driver", "device", "pool", "shareID")})

# Lists of scalars that merge as sets (x-kubernetes-list-type: set).
SET_LISTS = {("metadata", "finalizers"), ("spec", "finalizers")}


def merge_keys(path):
    """Merge keys of the list at path (a tuple of names, list items as '*')."""
    return MERGE_KEYS.get(tuple(path))
