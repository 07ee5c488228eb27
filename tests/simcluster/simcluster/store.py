"""In-memory object store: resourceVersions, uids, and a change log for watches.

Semantics from the API concepts page (kubernetes.io/docs/reference/using-api/api-concepts/):
every write gets a new, cluster-wide resourceVersion; a watch from version N
replays the changes after N; a version older than the retained history
answers 410 Gone ("Expired"). Errors are Status objects (api-conventions.md,
"Response Status Kind").
"""

import copy
import datetime
import threading
import uuid
from collections import deque

HISTORY = 20000


def now_rfc3339(clock=None):
    moment = datetime.datetime.now(datetime.timezone.utc) if clock is None else clock
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An API error, rendered as a metav1.Status."""

    REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
               406: "NotAcceptable", 409: "AlreadyExists", 410: "Expired", 415: "UnsupportedMediaType",
               422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
               504: "Timeout"}

    def __init__(self, code, message, reason=None, details=None, retry_after=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self.REASONS.get(code, "Unknown")
        self.details = details
        self.retry_after = retry_after

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            # StatusDetails' fields are all omitempty (k8s.io/apimachinery/pkg/apis/meta/v1/types.go):
            # the core group's "" is left out, as is an empty field of a cause.
            body["details"] = {k: v for k, v in self.details.items() if v not in ("", None)}
            if body["details"].get("causes"):
                body["details"]["causes"] = [{k: v for k, v in c.items() if v not in ("", None)}
                                             for c in body["details"]["causes"]]
        return body


def not_found(res, name):
    return ApiError(404, f'{res.plural}{"." + res.group if res.group else ""} "{name}" not found',
                    details={"name": name, "group": res.group, "kind": res.plural})


def already_exists(res, name):
    return ApiError(409, f'{res.plural}{"." + res.group if res.group else ""} "{name}" already exists',
                    "AlreadyExists", {"name": name, "group": res.group, "kind": res.plural})


def conflict(res, name, why="the object has been modified; please apply your changes to the latest version "
                            "and try again"):
    qualified = f'{res.plural}{"." + res.group if res.group else ""}'
    return ApiError(409, f'Operation cannot be fulfilled on {qualified} "{name}": {why}', "Conflict",
                    {"name": name, "group": res.group, "kind": res.plural})


def invalid(res, name, causes):
    """422 with field causes, worded as apiserver's errors.NewInvalid."""
    kind = res.kind
    group = res.group
    text = "; ".join(f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes)
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, f'{qualified} "{name}" is invalid: {text}', "Invalid",
                    {"name": name, "group": group, "kind": kind,
                     "causes": [{"reason": c.get("reason", "FieldValueInvalid"), "message": c["message"],
                                 "field": c.get("field", "")} for c in causes]})


