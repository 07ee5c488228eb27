"""The HTTP side: the Kubernetes REST API over the simulated cluster.

Paths, verbs, query parameters and status codes follow the API concepts page
(kubernetes.io/docs/reference/using-api/api-concepts/) and the API reference:
discovery (/version, /api, /apis, APIResourceList with subresources), list
and watch with resourceVersion and selectors, create/get/update/patch/delete
and deletecollection, dryRun=All, fieldManager and fieldValidation, Table
output for kubectl (meta.k8s.io/v1 Table; columns, their definitions and cells as
kube-apiserver's printers in pkg/printers/internalversion/printers.go serve them,
descriptions from the types' OpenAPI docs), pods/log, pods/eviction (policy/v1,
concepts/scheduling-eviction/api-eviction/: 429 when a PodDisruptionBudget
allows no disruption), pods/binding, the status subresources and namespaces/finalize
(PUT only: FinalizeREST implements Update alone, pkg/registry/core/namespace/storage/storage.go).
Errors are metav1.Status objects. Requests need the bearer token written into
the kubeconfig (401 otherwise).
"""

import copy
import datetime
import json
import re
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from . import openapi
from .controllers import pod_ready
from .resources import BY_KEY, RESOURCES, SUBRESOURCE_KINDS, group_versions, lookup, served
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector, \
    label_selector_object_match
from .store import ApiError, not_found, now_rfc3339

PATCH_TYPES = {"application/json-patch+json": "json", "application/merge-patch+json": "merge",
               "application/strategic-merge-patch+json": "strategic", "application/apply-patch+yaml": "apply",
               "application/apply-patch+cbor": None}
PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version")


def _age(stamp):
    try:
        then = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return "<unknown>"
    seconds = int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    return f"{minutes // 60}h"


