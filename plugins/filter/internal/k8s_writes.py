# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: what a kubernetes.core write answered, for retrying it and for saying what happened.

kubernetes.core.k8s reports an API error as ``msg`` ("Failed to apply object: "
followed by the apiserver's metav1.Status as JSON) and ``reason`` (the HTTP
reason phrase). The Status carries the HTTP ``code``, the ``reason``
(InternalError, ServiceUnavailable, TooManyRequests, Conflict, Forbidden...)
and, for a server-side apply that clashes with another field manager, one
cause per field (``FieldManagerConflict``, ``conflict with "<manager>"``,
the field path): the apiserver's conflict error
(k8s.io/apimachinery/pkg/util/managedfields, conflict.go).

Tried again: 429 Too Many Requests (the apiserver's max-in-flight limit and
API Priority and Fairness answer it with Retry-After), 500, 502, 503 and 504
(an apiserver restarting, etcd timing out, a proxy in front of it) and a
request that got no answer. client-go retries such answers when they carry
Retry-After, and connection failures for reads; a server-side apply may be
tried again as freely, since applying the same object twice is idempotent.
Never a 4xx that says the request itself is wrong (400, 403, 404, 409, 422).
"""

from __future__ import annotations

import ast
import json
import re

from ansible.errors import AnsibleFilterError

RETRYABLE_CODES = (429, 500, 502, 503, 504)
_CONNECTION_RE = re.compile(r"Max retries exceeded|Connection refused|Connection reset|timed out|"
                            r"RemoteDisconnected|Temporary failure in name resolution", re.IGNORECASE)
_MANAGER_RE = re.compile(r'conflict with "([^"]+)"')


# The reason phrases of the HTTP answers worth trying again, for an answer whose body is no Status
# (a proxy or load balancer in front of the apiserver: HAProxy's HTML 503, Envoy's plain text).
_REASON_CODES = {"too many requests": 429, "internal server error": 500, "bad gateway": 502,
                 "service unavailable": 503, "gateway timeout": 504}
_LEADING_CODE_RE = re.compile(r"^\s*\(?(\d{3})\)?\b")


def _status_of(message):
    """The metav1.Status in a kubernetes.core error message, or None. The message may be the body as
    it came (text, or a bytes literal b'...'), or the whole text of a DynamicApiError (code, reason,
    headers - a dict whose braces come first - then the body)."""
    text = str(message or "")
    decoder = json.JSONDecoder()
    for start in [match.start() for match in re.finditer(r"\{", text)]:
        body = text[start:]
        if text[start - 2:start] == "b'":
            end = body.rfind("'")
            try:
                body = ast.literal_eval("b'" + body[:end + 1]).decode("utf-8", "replace") if end > 0 else body
            except (ValueError, SyntaxError):
                continue
        try:
            status, dummy = decoder.raw_decode(body)
        except ValueError:
            continue
        if isinstance(status, dict) and status.get("kind") == "Status":
            return status
    return None


def _failed(result):
    """Whether a result is a failure, also one that failed_when: false turned into an ok: ansible-core
    2.19 and later put an uncaught module exception in failed_when_suppressed_exception, with no msg."""
    if result.get("skipped"):
        return False
    if result.get("failed") or result.get("unreachable"):
        return True
    if any(result.get(key) for key in ("exception", "module_stderr", "failed_when_suppressed_exception")):
        return True
    # A k8s write that succeeded returns the object (result) and what it did (method).
    return "result" not in result and "method" not in result


def k8s_error(result):
    """A kubernetes.core.k8s result (one loop item) -> None when it succeeded, else
    {code, reason, message, managers, fields, retryable}: the Status's HTTP code (None when the
    request got no answer), reason and message, the field managers and fields of a conflict."""
    if not isinstance(result, dict):
        raise AnsibleFilterError("k8s_error: expected a task result (a dict), got %s" % type(result).__name__)
    if not _failed(result):
        return None
    message = result.get("msg") or ""
    status = _status_of(message)
    if status is None:
        text = " ".join(str(part) for part in (message, result.get("module_stderr") or "",
                                               result.get("failed_when_suppressed_exception") or "") if part)
        text = text.strip() or "no message"
        match = _LEADING_CODE_RE.match(str(message))
        reason = str(result.get("reason") or "")
        code = int(match.group(1)) if match else _REASON_CODES.get(reason.lower())
        return {"code": code, "reason": reason, "message": text[:1000], "managers": [], "fields": [],
                "retryable": code in RETRYABLE_CODES or bool(_CONNECTION_RE.search(text))}
    causes = (status.get("details") or {}).get("causes") or []
    conflicts = [cause for cause in causes if cause.get("reason") == "FieldManagerConflict"]
    managers = []
    for cause in conflicts:
        for manager in _MANAGER_RE.findall(cause.get("message") or ""):
            if manager not in managers:
                managers.append(manager)
    code = status.get("code")
    return {"code": code, "reason": status.get("reason") or str(result.get("reason") or ""),
            "message": status.get("message") or "", "managers": managers,
            "fields": [cause.get("field") for cause in conflicts if cause.get("field")],
            "retryable": code in RETRYABLE_CODES}


# kubectl's field managers (kubectl/pkg/cmd/*: "kubectl-" and the subcommand; server-side apply's
# default is "kubectl"), Helm 3's ("helm"): what each one is, in a user's words.
_KUBECTL_BY_HAND = ("kubectl-set", "kubectl-edit", "kubectl-patch", "kubectl-label", "kubectl-annotate",
                    "kubectl-scale", "kubectl-rollout", "kubectl-replace", "kubectl-create", "kubectl-taint")


def conflict_advice(manager):
    """What holds a field, said so that the way out fits it: a change made by hand with kubectl,
    kubectl apply (client- or server-side), a Helm release, or another controller."""
    manager = str(manager or "")
    if manager in _KUBECTL_BY_HAND:
        return ("%s is a change made by hand with `kubectl %s`: taking the field over puts the role's value back "
                "(change it through the role's settings instead)" % (manager, manager.split("-", 1)[1]))
    if manager == "kubectl-client-side-apply":
        return ("%s is `kubectl apply` of a manifest of its own (client-side): stop applying that manifest, "
                "or take the field over" % manager)
    if manager == "kubectl":
        return ("kubectl is `kubectl apply --server-side` of a manifest of its own: stop applying that manifest, "
                "or take the field over")
    if manager.startswith("helm"):
        return ("%s is a Helm release: uninstall the release that renders this object, or manage it with the "
                "role's Helm method instead" % manager)
    return ("%s is another manager (an operator or a controller): stop it managing this object, or it sets the "
            "field again after a take-over" % manager)


def k8s_retryable(result):
    """True when a kubernetes.core.k8s result failed in a way worth trying again (5xx, 429, no answer)."""
    error = k8s_error(result)
    return bool(error and error["retryable"])


def k8s_object_name(obj):
    """An object (a definition or one read back) -> "Kind namespace/name", "Kind name" when not namespaced."""
    if not isinstance(obj, dict) or not obj.get("kind"):
        return str(obj if obj is not None else "the object")
    meta = obj.get("metadata") or {}
    return "%s %s%s" % (obj["kind"], (meta.get("namespace") + "/") if meta.get("namespace") else "", meta.get("name"))


def _label(result):
    return k8s_object_name(result.get("item"))


def k8s_writes(results):
    """The results of a kubernetes.core.k8s loop over object definitions -> {done, conflicts, failed}:
    ``done`` the objects written ({object, changed, attempts}), ``conflicts`` those another field
    manager holds a field of ({object, item, managers, fields, message, advice: what each manager is
    and the way out that fits it}), ``failed`` the others that failed
    ({object, code, reason, message, attempts}), each named as Kind namespace/name."""
    summary = {"done": [], "conflicts": [], "failed": []}
    for result in results or []:
        if not isinstance(result, dict) or result.get("skipped"):
            continue
        error = k8s_error(result)
        name = _label(result)
        if error is None:
            summary["done"].append({"object": name, "changed": bool(result.get("changed")),
                                    "attempts": result.get("attempts") or 1})
        elif error["code"] == 409 and error["managers"]:
            summary["conflicts"].append({"object": name, "item": result.get("item"), "managers": error["managers"],
                                         "fields": error["fields"], "message": error["message"],
                                         "advice": "; ".join(conflict_advice(m) for m in error["managers"])})
        else:
            summary["failed"].append({"object": name, "code": error["code"], "reason": error["reason"],
                                      "message": error["message"], "attempts": result.get("attempts") or 1})
    return summary


def namespace_terminating(namespaces):
    """Namespace objects (a k8s_info read) -> a sentence on the first one being deleted (it has a
    deletionTimestamp): since when, and what the namespace controller says holds it (its conditions
    that are True: content or finalizers remaining, a deletion that failed). Empty when none is."""
    for namespace in namespaces or []:
        meta = (namespace or {}).get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            continue
        status = namespace.get("status") or {}
        held = ["%s: %s" % (condition.get("type"), condition.get("message") or condition.get("reason") or "")
                for condition in status.get("conditions") or [] if condition.get("status") == "True"]
        finalizers = ((namespace.get("spec") or {}).get("finalizers") or []) + (meta.get("finalizers") or [])
        return ("namespace %s is being deleted (%s since %s%s%s). Kubernetes refuses new objects in it until it is "
                "gone; wait for its deletion to finish or remove what holds it, then run again." % (
                    meta.get("name"), status.get("phase") or "Terminating", meta["deletionTimestamp"],
                    ("; " + "; ".join(held)) if held else "",
                    ("; finalizers: " + ", ".join(finalizers)) if finalizers else ""))
    return ""


POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"


def namespace_pod_security(namespaces, setting="the role's namespace setting"):
    """Namespace objects (a k8s_info read) -> a sentence on the first one whose Pod Security admission
    would refuse privileged pods (label pod-security.kubernetes.io/enforce other than "privileged":
    "baseline" and "restricted" both forbid hostPath volumes, host namespaces and added capabilities),
    with the fix; empty when none does. ``setting`` names the role's namespace variable. Only the
    enforce label refuses pods; warn and audit only report, and a namespace without the label gets
    the cluster's default level (the apiserver's AdmissionConfiguration), which no label shows."""
    for namespace in namespaces or []:
        meta = (namespace or {}).get("metadata") or {}
        level = (meta.get("labels") or {}).get(POD_SECURITY_ENFORCE)
        if level is None or level == "privileged":
            continue
        return ("namespace %s enforces Pod Security level %s (label %s=%s): Kubernetes refuses the pods of its "
                "DaemonSet there, which need the privileged level (hostPath volumes). Label it privileged "
                "(kubectl label --overwrite namespace %s %s=privileged) or give the role a namespace of its own "
                "(%s), then run again" % (meta.get("name"), json.dumps(level), POD_SECURITY_ENFORCE, level,
                                          meta.get("name"), POD_SECURITY_ENFORCE, setting))
    return ""


class FilterModule(object):
    """Filters over what kubernetes.core writes answered."""

    def filters(self):
        return {
            "k8s_error": k8s_error,
            "k8s_object_name": k8s_object_name,
            "k8s_retryable": k8s_retryable,
            "k8s_writes": k8s_writes,
            "namespace_pod_security": namespace_pod_security,
            "namespace_terminating": namespace_terminating,
        }