class Store:
    """Objects by (group, plural) -> {(namespace, name): object}."""

    def __init__(self):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1000
        self.objects = {}
        # Index: (group, plural) -> namespace -> {(namespace, name): object}, the same objects as
        # self.objects in the same (creation) order, so that a namespace's objects are found
        # without a scan of every namespace's (kept by create and delete; replace keeps the slot).
        self.namespaces = {}
        # The resourceVersion of the latest write to each resource, (group, plural), and to each
        # of its namespaces, ((group, plural), namespace): controllers skip work whose inputs
        # have not been written since they last looked.
        self.written = {}
        self.log = deque(maxlen=HISTORY)
        self.oldest = self.rv
        self.listeners = []

    def _next_rv(self):
        self.rv += 1
        return self.rv

    def bucket(self, res):
        return self.objects.setdefault(res.key, {})

    def _namespace_bucket(self, res, namespace):
        return self.namespaces.setdefault(res.key, {}).setdefault(namespace, {})

    def _put(self, res, key, obj):
        self.bucket(res)[key] = obj
        self._namespace_bucket(res, key[0])[key] = obj

    def _pop(self, res, key):
        old = self.bucket(res).pop(key, None)
        if old is not None:
            self._namespace_bucket(res, key[0]).pop(key, None)
        return old

    def get(self, res, namespace, name):
        with self.lock:
            obj = self.bucket(res).get((namespace or "", name))
            return copy.deepcopy(obj) if obj is not None else None

    def peek(self, res, namespace, name):
        """The stored object itself, not a copy: callers must not change it."""
        return self.bucket(res).get((namespace or "", name))

    def list(self, res, namespace=None, match=None, deep=True):
        """Copies of the objects (of one namespace), sorted by namespace and name; with match, only
        those it accepts (tested on the stored objects, so that only those are copied). deep=False
        gives shallow copies, for a caller that only reads them or sets their top-level keys
        (stored objects are never changed in place, so they may be read after the lock is let go)."""
        with self.lock:
            items = self.peek_list(res, namespace)
            if match is not None:
                items = [o for o in items if match(o)]
            duplicate = copy.deepcopy if deep else dict
            return [duplicate(o) for o in sorted(items, key=lambda o: (o["metadata"].get("namespace", ""),
                                                                       o["metadata"]["name"]))]

    def peek_list(self, res, namespace=None):
        if namespace in (None, ""):
            return list(self.bucket(res).values())
        return list(self.namespaces.get(res.key, {}).get(namespace, {}).values())

    def _record(self, res, kind, obj, old):
        # The log shares the stored objects: a stored object is never changed in place (a write
        # stores a new one), so the log's entries need no copies of their own.
        rv = int(obj["metadata"]["resourceVersion"])
        self.log.append((rv, res.key, kind, obj, old))
        self.written[res.key] = self.written[(res.key, obj["metadata"].get("namespace", ""))] = rv
        if len(self.log) == self.log.maxlen:
            self.oldest = self.log[0][0]
        for listener in self.listeners:
            listener(res, kind, obj, old)
        self.changed.notify_all()

    def create(self, res, obj):
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace", "") if res.namespaced else "", meta["name"])
            if key in self.bucket(res):
                raise already_exists(res, meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["resourceVersion"] = str(self._next_rv())
            if res.generation:
                meta["generation"] = 1
            # obj becomes the stored object (callers hand over an object of their own and do not
            # touch it afterwards); they get a copy back.
            self._put(res, key, obj)
            self._record(res, "ADDED", obj, None)
            return copy.deepcopy(obj)

    def replace(self, res, obj, expect_rv=None, copy_back=True):
        """Store obj in place of the current object; no write when nothing changed. The caller gets a copy of
        the stored object, or None without ``copy_back``."""
        with self.lock:
            meta = obj["metadata"]
            key = (meta.get("namespace", "") if res.namespaced else "", meta["name"])
            old = self.bucket(res).get(key)
            if old is None:
                raise not_found(res, meta["name"])
            if expect_rv not in (None, "") and expect_rv != old["metadata"]["resourceVersion"]:
                raise conflict(res, meta["name"])
            meta["resourceVersion"] = old["metadata"]["resourceVersion"]
            if obj == old:
                return copy.deepcopy(old) if copy_back else None
            meta["resourceVersion"] = str(self._next_rv())
            # As in create: obj becomes the stored object, the caller gets a copy.
            self._put(res, key, obj)
            self._record(res, "MODIFIED", obj, old)
            return copy.deepcopy(obj) if copy_back else None

    def delete(self, res, namespace, name):
        with self.lock:
            key = (namespace or "" if res.namespaced else "", name)
            old = self._pop(res, key)
            if old is None:
                raise not_found(res, name)
            gone = dict(old, metadata=dict(old["metadata"], resourceVersion=str(self._next_rv())))
            self._record(res, "DELETED", gone, None)
            # No longer stored, and shared only with the log, which no one changes: the callers (the
            # API's answer, controllers that drop it) only read it, so it needs no copy of its own.
            return gone

    def events_since(self, rv, keys):
        """Changes after rv for the given resource keys; raises 410 when history is gone."""
        # Versions before the oldest one kept (at first: before the store began) are gone; the
        # watch cache answers "too old resource version" for them (api-concepts, "410 Gone responses").
        if rv < self.oldest:
            raise ApiError(410, f"too old resource version: {rv} ({self.oldest})", "Expired")
        # The log is in resourceVersion order: read back from its end to the first entry not after
        # rv, so that a watcher's wake-up costs the changes since its last one, not the whole log.
        entries = []
        for entry in reversed(self.log):
            if entry[0] <= rv:
                break
            if entry[1] in keys:
                entries.append(entry)
        entries.reverse()
        return entries
