"""What the API server does to an object before it is stored.

Order as in kube-apiserver: decode (unknown fields per fieldValidation, wrong
types answer 400), defaulting (pkg/apis/core/v1/defaults.go,
pkg/apis/apps/v1/defaults.go), mutating admission (ServiceAccount,
DefaultTolerationSeconds, Priority, RuntimeClass), validation against the
cluster version's OpenAPI schema (kubernetes-validate's bundled schemas) and
the rules apiserver's validation.go adds (names, labels, selectors,
immutable fields, extended resources), then validating admission (Pod
Security, kubernetes.io/docs/concepts/security/pod-security-standards/).
"""

import json
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

import jsonschema
from referencing import Registry, Resource as SchemaResource
import importlib_resources

from .store import ApiError, invalid

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
SUBDOMAIN_TEXT = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_TEXT = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
              "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
              "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "n": Decimal("1e-9"),
           "u": Decimal("1e-6")}
SYSTEM_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


def quantity(value):
    """A resource.Quantity string or number -> Decimal; None when malformed."""
    text = str(value)
    match = QUANTITY.match(text)
    if not match:
        return None
    number, suffix = match.groups()
    try:
        if suffix and suffix[0] in "eE" and suffix not in _SUFFIX:
            return Decimal(number + suffix)
        return Decimal(number) * Decimal(_SUFFIX[suffix])
    except (InvalidOperation, KeyError):
        return None


# ----------------------------------------------------------------- schemas

@lru_cache(maxsize=8)
def _registry(folder):
    base = importlib_resources.files("kubernetes_validate").joinpath("kubernetes-json-schema").joinpath(folder)
    definitions = json.loads(base.joinpath("_definitions.json").read_text())
    return base, SchemaResource.from_contents(definitions) @ Registry()


@lru_cache(maxsize=256)
def _validator(folder, kind, api_version):
    base, registry = _registry(folder)
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = base.joinpath(f"{kind.lower()}-{group_version}.json")
    try:
        schema = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    registry = SchemaResource.from_contents(schema) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@lru_cache(maxsize=64)
def schema_folder(version, strict):
    """The schema folder for the version; cached: listing the package's folders costs more than the
    validation it is looked up for, and they do not change while the simulator runs."""
    minor = re.match(r"^v?(\d+)\.(\d+)", version)
    folders = sorted((int(m.group(1)), int(m.group(2))) for m in (
        re.match(r"^v(\d+)\.(\d+)\.0-local$", p.name) for p in
        importlib_resources.files("kubernetes_validate").joinpath("kubernetes-json-schema").iterdir()) if m)
    wanted = (int(minor.group(1)), int(minor.group(2)))
    chosen = max((f for f in folders if f <= wanted), default=folders[0])
    return f"v{chosen[0]}.{chosen[1]}.0-local" + ("-strict" if strict else "")


def _path_text(path):
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def decode(obj, version, mode):
    """Unknown fields: Strict -> 400, Warn -> dropped with a warning, Ignore -> dropped. Returns warnings."""
    validator = _validator(schema_folder(version, True), obj.get("kind", ""), obj.get("apiVersion", ""))
    if validator is None:
        return []
    unknown = []
    for error in validator.iter_errors(obj):
        for leaf in [error] + list(error.context or []):
            if leaf.validator == "additionalProperties" and isinstance(leaf.instance, dict):
                known = set((leaf.schema.get("properties") or {}).keys())
                for extra in sorted(set(leaf.instance) - known):
                    unknown.append((list(leaf.absolute_path), extra, leaf.instance))
    if not unknown:
        return []
    names = [_path_text(path + [extra]) for path, extra, _holder in unknown]
    if mode == "Strict":
        text = ", ".join(f'unknown field "{n}"' for n in names)
        raise ApiError(400, f"{_cannot_handle(obj)}strict decoding error: {text}", "BadRequest")
    for _path, extra, holder in unknown:
        holder.pop(extra, None)
    return [] if mode == "Ignore" else [f'unknown field "{n}"' for n in names]


