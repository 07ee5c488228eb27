# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind the rolling upgrade's drain: what refused an eviction, and what still holds a node.

kubernetes.core.k8s_drain evicts a node's pods one after the other and fails
at the first eviction the API server refuses, with
``Failed to delete pod <namespace>/<name> due to: <reason>`` (its
``evict_pods``). ``<reason>`` is the ``message`` of the API's Status when the
answer's Content-Type is ``application/json``, else the raw body, else
``<code> Reason: <HTTP reason>``. A PodDisruptionBudget that allows no
disruption makes the eviction subresource answer 429 TooManyRequests,
"Cannot evict pod as it would violate the pod's disruption budget.", with a
cause of type DisruptionBudget naming the budget (kubernetes
pkg/registry/core/pod/storage/eviction.go, checkAndDecrement); API Priority
and Fairness also answers 429 when it sheds load. Both pass with time, and
``kubectl drain`` retries them every 5 seconds until its timeout; any other
refusal does not pass by waiting.
"""

from __future__ import annotations

import json
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter.internal.device_plugin import drain_leftovers

_EVICTION_FAILED_RE = re.compile(r"^Failed to delete pod (?P<namespace>[^/\s]+)/(?P<name>\S+) due to: (?P<reason>.*)\Z",
                                 re.S)
_PASSES_WITH_TIME_RE = re.compile(r"disruption budget|too many requests", re.I)


def _api_status(text):
    """The API's Status object when ``text`` is its raw JSON body, else None."""
    try:
        status = json.loads(text)
    except ValueError:
        return None
    return status if isinstance(status, dict) and status.get("kind") == "Status" else None


def drain_refusal(result):
    """What stopped a kubernetes.core.k8s_drain run (its registered result), and whether to try again.

    Returns ``pod`` ('namespace/name' or None), ``namespace``, ``name``, ``reason`` (the API's message, or the
    module's when no eviction was refused), ``budgets`` (the DisruptionBudget causes the API gave, when its raw
    Status came through) and ``retry`` (True only for an eviction refused with 429, which passes with time).
    """
    if not isinstance(result, dict):
        raise AnsibleFilterError("drain_refusal expects the registered result of kubernetes.core.k8s_drain (a dict), "
                                 "got %s: %r" % (type(result).__name__, result))
    refusal = {"pod": None, "namespace": None, "name": None, "reason": None, "budgets": [], "retry": False}
    if not result.get("failed"):
        return refusal
    message = str(result.get("msg") or "")
    refusal["reason"] = message
    match = _EVICTION_FAILED_RE.match(message)
    if not match:
        return refusal
    refusal.update(namespace=match.group("namespace"), name=match.group("name"),
                   pod="%s/%s" % (match.group("namespace"), match.group("name")))
    reason = match.group("reason").strip()
    status = _api_status(reason)
    code = api_reason = None
    if status:
        reason = str(status.get("message") or reason)
        code, api_reason = status.get("code"), status.get("reason")
        causes = (status.get("details") or {}).get("causes") or []
        refusal["budgets"] = [str(cause["message"]) for cause in causes
                              if isinstance(cause, dict) and cause.get("reason") == "DisruptionBudget"
                              and cause.get("message")]
    refusal["reason"] = reason
    refusal["retry"] = bool(code == 429 or api_reason == "TooManyRequests" or _PASSES_WITH_TIME_RE.search(reason))
    return refusal


def _requirement_met(labels, requirement):
    key, operator = requirement.get("key"), requirement.get("operator")
    values = requirement.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def selects(budget, pod):
    """Whether PodDisruptionBudget ``budget`` covers ``pod``: same namespace, and its label selector matches.

    policy/v1: an empty selector ({}) selects every pod of the namespace, a missing one selects none.
    """
    if ((budget.get("metadata") or {}).get("namespace")) != ((pod.get("metadata") or {}).get("namespace")):
        return False
    selector = (budget.get("spec") or {}).get("selector")
    if selector is None:
        return False
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_requirement_met(labels, requirement) for requirement in selector.get("matchExpressions") or [])


def _budget_words(budget):
    metadata = budget.get("metadata") or {}
    status = budget.get("status") or {}
    return "PodDisruptionBudget %s/%s: %s disruptions allowed, %s healthy of %s needed" % (
        metadata.get("namespace"), metadata.get("name"), status.get("disruptionsAllowed", "?"),
        status.get("currentHealthy", "?"), status.get("desiredHealthy", "?"))


