# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The results site.yml keeps of its cluster part for the fleet report (gpufleet.nvidia.report): each GPU host's
last device plugin check, DRA check and smoke verdict, merged run after run, and where they are kept: a JSON file
on the controller, or a ConfigMap in the cluster (gpufleet.nvidia.internal.cluster_results_store), whose data holds the
same JSON, gzip-compressed under its binaryData when a large fleet's text would not fit a ConfigMap.

Pure data handling, shared by the cluster_results filter, the fleet_report filter and the store module. Bad
input raises ValueError."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import re

# The results' format number and writer.
RESULTS_FORMAT = 1
RESULTS_WRITER = "gpufleet.nvidia.site"
# The keys of the ConfigMap that holds them: the JSON as text, or gzip-compressed in binaryData.
CONFIGMAP_KEY = "results.json"
CONFIGMAP_GZIP_KEY = "results.json.gz"
# The API server refuses a ConfigMap whose data passes 1 MiB; past this much text the results are compressed
# (JSON rows of many alike hosts shrink about tenfold), leaving room for the object's own metadata.
CONFIGMAP_TEXT_LIMIT = 768 * 1024
CONFIGMAP_LIMIT = 1024 * 1024
# The role variable each part comes from.
REPORT_VARS = {"device_plugin": "gpu_device_plugin_report", "smoke_test": "gpu_smoke_test_report",
               "dra": "gpu_dra_driver_report"}
_DIGITS_RE = re.compile(r"(\d+)")


def natural_key(text):
    """Sort key that orders embedded numbers by value: node2 before node10."""
    parts = _DIGITS_RE.split(str(text).lower())
    return [int(part) if index % 2 else part for index, part in enumerate(parts)], str(text)


def results_hosts(value, name="the results file"):
    """(host -> entry, problem) from the results' text or data; the problem is a sentence or None."""
    if value is None or value == "":
        return {}, None
    if isinstance(value, (bytes, str)):
        try:
            value = json.loads(value)
        except ValueError as err:
            return {}, "%s is not JSON (%s)" % (name, err)
    if not isinstance(value, dict) or not isinstance(value.get("hosts"), dict):
        return {}, "%s is not what %s writes (no 'hosts' mapping)" % (name, RESULTS_WRITER)
    if value.get("format") != RESULTS_FORMAT:
        return {}, "%s has format %r; this report reads format %d" % (name, value.get("format"), RESULTS_FORMAT)
    return dict((str(host), entry) for host, entry in value["hosts"].items() if isinstance(entry, dict)), None


def _rows_of(rows, what):
    if rows is None:
        return []
    if not isinstance(rows, list) or not all(isinstance(row, dict) and row.get("host") for row in rows):
        raise ValueError(
            "cluster_results: %s must be a list of rows with a 'host' (%s), got %r" % (what, REPORT_VARS[what], rows))
    return rows


def dra_kinds(devices):
    """What a DRA node publishes, counted: [{type, product, profile, count}] (GPUs first, then MIG devices)."""
    counts = {}
    for device in devices or []:
        if not isinstance(device, dict):
            continue
        key = (str(device.get("type") or "unknown"), device.get("product"), device.get("profile"))
        counts[key] = counts.get(key, 0) + 1
    order = sorted(counts, key=lambda key: (
        {"gpu": 0, "mig": 1}.get(key[0], 2), key[0], natural_key(key[1] or ""), natural_key(key[2] or "")))
    return [{"type": kind, "product": product, "profile": profile, "count": counts[(kind, product, profile)]}
            for kind, product, profile in order]


def _kept(part, row, time):
    """A role's row as the results keep it: without ``host``, with its time; a DRA row keeps what its node
    publishes counted (``publishes``), not every device."""
    dropped = ("host", "devices") if part == "dra" else ("host",)
    kept = dict((key, value) for key, value in row.items() if key not in dropped)
    if part == "dra":
        kept["publishes"] = dra_kinds(row.get("devices"))
    kept["time"] = time
    return kept


def merged_results(previous, device_plugin=None, smoke_test=None, time=None, dra=None):
    """The results with this run's rows merged in (see the cluster_results filter's documentation).

    ``previous``: the current text or data, or empty (content that is not ours is replaced).
    ``device_plugin``, ``smoke_test``, ``dra``: the roles' report rows, each with ``host``; None when the
    part did not run. ``time``: when they were taken (ISO 8601, UTC), required when there are rows.
    """
    hosts, dummy = results_hosts(previous)
    hosts = copy.deepcopy(hosts)
    # A host this run left out (outside --limit, unreachable) keeps its earlier rows.
    updates = [("device_plugin", row) for row in _rows_of(device_plugin, "device_plugin") if not row.get("excluded")]
    updates += [("smoke_test", row) for row in _rows_of(smoke_test, "smoke_test")
                if (row.get("ok") is not None or row.get("tested") is False) and row.get("why") != "excluded"]
    updates += [("dra", row) for row in _rows_of(dra, "dra") if not row.get("excluded")]
    if updates and not (isinstance(time, str) and time):
        raise ValueError("cluster_results: give the time of the rows (ISO 8601, UTC), got %r" % (time,))
    for part, row in updates:
        entry = hosts.setdefault(str(row["host"]), {})
        entry["node"] = row.get("node") or entry.get("node") or str(row["host"])
        entry[part] = _kept(part, row, time)
    return {
        "format": RESULTS_FORMAT,
        "written_by": RESULTS_WRITER,
        "hosts": dict((host, hosts[host]) for host in sorted(hosts, key=natural_key)),
    }


def configmap_where(namespace, name):
    """How messages name the ConfigMap."""
    return "ConfigMap %s/%s" % (namespace, name)


def configmap_text(configmap, where="the results ConfigMap"):
    """(text, problem) of the results a ConfigMap holds: its data's JSON, or its binaryData's gzip-compressed
    JSON; ("", None) for no ConfigMap, or one without either key."""
    if not configmap:
        return "", None
    if not isinstance(configmap, dict):
        return "", "%s is not a ConfigMap object: %r" % (where, configmap)
    data = configmap.get("data") or {}
    binary = configmap.get("binaryData") or {}
    if CONFIGMAP_GZIP_KEY in binary:
        try:
            return gzip.decompress(base64.b64decode(binary[CONFIGMAP_GZIP_KEY])).decode("utf-8"), None
        except (ValueError, OSError, EOFError, UnicodeDecodeError) as err:
            return "", "%s: %s is not gzip-compressed text (%s)" % (where, CONFIGMAP_GZIP_KEY, err)
    return data.get(CONFIGMAP_KEY) or "", None


def configmap_content(results):
    """(data, binaryData, size) of a ConfigMap holding ``results``: the JSON as text while it stays under
    CONFIGMAP_TEXT_LIMIT, else gzip-compressed (mtime 0: the same results give the same bytes). ValueError
    when even the compressed results would not fit a ConfigMap."""
    text = json.dumps(results, indent=1, sort_keys=False)
    if len(text.encode("utf-8")) <= CONFIGMAP_TEXT_LIMIT:
        return {CONFIGMAP_KEY: text}, None, len(text.encode("utf-8"))
    packed = base64.b64encode(gzip.compress(text.encode("utf-8"), mtime=0)).decode("ascii")
    if len(packed) > CONFIGMAP_LIMIT - 4096:
        raise ValueError(
            "the results of %d hosts are %d bytes compressed, more than a ConfigMap holds (1 MiB); keep them in a "
            "file instead (gpufleet_cluster_results)" % (len(results.get("hosts") or {}), len(packed)))
    return None, {CONFIGMAP_GZIP_KEY: packed}, len(packed)