# Decoding errors read as apiserver's: the serializer's prefix, and encoding/json's names of
# JSON value kinds and Go types (UnmarshalTypeError).
_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "bool", list: "array", dict: "object"}


def _cannot_handle(obj):
    kind, version = obj.get("kind", ""), str(obj.get("apiVersion", "")).rsplit("/", 1)[-1]
    return f'{kind} in version "{version}" cannot be handled as a {kind}: '


def _go_type(schema):
    types = schema.get("type") or []
    types = [types] if isinstance(types, str) else types
    if "integer" in types:
        return schema.get("format") or "int64"
    return {"string": "string", "boolean": "bool", "number": "float64", "array": "[]interface {}"}.get(
        next((t for t in types if t != "null"), ""), "map[string]interface {}")


def schema_causes(obj, version):
    validator = _validator(schema_folder(version, False), obj.get("kind", ""), obj.get("apiVersion", ""))
    if validator is None:
        return []
    causes = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        field = _path_text(list(error.absolute_path))
        if error.validator == "type":
            raise ApiError(400, f"{_cannot_handle(obj)}json: cannot unmarshal {_JSON_TYPES.get(type(error.instance), 'object')} "
                                f"into Go struct field {field} of type {_go_type(error.schema)}", "BadRequest")
        if error.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", error.message)
            for name in missing:
                causes.append({"reason": "FieldValueRequired", "message": "Required value",
                               "field": f"{field}.{name}" if field else name})
        elif error.validator == "enum":
            causes.append({"reason": "FieldValueNotSupported", "field": field,
                           "message": f"Unsupported value: {json.dumps(error.instance)}"})
        else:
            causes.append({"field": field, "message": f"Invalid value: {json.dumps(error.instance)}: "
                                                      f"{error.message}"})
    return causes


# --------------------------------------------------------------- defaulting