def drain_blockers(pods, budgets=None):
    """Each pod a drain should have evicted that is still on the node, with what holds it there.

    ``pods`` are the node's Pod objects, ``budgets`` the cluster's PodDisruptionBudgets (k8s_info resources).
    One line per pod, in the order given: 'namespace/name (what holds it)'.
    """
    for name, value in (("pods", pods), ("budgets", budgets)):
        if value is not None and not isinstance(value, list):
            raise AnsibleFilterError("drain_blockers expects %s as a list of objects (k8s_info resources), got %s: %r"
                                     % (name, type(value).__name__, value))
    pods, budgets = pods or [], budgets or []
    left = set(drain_leftovers(pods))
    lines = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        key = "%s/%s" % (metadata.get("namespace"), metadata.get("name"))
        if key not in left:
            continue
        words = []
        if metadata.get("deletionTimestamp"):
            words.append("terminating since %s" % metadata["deletionTimestamp"])
        words.extend(_budget_words(budget) for budget in budgets if selects(budget, pod))
        if not words:
            words.append("not terminating; no PodDisruptionBudget selects it")
        lines.append("%s (%s)" % (key, "; ".join(words)))
    return lines


# The annotation the collection's playbooks put on a Node with the cordon they make (tasks/drain_node.yml), and take
# off with the uncordon: a node the collection parked is never taken for one its owner cordoned.
CORDON_ANNOTATION = "gpufleet.nvidia.com/cordoned-by"


def cordon_marker(node):
    """The collection's cordon marker of a Node object (its annotation, parsed), or None.

    ``{'playbook': ..., 'reason': ..., 'time': ...}``; a value that is not a JSON object reads as
    ``{'playbook': <the text>}``, so a hand-written marker still counts as the collection's.
    """
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    if CORDON_ANNOTATION not in annotations:
        return None
    value = annotations[CORDON_ANNOTATION]
    if isinstance(value, dict):  # ansible-core before 2.19 turns a JSON text into a dict when it sets a fact
        return value
    try:
        marker = json.loads(value)
    except (TypeError, ValueError):
        marker = None
    return marker if isinstance(marker, dict) else {"playbook": str(value)}


def _marker_words(marker):
    words = "cordoned by gpufleet.nvidia's %s playbook" % (marker.get("playbook") or "unknown")
    if marker.get("reason"):
        words += " (%s)" % marker["reason"]
    if marker.get("time"):
        words += " at %s" % marker["time"]
    return words


def node_service_states(rows, nodes, pods=None):
    """Whether each GPU host's Node serves in the cluster, for the driver changes site.yml may make.

    ``rows`` are ``{'host': inventory name, 'node': Node name}``; ``nodes`` the cluster's Node objects (api_list
    resources with at least metadata.name, metadata.annotations and spec.unschedulable); ``pods`` maps a Node's name
    to its Pod objects (read for the Nodes cordoned by their owner only). Returns ``{host: {'state', 'reason'}}``:

    - ``unknown``: no Node of that name (a new node, or one that joined under another name): as where no cluster was
      asked, a loaded driver is moved, or its node rebooted, only with gpu_driver_allow_disruption;
    - ``drained``: a Node its owner cordoned (no collection marker) with no pod left that a drain evicts
      (tasks/drain_node.yml's rule: DaemonSet, static and finished pods stay);
    - ``serving``: a schedulable Node; a cordoned one that still runs such pods (or whose pods were not read); a
      Node the collection's own playbooks cordoned (the marker names which): that cordon is theirs to undo.
    """
    if not isinstance(nodes, list):
        raise AnsibleFilterError("node_service_states expects the Nodes as a list of objects (api_list resources), "
                                 "got %s: %r" % (type(nodes).__name__, nodes))
    by_name = {((node or {}).get("metadata") or {}).get("name"): node for node in nodes}
    pods = pods or {}
    states = {}
    for row in rows or []:
        name = row.get("node")
        node = by_name.get(name)
        if node is None:
            # A new node, or one that joined under another name (kubelet registers the lowercased hostname, a
            # --hostname-override, a cloud's DNS name): not known to serve, not known to be drained either.
            states[row["host"]] = {"state": "unknown", "reason": "the cluster has no Node named %s (a new node, or "
                                   "gpufleet_node_name is not the name it joined under)" % name}
            continue
        marker = cordon_marker(node)
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        if marker is not None and cordoned:
            state = {"state": "serving", "reason": "its Node %s is %s, not by its owner" % (name, _marker_words(marker))}
        elif not cordoned:
            state = {"state": "serving", "reason": "its Node %s is schedulable (not cordoned)" % name}
        elif name not in pods:
            state = {"state": "serving", "reason": "its Node %s is cordoned, but its pods were not read" % name}
        else:
            left = drain_leftovers(pods[name])
            if left:
                state = {"state": "serving", "reason": "its Node %s is cordoned but still runs %d pod(s) a drain "
                         "evicts: %s" % (name, len(left), ", ".join(left[:5]) + (", ..." if len(left) > 5 else ""))}
            else:
                state = {"state": "drained", "reason": "its Node %s is cordoned and drained by its owner" % name}
        states[row["host"]] = state
    return states


class FilterModule(object):
    """Rolling upgrade drain filters."""

    def filters(self):
        return {
            "drain_refusal": drain_refusal,
            "drain_blockers": drain_blockers,
            "cordon_marker": cordon_marker,
            "node_service_states": node_service_states,
        }
