"""Label selectors, field selectors, node affinity and taint tolerations.

Grammar of label selectors: k8s.io/apimachinery/pkg/labels/selector.go
(=, ==, !=, in, notin, exists, !exists). Field selectors: only =, == and !=,
and only the fields each resource registers (others answer 400, as
apiserver does: 'field label not supported'). Node affinity and tolerations:
k8s.io/component-helpers/scheduling/corev1.
"""

import re

from .store import ApiError

_SET = re.compile(r"^\s*(!?)\s*([A-Za-z0-9._/-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")


def _split_terms(text):
    terms, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current)
    return terms


def parse_label_selector(text):
    """A selector string -> list of (key, op, values)."""
    requirements = []
    for term in _split_terms(text or ""):
        match = _EQ.match(term)
        if match:
            key, op, value = match.groups()
            requirements.append((key, "!=" if op == "!=" else "=", [value]))
            continue
        match = _SET.match(term)
        if match and not (match.group(1) and match.group(3)):
            neg, key, op, values = match.groups()
            if op:
                requirements.append((key, op, [v.strip() for v in values.split(",") if v.strip()]))
            else:
                requirements.append((key, "!" if neg else "exists", []))
            continue
        raise ApiError(400, f"unable to parse requirement: found '{term.strip()}', expected: identifier",
                       "BadRequest")
    return requirements


def labels_match(requirements, labels):
    labels = labels or {}
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        if op == "=" and not (present and value == values[0]):
            return False
        if op == "!=" and present and value == values[0]:
            return False
        if op == "in" and not (present and value in values):
            return False
        if op == "notin" and present and value in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!" and present:
            return False
    return True


def label_selector_object_match(selector, labels):
    """metav1.LabelSelector (matchLabels + matchExpressions). An empty selector matches everything."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def parse_field_selector(text, res):
    allowed = {"metadata.name", "metadata.namespace"} | set(res.fields)
    requirements = []
    for term in _split_terms(text or ""):
        match = re.match(r"^\s*([A-Za-z0-9._]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not match:
            raise ApiError(400, f"invalid selector: '{text}'; can't understand '{term}'", "BadRequest")
        key, op, value = match.groups()
        if key not in allowed:
            raise ApiError(400, f'field label not supported: {key}', "BadRequest")
        requirements.append((key, op != "!=", value))
    return requirements


def field_value(obj, path):
    if path == "source":
        return (obj.get("source") or {}).get("component", "")
    value = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fields_match(requirements, obj):
    return all((field_value(obj, key) == value) == equal for key, equal, value in requirements)


def _node_requirement(expr, values_of):
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    present, value = values_of(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not (present and value in values)
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        try:
            number, bound = int(value), int(values[0])
        except (TypeError, ValueError, IndexError):
            return False
        return present and (number > bound if op == "Gt" else number < bound)
    return False


def node_selector_term_match(term, node):
    """A NodeSelectorTerm: every matchExpression and matchField holds; an empty term matches nothing."""
    labels = node["metadata"].get("labels") or {}
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for expr in exprs:
        if not _node_requirement(expr, lambda k: (k in labels, labels.get(k))):
            return False
    for expr in fields:
        if not _node_requirement(expr, lambda k: (k == "metadata.name", node["metadata"]["name"])):
            return False
    return True


def pod_matches_node_affinity(pod_spec, node):
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution (terms are ORed)."""
    labels = node["metadata"].get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(node_selector_term_match(term, node) for term in required.get("nodeSelectorTerms") or [])


def tolerates(toleration, taint):
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    op = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return op == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taints(tolerations, taints, effects=("NoSchedule", "NoExecute")):
    return [t for t in taints or [] if t["effect"] in effects
            and not any(tolerates(tol, t) for tol in tolerations or [])]