def canonical_quantity(value):
    """resource.Quantity as the API server serialises it: always a string, in canonical form
    (k8s.io/apimachinery/pkg/api/resource: 2 -> "2", "2000m" -> "2", 0.5 -> "500m")."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return value
    amount = quantity(value)
    if amount is None:
        return value
    text = str(value)
    if isinstance(value, str) and not text.endswith("m") and not re.match(r"^[0-9.]+[eE]", text):
        return text
    if amount == amount.to_integral_value():
        return str(int(amount))
    milli = amount * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return text


def canonical_resources(resources):
    for section in ("limits", "requests"):
        if isinstance(resources.get(section), dict):
            resources[section] = {k: canonical_quantity(v) for k, v in resources[section].items()}


def _default_container(container, pod_level):
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = container.get("image") or ""
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in container:
        latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
        container["imagePullPolicy"] = "Always" if latest else "IfNotPresent"
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")
    resources = container.setdefault("resources", {})
    if isinstance(resources, dict):
        canonical_resources(resources)
    if pod_level and resources.get("limits"):
        requests = resources.setdefault("requests", {})
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)
    for env in container.get("env") or []:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if field_ref is not None:
            field_ref.setdefault("apiVersion", "v1")


def default_pod_spec(spec, pod_level):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(container, dict):
            _default_container(container, pod_level)
    for volume in spec.get("volumes") or []:
        for source in ("configMap", "secret"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 420)
        if isinstance(volume.get("hostPath"), dict):
            volume["hostPath"].setdefault("type", "")
    if isinstance(spec.get("overhead"), dict):
        spec["overhead"] = {k: canonical_quantity(v) for k, v in spec["overhead"].items()}
    if pod_level:
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


def default(obj):
    kind = obj.get("kind")
    spec = obj.get("spec")
    if kind == "Pod" and isinstance(spec, dict):
        default_pod_spec(spec, True)
    elif kind in ("DaemonSet", "Deployment", "ReplicaSet") and isinstance(spec, dict):
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            default_pod_spec(template_spec, False)
        spec.setdefault("revisionHistoryLimit", 10)
        if kind == "DaemonSet":
            strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
            if strategy.get("type", "RollingUpdate") == "RollingUpdate":
                strategy.setdefault("type", "RollingUpdate")
                rolling = strategy.setdefault("rollingUpdate", {})
                rolling.setdefault("maxUnavailable", 1)
                rolling.setdefault("maxSurge", 0)
        if kind == "Deployment":
            spec.setdefault("replicas", 1)
            spec.setdefault("progressDeadlineSeconds", 600)
            strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
            if strategy.get("type") == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                rolling.setdefault("maxUnavailable", "25%")
                rolling.setdefault("maxSurge", "25%")
        if kind == "ReplicaSet":
            spec.setdefault("replicas", 1)
    elif kind == "Namespace":
        # SetDefaults_NamespaceStatus; spec.finalizers is not defaulted (the create strategy adds "kubernetes").
        obj.setdefault("status", {}).setdefault("phase", "Active")
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif kind == "Node" and isinstance(obj.get("status"), dict):
        for section in ("capacity", "allocatable"):
            if isinstance(obj["status"].get(section), dict):
                obj["status"][section] = {k: canonical_quantity(v) for k, v in obj["status"][section].items()}
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
    elif kind == "ResourceClaim" and isinstance(spec, dict):
        from . import dra
        dra.default_claim_spec(spec)
    elif kind == "ResourceClaimTemplate" and isinstance(spec, dict) and isinstance(spec.get("spec"), dict):
        from . import dra
        dra.default_claim_spec(spec["spec"])


# --------------------------------------------------------------- validation

def _name_causes(res, meta):
    causes = []
    name = meta.get("name")
    if not name:
        causes.append({"reason": "FieldValueRequired", "field": "metadata.name",
                       "message": "Required value: name or generateName is required"})
    elif res.kind == "Namespace" and not DNS_LABEL.match(name):
        causes.append({"field": "metadata.name", "message": f'Invalid value: "{name}": {LABEL_TEXT}'})
    elif res.kind != "Namespace" and (not DNS_SUBDOMAIN.match(name) or len(name) > 253):
        causes.append({"field": "metadata.name", "message": f'Invalid value: "{name}": {SUBDOMAIN_TEXT}'})
    for kind in ("labels", "annotations"):
        for key, value in (meta.get(kind) or {}).items():
            prefix, _sep, short = key.rpartition("/")
            if not LABEL_NAME.match(short) or len(short) > 63 or (prefix and not DNS_SUBDOMAIN.match(prefix)):
                causes.append({"field": f"metadata.{kind}", "message": f'Invalid value: "{key}": name part must '
                               "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                               "alphanumeric character"})
            if kind == "labels" and (not isinstance(value, str) or not LABEL_VALUE.match(value) or len(value) > 63):
                causes.append({"field": "metadata.labels", "message": f'Invalid value: "{value}": a valid label '
                               "must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                               "and must start and end with an alphanumeric character"})
    return causes


def _pod_spec_causes(spec, prefix, pod_level):
    causes = []
    names = set()
    for group in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(group) or []):
            here = f"{prefix}.{group}[{index}]"
            name = container.get("name", "")
            if not name:
                # An empty name is only "Required" (validateContainerCommon); a missing one the schema reports.
                if "name" in container:
                    causes.append({"reason": "FieldValueRequired", "field": f"{here}.name",
                                   "message": "Required value"})
            elif not DNS_LABEL.match(name):
                causes.append({"field": f"{here}.name", "message": f'Invalid value: "{name}": {LABEL_TEXT}'})
            elif name in names:
                causes.append({"reason": "FieldValueDuplicate", "field": f"{here}.name",
                               "message": f'Duplicate value: "{name}"'})
            names.add(name)
            if not container.get("image"):
                causes.append({"reason": "FieldValueRequired", "field": f"{here}.image", "message": "Required value"})
            resources = container.get("resources") or {}
            for section in ("limits", "requests"):
                for rname, value in (resources.get(section) or {}).items():
                    amount = quantity(value)
                    if amount is None:
                        raise ApiError(400, "quantities must match the regular expression "
                                            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'", "BadRequest")
                    if "/" in rname and not rname.startswith(("kubernetes.io/", "requests.")) \
                            and amount != amount.to_integral_value():
                        causes.append({"field": f"{here}.resources.{section}[{rname}]",
                                       "message": f'Invalid value: "{value}": must be an integer'})
            limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
            for rname in set(limits) | set(requests):
                if "/" in rname and not rname.startswith("kubernetes.io/"):
                    if rname not in limits:
                        causes.append({"reason": "FieldValueRequired",
                                       "field": f"{here}.resources.limits",
                                       "message": "Required value: Limit must be set for non overcommitable "
                                                  "resources"})
                    elif rname in requests and quantity(limits[rname]) != quantity(requests[rname]):
                        causes.append({"field": f"{here}.resources.requests[{rname}]",
                                       "message": f'Invalid value: "{requests[rname]}": must be equal to '
                                                  f"{rname} limit of {limits[rname]}"})
    if not spec.get("containers"):
        causes.append({"reason": "FieldValueRequired", "field": f"{prefix}.containers", "message": "Required value"})
    causes += _resource_claim_causes(spec, prefix)
    if pod_level and spec.get("restartPolicy") not in (None, "Always", "OnFailure", "Never"):
        # validateRestartPolicy (pkg/apis/core/validation/validation.go).
        causes.append({"reason": "FieldValueNotSupported", "field": f"{prefix}.restartPolicy",
                       "message": f'Unsupported value: {json.dumps(spec["restartPolicy"])}: supported values: '
                                  '"Always", "OnFailure", "Never"'})
    if not pod_level and spec.get("restartPolicy", "Always") != "Always":
        causes.append({"reason": "FieldValueNotSupported", "field": f"{prefix}.restartPolicy",
                       "message": f'Unsupported value: "{spec["restartPolicy"]}": supported values: "Always"'})
    for index, tol in enumerate(spec.get("tolerations") or []):
        if tol.get("operator") == "Exists" and tol.get("value"):
            causes.append({"field": f"{prefix}.tolerations[{index}].operator",
                           "message": f'Invalid value: "{tol.get("value")}": value must be empty when `operator` '
                                      "is 'Exists'"})
    return causes


def _resource_claim_causes(spec, prefix):
    """validatePodResourceClaims and validateResourceClaimNames (pkg/apis/core/validation): each entry names
    a claim or a template, not both; a container's claims are entries of the pod."""
    causes, names = [], []
    for index, entry in enumerate(spec.get("resourceClaims") or []):
        here = f"{prefix}.resourceClaims[{index}]"
        given = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if entry.get(k)]
        if len(given) != 1:
            causes.append({"field": here, "message": "Invalid value: " + ("null" if not given else "\"{...}\"") +
                           ": must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"})
        if entry.get("name") in names:
            causes.append({"reason": "FieldValueDuplicate", "field": f"{here}.name",
                           "message": f'Duplicate value: "{entry.get("name")}"'})
        names.append(entry.get("name"))
    for group in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(group) or []):
            for position, claim in enumerate((container.get("resources") or {}).get("claims") or []):
                if claim.get("name") not in names:
                    causes.append({"reason": "FieldValueNotFound",
                                   "field": f"{prefix}.{group}[{index}].resources.claims[{position}]",
                                   "message": f'Not found: "{claim.get("name")}": must be one of the names in '
                                              f"pod.spec.resourceClaims: {', '.join(str(n) for n in names) or 'none'}"})
    return causes


