"""OpenAPI v3 discovery (/openapi/v3 and one document per group-version).

kubectl reads these to learn that the server validates fields itself
(the fieldValidation query parameter on an operation tagged with the
object's x-kubernetes-group-version-kind); with that it sends
fieldValidation=Strict instead of validating on the client. The documents
carry the operations and their parameters as kube-apiserver publishes them
(names, x-kubernetes-action, x-kubernetes-group-version-kind); they carry no
component schemas, so `kubectl explain` is not served.
"""

import hashlib
import json

from .resources import RESOURCES, served

_WRITE_PARAMS = [{"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                 for name in ("dryRun", "fieldManager", "fieldValidation", "pretty")]
_READ_PARAMS = [{"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                for name in ("labelSelector", "fieldSelector", "resourceVersion", "watch", "limit", "continue",
                             "timeoutSeconds", "allowWatchBookmarks", "pretty")]


def _prefix(group, version):
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _operation(action, res, params, sub=""):
    kind = res.kind.replace(" ", "")
    return {"operationId": f"{action}{kind}{sub}", "parameters": params,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": res.group, "version": res.version, "kind": res.kind}}


def document(group, version, release=None):
    paths = {}
    for res in RESOURCES:
        if res.group != group or res.version != version or not served(res, release):
            continue
        base = "/" + _prefix(group, version)
        collection = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
        item = collection + "/{name}"
        paths[collection] = {"get": _operation("list", res, _READ_PARAMS),
                             "post": _operation("post", res, _WRITE_PARAMS),
                             "delete": _operation("deletecollection", res, _WRITE_PARAMS)}
        paths[item] = {"get": _operation("get", res, []),
                       "put": _operation("put", res, _WRITE_PARAMS),
                       "patch": _operation("patch", res, _WRITE_PARAMS + [
                           {"name": "force", "in": "query", "schema": {"type": "boolean"}}]),
                       "delete": _operation("delete", res, _WRITE_PARAMS)}
        if "status" in res.subresources:
            paths[item + "/status"] = {"get": _operation("get", res, [], "Status"),
                                       "put": _operation("put", res, _WRITE_PARAMS, "Status"),
                                       "patch": _operation("patch", res, _WRITE_PARAMS, "Status")}
    if not paths:
        return None
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "unversioned"}, "paths": paths,
            "components": {"schemas": {}}}


def index(release=None):
    seen = []
    for res in RESOURCES:
        key = (res.group, res.version)
        if key not in seen and served(res, release):
            seen.append(key)
    out = {}
    for group, version in seen:
        digest = hashlib.sha512(json.dumps(document(group, version, release), sort_keys=True).encode()).hexdigest()[:32]
        out[_prefix(group, version)] = {"serverRelativeURL": f"/openapi/v3/{_prefix(group, version)}?hash={digest}"}
    return {"paths": out}