def _pod_row(pod):
    statuses = pod.get("status", {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    reason = pod.get("status", {}).get("reason") or pod.get("status", {}).get("phase", "Pending")
    for status in statuses:
        state = status.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state and reason not in ("Succeeded",):
            reason = state["terminated"].get("reason") or reason
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    restarts = sum(s.get("restartCount", 0) for s in statuses)
    return [pod["metadata"]["name"], f"{ready}/{len(pod['spec'].get('containers') or [])}", reason, restarts,
            _age(pod["metadata"].get("creationTimestamp")), pod.get("status", {}).get("podIP") or "<none>",
            pod["spec"].get("nodeName") or "<none>", "<none>", "<none>"]


def _node_row(node):
    ready = next((c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"), None)
    status = "Ready" if ready and ready["status"] == "True" else "NotReady"
    if node["spec"].get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(k.split("/", 1)[1] for k in node["metadata"].get("labels") or {}
                   if k.startswith("node-role.kubernetes.io/")) or ["<none>"]
    info = node["status"].get("nodeInfo") or {}
    address = next((a["address"] for a in node["status"].get("addresses") or [] if a["type"] == "InternalIP"), "")
    return [node["metadata"]["name"], status, ",".join(roles), _age(node["metadata"].get("creationTimestamp")),
            info.get("kubeletVersion", ""), address, "<none>", info.get("osImage", ""), info.get("kernelVersion", ""),
            info.get("containerRuntimeVersion", "")]


def _ds_row(ds):
    status = ds.get("status") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(((ds["spec"]["template"].get("spec") or {})
                                                       .get("nodeSelector") or {}).items())) or "<none>"
    containers = ds["spec"]["template"]["spec"].get("containers") or []
    return [ds["metadata"]["name"], status.get("desiredNumberScheduled", 0), status.get("currentNumberScheduled", 0),
            status.get("numberReady", 0), status.get("updatedNumberScheduled", 0), status.get("numberAvailable", 0),
            selector, _age(ds["metadata"].get("creationTimestamp")), ",".join(c["name"] for c in containers),
            ",".join(c["image"] for c in containers),
            ",".join(f"{k}={v}" for k, v in sorted((ds["spec"]["selector"].get("matchLabels") or {}).items()))]


# Descriptions of the columns that print ObjectMeta fields (their OpenAPI descriptions).
NAME_DOC = ("Name must be unique within a namespace. Is required when creating resources, although some resources "
            "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
            "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
            "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
AGE_DOC = ("CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
           "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. "
           "It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. "
           "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")


def _int_or_string(value):
    """intstr.IntOrString's String(): an int in decimal, a string as it is; N/A when unset (printers.go)."""
    return "N/A" if value is None else str(value)


def _pdb_row(pdb):
    return [pdb["metadata"]["name"], _int_or_string(pdb["spec"].get("minAvailable")),
            _int_or_string(pdb["spec"].get("maxUnavailable")),
            int((pdb.get("status") or {}).get("disruptionsAllowed") or 0),
            _age(pdb["metadata"].get("creationTimestamp"))]


def _claim_state(claim):
    """The STATE column of kubectl get resourceclaims (printers.go, resourceClaimState)."""
    words = ["deleted"] if claim["metadata"].get("deletionTimestamp") else []
    status = claim.get("status") or {}
    if not status.get("allocation"):
        if not words:
            words.append("pending")
    else:
        words.append("allocated")
        if status.get("reservedFor"):
            words.append("reserved")
    return ",".join(words)


TABLES = {
    "Pod": ([("Name", "string", "name", 0), ("Ready", "string", "", 0), ("Status", "string", "", 0),
             ("Restarts", "string", "", 0), ("Age", "string", "", 0), ("IP", "string", "", 1),
             ("Node", "string", "", 1), ("Nominated Node", "string", "", 1), ("Readiness Gates", "string", "", 1)],
            _pod_row),
    "Node": ([("Name", "string", "name", 0), ("Status", "string", "", 0), ("Roles", "string", "", 0),
              ("Age", "string", "", 0), ("Version", "string", "", 0), ("Internal-IP", "string", "", 1),
              ("External-IP", "string", "", 1), ("OS-Image", "string", "", 1), ("Kernel-Version", "string", "", 1),
              ("Container-Runtime", "string", "", 1)], _node_row),
    "DaemonSet": ([("Name", "string", "name", 0), ("Desired", "integer", "", 0), ("Current", "integer", "", 0),
                   ("Ready", "integer", "", 0), ("Up-to-date", "integer", "", 0), ("Available", "integer", "", 0),
                   ("Node Selector", "string", "", 0), ("Age", "string", "", 0), ("Containers", "string", "", 1),
                   ("Images", "string", "", 1), ("Selector", "string", "", 1)], _ds_row),
    "PodDisruptionBudget": ([("Name", "string", "name", 0, NAME_DOC),
                             ("Min Available", "string", "", 0, "The minimum number of pods that must be available."),
                             ("Max Unavailable", "string", "", 0,
                              "The maximum number of pods that may be unavailable."),
                             ("Allowed Disruptions", "integer", "", 0,
                              "Calculated number of pods that may be disrupted at this time."),
                             ("Age", "string", "", 0, AGE_DOC)], _pdb_row),
    "ResourceSlice": ([("Name", "string", "name", 0), ("Node", "string", "", 0), ("Driver", "string", "", 0),
                       ("Pool", "string", "", 0), ("Age", "string", "", 0)],
                      lambda rs: [rs["metadata"]["name"], (rs.get("spec") or {}).get("nodeName") or "",
                                  (rs.get("spec") or {}).get("driver", ""),
                                  ((rs.get("spec") or {}).get("pool") or {}).get("name", ""),
                                  _age(rs["metadata"].get("creationTimestamp"))]),
    "ResourceClaim": ([("Name", "string", "name", 0), ("State", "string", "", 0), ("Age", "string", "", 0)],
                      lambda rc: [rc["metadata"]["name"], _claim_state(rc), _age(rc["metadata"].get("creationTimestamp"))]),
    "DeviceClass": ([("Name", "string", "name", 0), ("Age", "string", "", 0)],
                    lambda dc: [dc["metadata"]["name"], _age(dc["metadata"].get("creationTimestamp"))]),
    "ResourceClaimTemplate": ([("Name", "string", "name", 0), ("Age", "string", "", 0)],
                              lambda t: [t["metadata"]["name"], _age(t["metadata"].get("creationTimestamp"))]),
    "Namespace": ([("Name", "string", "name", 0), ("Status", "string", "", 0), ("Age", "string", "", 0)],
                  lambda ns: [ns["metadata"]["name"], ns.get("status", {}).get("phase", ""),
                              _age(ns["metadata"].get("creationTimestamp"))]),
}


def table(res, items, include, rv):
    columns, row = TABLES.get(res.kind, ([("Name", "string", "name", 0), ("Created At", "date", "", 0)],
                                         lambda o: [o["metadata"]["name"], o["metadata"].get("creationTimestamp")]))
    rows = []
    for obj in items:
        partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
        rows.append({"cells": row(obj), "object": obj if include == "Object" else
                     (None if include == "None" else partial)})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": [{"name": column[0], "type": column[1], "format": column[2],
                                   "description": column[4] if len(column) > 4 else column[0],
                                   "priority": column[3]} for column in columns], "rows": rows}


def discovery_resources(group, version, release=None):
    out = []
    for res in RESOURCES:
        if res.group != group or res.version != version or not served(res, release):
            continue
        entry = {"name": res.plural, "singularName": res.kind.lower(), "namespaced": res.namespaced,
                 "kind": res.kind, "verbs": list(res.verbs),
                 "storageVersionHash": re.sub(r"[^A-Za-z0-9]", "", res.kind)[:11] + "="}
        if res.short_names:
            entry["shortNames"] = list(res.short_names)
        if res.categories:
            entry["categories"] = list(res.categories)
        out.append(entry)
        for sub in res.subresources:
            sub_group, sub_version, sub_kind, verbs = SUBRESOURCE_KINDS.get(
                (res.plural, sub), (None, None, res.kind, ("get", "patch", "update")))
            sub_entry = {"name": f"{res.plural}/{sub}", "singularName": "", "namespaced": res.namespaced,
                         "kind": sub_kind, "verbs": list(verbs)}
            if sub_group is not None:
                sub_entry.update(group=sub_group, version=sub_version)
            out.append(sub_entry)
    return out


class Server:
    """Owns the HTTP server, the controllers' thread and the token."""

    def __init__(self, cluster, controllers, token, host="127.0.0.1", port=0, certificates=None):
        self.cluster = cluster
        self.controllers = controllers
        self.token = token
        self.stopping = threading.Event()
        handler = type("Handler", (Handler,), {"server_state": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.scheme = "http"
        if certificates:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certificates["server.crt"], certificates["server.key"])
            context.set_alpn_protocols(["http/1.1"])
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.threads = []

    @property
    def url(self):
        host, port = self.httpd.server_address[:2]
        return f"{self.scheme}://{host}:{port}"

    def _loop(self):
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.controllers.tick()
            except Exception as err:  # pylint: disable=broad-except  # a controller bug must not stop the API
                print(f"controller error: {err!r}", flush=True)
                import traceback
                traceback.print_exc()
            self.stopping.wait(max(0.0, self.cluster.timing["tick"] - (time.monotonic() - started)))

    def start(self):
        for target in (self.httpd.serve_forever, self._loop):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self):
        self.stopping.set()
        with self.cluster.store.lock:
            self.cluster.store.changed.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_state = None
    _raw = None

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        return

    # ------------------------------------------------------------ plumbing
    def _send(self, code, body, content_type="application/json", warnings=(), headers=None):
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for warning in warnings:
            self.send_header("Warning", f'299 - {json.dumps(warning)}')
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, err):
        headers = {"Retry-After": str(err.retry_after)} if err.retry_after else None
        # A request refused before its body was read (401, a fault, a 404 route) still has the body on
        # the connection: read it, as a real server does, or the client's next request on the same
        # kept-alive connection would start in the middle of it.
        self._raw_body()
        self._send(err.code, err.status(), headers=headers)

    def _read_chunked(self):
        """A chunked request body (HTTP/1.1; kubectl replace --raw sends its file so)."""
        raw = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return raw
            raw += self.rfile.read(size)
            self.rfile.readline()

    def _raw_body(self):
        """The request's body, read from the connection once."""
        if self._raw is None:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                self._raw = self._read_chunked()
            else:
                length = int(self.headers.get("Content-Length") or 0)
                self._raw = self.rfile.read(length) if length else b""
        return self._raw

    def _body(self):
        raw = self._raw_body()
        if not raw:
            return None
        content_type = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if content_type not in ("application/json", "application/yaml", "*/*") and content_type not in PATCH_TYPES:
            # Not decoded here (application/vnd.kubernetes.protobuf, application/cbor): 415, as
            # apiserver answers a media type it has no serializer for (handlers/rest.go).
            raise ApiError(415, 'the body of the request was in an unknown format - accepted media types '
                                'include: application/json, application/yaml', "UnsupportedMediaType")
        try:
            if content_type in ("application/yaml", "application/apply-patch+yaml"):
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as err:
            raise ApiError(400, f"error decoding request body: {err}", "BadRequest") from err

    def do_GET(self):  # pylint: disable=invalid-name
        self._dispatch("GET")

    def do_HEAD(self):  # pylint: disable=invalid-name
        self._dispatch("GET")

    def do_POST(self):  # pylint: disable=invalid-name
        self._dispatch("POST")

    def do_PUT(self):  # pylint: disable=invalid-name
        self._dispatch("PUT")

    def do_PATCH(self):  # pylint: disable=invalid-name
        self._dispatch("PATCH")

    def do_DELETE(self):  # pylint: disable=invalid-name
        self._dispatch("DELETE")

    def _dispatch(self, verb):
        state = self.server_state
        self._raw = None
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        try:
            if path.startswith("/simcluster/"):
                self._admin(verb, path)
                return
            # Anonymous requests may read the health checks and /version: the default
            # system:public-info-viewer ClusterRole is bound to system:unauthenticated
            # (kubernetes.io/docs/reference/access-authn-authz/rbac/#discovery-roles);
            # a wrong token is still 401.
            anonymous = "Authorization" not in self.headers and verb == "GET" and path in PUBLIC_PATHS
            if self.headers.get("Authorization") != f"Bearer {state.token}" and not anonymous:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            cluster = state.cluster
            with cluster.lock:
                cluster.requests += 1
                key = f"{verb} {re.sub(r'/namespaces/[^/]+', '/namespaces/*', path)}"
                cluster.request_counts[key] = cluster.request_counts.get(key, 0) + 1
            fault = cluster.faults.active("api-errors")
            if fault and (not fault.get("verb") or fault["verb"] == verb) \
                    and re.search(fault.get("path", ""), path):
                cluster.faults.consume(fault)
                code = int(fault.get("code", 500))
                raise ApiError(code, fault.get("message", "simulated fault: the server could not handle the "
                                                          "request") if code != 429 else
                               "the server has received too many requests and has asked us to try again later",
                               retry_after=1 if code == 429 else None)
            self._route(verb, path)
        except ApiError as err:
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            pass

    # --------------------------------------------------------------- admin
    def _admin(self, verb, path):
        cluster = self.server_state.cluster
        if path == "/simcluster/v1/faults" and verb == "POST":
            fault = cluster.faults.add(self._body() or {})
            self._send(201, fault)
        elif path == "/simcluster/v1/faults" and verb == "DELETE":
            cluster.faults.clear()
            self._send(200, {"cleared": True})
        elif path == "/simcluster/v1/faults":
            self._send(200, {"faults": cluster.faults.items})
        elif path == "/simcluster/v1/stats":
            if verb == "DELETE":
                with cluster.lock:
                    cluster.requests = 0
                    cluster.request_counts = {}
            self._send(200, {"requests": cluster.requests, "byPath": cluster.request_counts})
        else:
            raise ApiError(404, "404 page not found", "NotFound")

    # -------------------------------------------------------------- routing
    def _route(self, verb, path):
        cluster = self.server_state.cluster
        if path in ("/healthz", "/livez", "/readyz"):
            self._send(200, "ok", "text/plain; charset=utf-8")
            return
        if path == "/version":
            major, minor = cluster.version.split(".")[:2]
            self._send(200, {"major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
                             "gitVersion": f"v{cluster.version}", "gitCommit": "0" * 40, "gitTreeState": "clean",
                             "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
                             "platform": "linux/amd64"})
            return
        if path == "/openapi/v3":
            self._send(200, openapi.index(cluster.release))
            return
        if path.startswith("/openapi/v3/"):
            parts = path[len("/openapi/v3/"):].split("/")
            group, version = ("", parts[1]) if parts[0] == "api" and len(parts) == 2 else (
                (parts[1], parts[2]) if parts[0] == "apis" and len(parts) == 3 else (None, None))
            doc = openapi.document(group, version, cluster.release) if version else None
            if doc is None:
                raise ApiError(404, "404 page not found", "NotFound")
            self._send(200, doc)
            return
        if path == "/api":
            host = self.headers.get("Host", "")
            self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})
            return
        if path == "/apis":
            groups = [{"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in versions],
                       "preferredVersion": {"groupVersion": f"{g}/{versions[0]}", "version": versions[0]}}
                      for g, versions in group_versions(cluster.release).items()]
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            return
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 2:
            group = parts[1]
            if len(parts) == 2:
                versions = group_versions(cluster.release).get(group)
                if not versions:
                    raise ApiError(404, "the server could not find the requested resource", "NotFound")
                self._send(200, {"kind": "APIGroup", "apiVersion": "v1", "name": group,
                                 "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                                 "preferredVersion": {"groupVersion": f"{group}/{versions[0]}",
                                                      "version": versions[0]}})
                return
            version, rest = parts[2], parts[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if not rest:
            resources = discovery_resources(group, version, cluster.release)
            if not resources:
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
            self._send(200, {"kind": "APIResourceList", "apiVersion": "v1",
                             "groupVersion": f"{group}/{version}" if group else version, "resources": resources})
            return
        namespace, name, sub = None, None, None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        res = lookup(group, version, plural, cluster.release)
        if res is None or (namespace is not None and not res.namespaced):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if len(rest) > 1:
            name = rest[1]
        if len(rest) > 2:
            sub = rest[2]
            if sub not in res.subresources:
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if res.namespaced and name is not None and namespace is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        self._resource(verb, res, namespace, name, sub)

    def _options(self):
        dry_run = self.query.get("dryRun")
        if dry_run not in (None, "All"):
            raise ApiError(422, f'dryRun: Unsupported value: "{dry_run}": supported values: "All"', "Invalid")
        validation = self.query.get("fieldValidation", "Warn") or "Warn"
        if validation not in ("Ignore", "Warn", "Strict"):
            raise ApiError(400, f'fieldValidation: Unsupported value: "{validation}"', "BadRequest")
        manager = self.query.get("fieldManager")
        if manager is None:
            agent = self.headers.get("User-Agent", "unknown")
            manager = agent.split("/", 1)[0]
        return dry_run == "All", manager[:128], validation

    def _resource(self, verb, res, namespace, name, sub):
        cluster = self.server_state.cluster
        warnings = []
        dry_run, manager, validation = self._options()
        if name is None:
            if verb == "GET":
                if self.query.get("watch") in ("1", "true"):
                    self._watch(res, namespace)
                else:
                    self._list(res, namespace)
                return
            if verb == "POST":
                body = self._body()
                if not isinstance(body, dict):
                    raise ApiError(400, "Object 'Kind' is missing in request body", "BadRequest")
                obj = cluster.create(res, namespace or "", body, dry_run, manager, validation, warnings=warnings)
                self._send(201, obj, warnings=warnings)
                return
            if verb == "DELETE":
                self._delete_collection(res, namespace, dry_run)
                return
            raise ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")
        if sub == "log":
            self._log(namespace, name)
            return
        if sub == "eviction":
            self._evict(res, namespace, name, dry_run)
            return
        if sub == "binding":
            self._bind(namespace, name)
            return
        if sub == "finalize" and verb != "PUT":
            raise ApiError(405, "the server does not allow this method on the requested resource", "MethodNotAllowed")
        subresource = sub if sub in ("status", "finalize") else None
        if verb == "GET":
            obj = cluster.store.get(res, namespace, name)
            if obj is None:
                raise not_found(res, name)
            if "as=Table" in (self.headers.get("Accept") or ""):
                obj = table(res, [obj], self.query.get("includeObject", "Metadata"), obj["metadata"]["resourceVersion"])
            self._send(200, obj)
        elif verb == "PUT":
            body = self._body()
            if not isinstance(body, dict):
                raise ApiError(400, "Object 'Kind' is missing in request body", "BadRequest")
            obj = cluster.update(res, namespace or "", name, body, dry_run, manager, subresource, validation,
                                 warnings)
            self._send(200, obj, warnings=warnings)
        elif verb == "PATCH":
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            patch_type = PATCH_TYPES.get(content_type)
            if patch_type is None:
                raise ApiError(415, f"the body of the request was in an unknown format - accepted media types "
                                    f"include: {', '.join(t for t, v in PATCH_TYPES.items() if v)}",
                               "UnsupportedMediaType")
            force = self.query.get("force") in ("true", "1")
            if "force" in self.query and patch_type != "apply":
                raise ApiError(422, "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be "
                                    "specified for non-apply patch", "Invalid")
            existed = cluster.store.peek(res, namespace or "", name) is not None
            obj = cluster.patch(res, namespace or "", name, patch_type, self._body(), dry_run,
                                # Apply needs fieldManager in the query; other writes default it from the user agent.
                                self.query.get("fieldManager") if patch_type == "apply" else manager,
                                force, subresource, validation, warnings)
            self._send(200 if existed else 201, obj, warnings=warnings)
        elif verb == "DELETE":
            options = self._delete_options()
            # DeleteOptions in the body may ask for the dry run too (kubectl delete --dry-run=server does).
            dry_run = dry_run or options.get("dryRun") == ["All"]
            obj = cluster.delete(res, namespace or "", name, options, dry_run)
            if cluster.store.peek(res, namespace or "", name) is None and res.kind not in ("Pod", "Namespace"):
                obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                       "details": {"name": name, **({"group": res.group} if res.group else {}), "kind": res.plural,
                                   "uid": obj["metadata"]["uid"]}}
            self._send(200, obj)
        else:
            raise ApiError(405, "the server does not allow this method on the requested resource",
                           "MethodNotAllowed")

    def _delete_options(self):
        """DeleteOptions from the body (read once) with the query's parameters over them."""
        options = self._body() or {}
        for key in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents"):
            if key in self.query:
                value = self.query[key]
                options[key] = int(value) if key == "gracePeriodSeconds" else (
                    value == "true" if key == "orphanDependents" else value)
        return options

    # ------------------------------------------------------- list and watch
    def _selectors(self, res):
        labels = parse_label_selector(self.query.get("labelSelector", ""))
        fields = parse_field_selector(self.query.get("fieldSelector", ""), res)
        return labels, fields

    def _list(self, res, namespace):
        cluster = self.server_state.cluster
        labels, fields = self._selectors(res)
        with cluster.lock:
            # Shallow copies: the items are only serialised, less their kind and apiVersion.
            items = cluster.store.list(res, namespace, lambda o: labels_match(labels, o["metadata"].get("labels"))
                                       and fields_match(fields, o), deep=False)
            rv = str(cluster.store.rv)
        limit = int(self.query.get("limit") or 0)
        cont = self.query.get("continue")
        start = int(cont) if cont and cont.isdigit() else 0
        metadata = {"resourceVersion": rv}
        if limit and start + limit < len(items):
            metadata["continue"] = str(start + limit)
            metadata["remainingItemCount"] = len(items) - start - limit
        items = items[start:start + limit] if limit else items[start:]
        if "as=Table" in (self.headers.get("Accept") or ""):
            body = table(res, items, self.query.get("includeObject", "Metadata"), rv)
            body["metadata"].update({k: v for k, v in metadata.items() if k != "resourceVersion"})
            self._send(200, body)
            return
        # Items of a list carry no kind or apiVersion (the list says them once; kubernetes/kubernetes#3030).
        for item in items:
            item.pop("apiVersion", None)
            item.pop("kind", None)
        self._send(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": metadata,
                         "items": items})

    def _chunk(self, data):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, res, namespace):
        state = self.server_state
        store = state.cluster.store
        labels, fields = self._selectors(res)

        def visible(obj):
            return obj is not None and (namespace in (None, "") or obj["metadata"].get("namespace") == namespace) \
                and labels_match(labels, obj["metadata"].get("labels")) and fields_match(fields, obj)

        timeout = float(self.query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        rv_text = self.query.get("resourceVersion", "")
        initial = []
        expired = None
        with store.lock:
            if rv_text in ("", "0"):
                initial = store.list(res, namespace, visible, deep=False)
                last = store.rv
            else:
                try:
                    last = int(rv_text)
                except ValueError as err:
                    raise ApiError(400, f"resourceVersion: Invalid value: \"{rv_text}\"", "BadRequest") from err
                try:
                    store.events_since(last, {res.key})
                except ApiError as err:
                    initial = None
                    expired = err
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            if initial is None:
                self._chunk(json.dumps({"type": "ERROR", "object": expired.status()}).encode() + b"\n")
                self.wfile.write(b"0\r\n\r\n")
                return
            for obj in initial:
                self._chunk(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
            if self.query.get("allowWatchBookmarks") == "true" and self.query.get("sendInitialEvents") == "true":
                self._chunk(json.dumps({"type": "BOOKMARK", "object": {
                    "kind": res.kind, "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(last),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}}).encode() + b"\n")
            while time.monotonic() < deadline and not state.stopping.is_set():
                with store.lock:
                    entries = store.events_since(last, {res.key})
                    if not entries:
                        store.changed.wait(min(1.0, max(0.0, deadline - time.monotonic())))
                        entries = store.events_since(last, {res.key})
                out = []
                for rv, _key, kind, obj, old in entries:
                    last = rv
                    now_in, was_in = visible(obj), visible(old) if kind == "MODIFIED" else None
                    if kind == "MODIFIED" and now_in and not was_in:
                        out.append(("ADDED", obj))
                    elif kind == "MODIFIED" and was_in and not now_in:
                        out.append(("DELETED", obj))
                    elif now_in:
                        out.append((kind, obj))
                for kind, obj in out:
                    self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _delete_collection(self, res, namespace, dry_run):
        cluster = self.server_state.cluster
        labels, fields = self._selectors(res)
        options = self._delete_options()
        dry_run = dry_run or options.get("dryRun") == ["All"]
        deleted = []
        with cluster.lock:
            for obj in cluster.store.list(res, namespace, lambda o: labels_match(labels, o["metadata"].get("labels"))
                                          and fields_match(fields, o), deep=False):
                deleted.append(cluster.delete(res, obj["metadata"].get("namespace", ""),
                                              obj["metadata"]["name"], options, dry_run))
        self._send(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                         "metadata": {"resourceVersion": str(cluster.store.rv)}, "items": deleted})

    # --------------------------------------------------------- subresources
    def _log(self, namespace, name):
        cluster = self.server_state.cluster
        pods = BY_KEY[("", "pods")]
        pod = cluster.store.get(pods, namespace, name)
        if pod is None:
            raise not_found(pods, name)
        names = [c["name"] for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]]
        container = self.query.get("container")
        if not container:
            if len(pod["spec"]["containers"]) != 1:
                raise ApiError(400, f"a container name must be specified for pod {name}, choose one of: "
                                    f"[{' '.join(c['name'] for c in pod['spec']['containers'])}]", "BadRequest")
            container = pod["spec"]["containers"][0]["name"]
        if container not in names:
            raise ApiError(400, f"container {container} is not valid for pod {name}", "BadRequest")
        statuses = (pod.get("status", {}).get("containerStatuses") or []) + \
            (pod.get("status", {}).get("initContainerStatuses") or [])
        status = next((s for s in statuses if s["name"] == container), None)
        waiting = (status or {}).get("state", {}).get("waiting")
        previous = self.query.get("previous") in ("true", "1")
        text = self.server_state.controllers.log_of(pod, container, previous)
        if previous and text is None:
            raise ApiError(400, f'previous terminated container "{container}" in pod "{name}" not found', "BadRequest")
        if text is None or (waiting and not status.get("restartCount")):
            reason = (waiting or {}).get("reason", "ContainerCreating")
            raise ApiError(400, f'container "{container}" in pod "{name}" is waiting to start: {reason}',
                           "BadRequest")
        lines = text.splitlines(keepends=True)
        if self.query.get("tailLines"):
            lines = lines[-int(self.query["tailLines"]):] if int(self.query["tailLines"]) else []
        if self.query.get("timestamps") == "true":
            stamp = now_rfc3339().replace("Z", ".000000000Z")
            lines = [f"{stamp} {line}" for line in lines]
        body = "".join(lines)
        if self.query.get("limitBytes"):
            body = body[:int(self.query["limitBytes"])]
        self._send(200, body, "text/plain")

    def _evict(self, res, namespace, name, dry_run):
        """pods/eviction in the order of kube-apiserver's eviction REST handler
        (pkg/registry/core/pod/storage/eviction.go)."""
        cluster = self.server_state.cluster
        body = self._body() or {}
        if (body.get("metadata") or {}).get("name", name) != name:
            raise ApiError(400, "name in URL does not match name in Eviction object", "BadRequest")
        dry_run = dry_run or (body.get("deleteOptions") or {}).get("dryRun") == ["All"]
        pdbs = BY_KEY[("policy", "poddisruptionbudgets")]
        success = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        with cluster.lock:
            # An Eviction is a create: NamespaceLifecycle refuses it in a Terminating namespace
            # (kubectl drain then waits for such a pod to go).
            cluster.check_namespace(res, namespace, True, name)
            pod = cluster.store.peek(res, namespace, name)
            if pod is None:
                raise not_found(res, name)
            # canIgnorePDB: finished, not yet running, or already terminating pods go without a budget check.
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed", "Pending") \
                    or pod["metadata"].get("deletionTimestamp"):
                self._evict_delete(pod, body, dry_run, False)
                self._send(201, success)
                return
            matching = [p for p in cluster.store.peek_list(pdbs, namespace)
                        if label_selector_object_match(p["spec"].get("selector"), pod["metadata"].get("labels"))]
            if len(matching) > 1:
                raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the eviction "
                                    "subresource does not support.", "InternalError")
            fault = cluster.faults.active("eviction-refused", namespace=namespace, pod=name)
            if not matching:
                if fault:
                    raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                                   "TooManyRequests", {"causes": [{"reason": "DisruptionBudget",
                                                                   "message": "simulated: eviction refused"}]})
                self._evict_delete(pod, body, dry_run, True)
                self._send(201, success)
                return
            pdb = matching[0]
            status = pdb.get("status") or {}
            ready = pod_ready(pod)
            if not ready and not fault:
                if pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or (
                        status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0):
                    self._evict_delete(pod, body, dry_run, True)
                    self._send(201, success)
                    return
            if status.get("observedGeneration", 0) < pdb["metadata"].get("generation", 1):
                raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                               "TooManyRequests", {"retryAfterSeconds": 10, "causes": [{
                                   "reason": "DisruptionBudget",
                                   "message": f"The disruption budget {pdb['metadata']['name']} is still being "
                                              "processed by the server."}]}, retry_after=10)
            if status.get("disruptionsAllowed", 0) <= 0 or fault:
                raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                               "TooManyRequests", {"causes": [{
                                   "reason": "DisruptionBudget",
                                   "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                              f"{status.get('desiredHealthy', 0)} healthy pods and has "
                                              f"{status.get('currentHealthy', 0)} currently"}]})
            if not dry_run:
                updated = copy.deepcopy(pdb)
                updated["status"]["disruptionsAllowed"] = status["disruptionsAllowed"] - 1
                updated["status"].setdefault("disruptedPods", {})[name] = now_rfc3339()
                cluster.update(pdbs, namespace, pdb["metadata"]["name"], updated, manager="kube-apiserver",
                               subresource="status", internal=True)
            self._evict_delete(pod, body, dry_run, True)
        self._send(201, success)

    def _evict_delete(self, pod, body, dry_run, mark):
        """Delete an evicted pod; a running one first gets the DisruptionTarget condition (1.26+)."""
        cluster = self.server_state.cluster
        pods = BY_KEY[("", "pods")]
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if dry_run:
            return
        if mark:
            status = copy.deepcopy(pod.get("status") or {})
            status["conditions"] = [c for c in status.get("conditions") or [] if c["type"] != "DisruptionTarget"] + [
                {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": now_rfc3339(), "reason": "EvictionByEvictionAPI",
                 "message": "Eviction API: evicting"}]
            cluster.update(pods, namespace, name, dict(copy.deepcopy(pod), status=status), manager="kube-apiserver",
                           subresource="status", internal=True)
        cluster.delete(pods, namespace, name, body.get("deleteOptions"))

    def _bind(self, namespace, name):
        cluster = self.server_state.cluster
        pods = BY_KEY[("", "pods")]
        body = self._body() or {}
        with cluster.lock:
            cluster.check_namespace(pods, namespace, True, name)
            pod = cluster.store.get(pods, namespace, name)
            if pod is None:
                raise not_found(pods, name)
            if pod["spec"].get("nodeName"):
                raise ApiError(409, f"Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is "
                                    f"already assigned to node \"{pod['spec']['nodeName']}\"", "Conflict")
            pod["spec"]["nodeName"] = (body.get("target") or {}).get("name")
            cluster.store.replace(pods, pod)
        self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