def validate(res, obj, old, version):
    """Everything that makes an object invalid; raises ApiError."""
    meta = obj.get("metadata") or {}
    causes = _name_causes(res, meta) + schema_causes(obj, version)
    kind = res.kind
    spec = obj.get("spec") or {}
    if kind == "Pod":
        causes += _pod_spec_causes(spec, "spec", True)
        if old is not None:
            causes += _pod_update_causes(old, obj)
    if kind in ("DaemonSet", "Deployment", "ReplicaSet"):
        template = spec.get("template") or {}
        causes += _pod_spec_causes(template.get("spec") or {}, "spec.template.spec", False)
        selector = spec.get("selector")
        from .selectors import label_selector_object_match
        if not selector:
            causes.append({"reason": "FieldValueRequired", "field": "spec.selector", "message": "Required value"})
        elif not label_selector_object_match(selector, (template.get("metadata") or {}).get("labels")):
            labels = (template.get("metadata") or {}).get("labels") or {}
            # field.Error renders a map as its JSON (apimachinery field/errors.go, ErrorBody).
            shown = json.dumps(labels, sort_keys=True, separators=(",", ":"))
            causes.append({"field": "spec.template.metadata.labels",
                           "message": f"Invalid value: {shown}: `selector` does not match template `labels`"})
        if old is not None and selector != (old.get("spec") or {}).get("selector"):
            causes.append({"field": "spec.selector", "message": f"Invalid value: "
                                                                f"{json.dumps(selector, separators=(',', ':'))}: "
                                                                "field is immutable"})
    if kind == "Node":
        for index, taint in enumerate(spec.get("taints") or []):
            if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                causes.append({"reason": "FieldValueNotSupported", "field": f"spec.taints[{index}].effect",
                               "message": f'Unsupported value: "{taint.get("effect")}": supported values: '
                                          '"NoSchedule", "PreferNoSchedule", "NoExecute"'})
    if kind == "PodDisruptionBudget" and spec.get("minAvailable") is not None \
            and spec.get("maxUnavailable") is not None:
        causes.append({"field": "spec", "message": "Invalid value: ...: minAvailable and maxUnavailable cannot be "
                                                   "both set"})
    if kind in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"):
        causes += _dra_causes(kind, obj, old)
    if causes:
        raise invalid(res, meta.get("name", ""), causes)


def _dra_causes(kind, obj, old):
    """pkg/apis/resource/validation: a claim's and a template's spec are immutable, a slice's driver, pool
    name and node too; expressions are compiled as the API server compiles them."""
    from . import dra
    spec = obj.get("spec") or {}
    old_spec = None if old is None else (old.get("spec") or {})
    if kind == "DeviceClass":
        return dra.selector_causes(spec.get("selectors"), "spec.selectors")
    if kind == "ResourceSlice":
        return dra.slice_causes(spec, old_spec)
    if old is not None and spec != old_spec:
        return [{"field": "spec", "message": f"Invalid value: {json.dumps(spec, separators=(',', ':'))}: "
                                             "field is immutable"}]
    if kind == "ResourceClaimTemplate":
        return dra.claim_spec_causes(spec.get("spec") or {}, "spec.spec")
    return dra.claim_spec_causes(spec, "spec")


def _pod_update_causes(old, new):
    def comparable(spec):
        spec = json.loads(json.dumps(spec))
        for group in ("containers", "initContainers"):
            for container in spec.get(group) or []:
                container.pop("image", None)
        for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "nodeName"):
            spec.pop(key, None)
        return spec

    # validateOnlyAddedTolerations: every toleration the pod has must stay, only its tolerationSeconds
    # may change (among them those admission added, DefaultTolerationSeconds's NoExecute ones).
    def without_seconds(toleration):
        return dict((key, value) for key, value in (toleration or {}).items() if key != "tolerationSeconds")
    kept = [without_seconds(t) for t in (new.get("spec") or {}).get("tolerations") or []]
    for toleration in (old.get("spec") or {}).get("tolerations") or []:
        if without_seconds(toleration) not in kept:
            return [{"reason": "FieldValueForbidden", "field": "spec.tolerations",
                     "message": "Forbidden: existing toleration can not be modified except its tolerationSeconds"}]
    if comparable(old.get("spec") or {}) != comparable(new.get("spec") or {}):
        return [{"reason": "FieldValueForbidden", "field": "spec",
                 "message": "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
                            "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to "
                            "be set to 1 if it was previously negative)"}]
    return []


# ------------------------------------------------------------ pod security

_BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                  "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
_RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret"}


def pod_security_violations(spec, level):
    """Pod Security Standards checks of a pod spec at level baseline or restricted, worded as the admission
    plugin words them (k8s.io/pod-security-admission/policy)."""
    if level not in ("baseline", "restricted"):
        return []
    out = []
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        out.append(f"host namespaces ({', '.join(hosts)})")
    privileged = [c["name"] for c in containers if (c.get("securityContext") or {}).get("privileged")]
    if privileged:
        out.append(f'privileged ({_containers(privileged)} must not set securityContext.privileged=true)')
    for container in containers:
        added = ((container.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        extra = [cap for cap in added if cap not in _BASELINE_CAPS]
        if extra:
            out.append(f'non-default capabilities (container "{container["name"]}" must not include '
                       f'{", ".join(json.dumps(c) for c in extra)} in securityContext.capabilities.add)')
    host_paths = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        out.append(f"hostPath volumes ({'volume' if len(host_paths) == 1 else 'volumes'} "
                   f"{', '.join(json.dumps(v) for v in host_paths)})")
    ports = [(c["name"], p["hostPort"]) for c in containers for p in c.get("ports") or [] if p.get("hostPort")]
    if ports:
        out.append(f'hostPort ({", ".join(f"container {json.dumps(n)} uses hostPort {p}" for n, p in ports)})')
    if level != "restricted":
        return out
    pod_sc = spec.get("securityContext") or {}
    escalating = [c["name"] for c in containers
                  if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]
    if escalating:
        out.append(f"allowPrivilegeEscalation != false ({_containers(escalating)} must set "
                   "securityContext.allowPrivilegeEscalation=false)")
    undropped = [c["name"] for c in containers
                 if "ALL" not in (((c.get("securityContext") or {}).get("capabilities") or {}).get("drop") or [])]
    if undropped:
        out.append(f'unrestricted capabilities ({_containers(undropped)} must set '
                   'securityContext.capabilities.drop=["ALL"])')
    volumes = [(v["name"], next((k for k in v if k != "name"), "")) for v in spec.get("volumes") or []]
    bad = [(n, t) for n, t in volumes if t not in _RESTRICTED_VOLUMES]
    if bad:
        out.append(f"restricted volume types ({', '.join(f'volume {json.dumps(n)} uses restricted volume type {json.dumps(t)}' for n, t in bad)})")
    non_root = [c["name"] for c in containers
                if (c.get("securityContext") or {}).get("runAsNonRoot",
                                                        pod_sc.get("runAsNonRoot")) is not True]
    if non_root:
        out.append(f'runAsNonRoot != true (pod or {_containers(non_root)} must set securityContext.runAsNonRoot=true)')
    seccomp = [c["name"] for c in containers
               if ((c.get("securityContext") or {}).get("seccompProfile")
                   or pod_sc.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost")]
    if seccomp:
        out.append(f'seccompProfile (pod or {_containers(seccomp)} must set securityContext.seccompProfile.type to '
                   '"RuntimeDefault" or "Localhost")')
    return out


def _containers(names):
    return (f'container {json.dumps(names[0])}' if len(names) == 1
            else f'containers {", ".join(json.dumps(n) for n in names)}')
