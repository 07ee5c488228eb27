"""Patches and server-side apply.

- JSON merge patch: RFC 7386.
- JSON patch: RFC 6902 (add, remove, replace, move, copy, test).
- Strategic merge patch: lists with a patchMergeKey merge by key, lists of
  scalars marked as sets merge as sets, every other list is replaced; the
  $patch (replace/delete), $deleteFromPrimitiveList, $setElementOrder and
  $retainKeys directives (community/contributors/devel/sig-api-machinery/
  strategic-merge-patch.md).
- Server-side apply (kubernetes.io/docs/reference/using-api/server-side-apply/):
  each manager owns a set of fields, kept as FieldsV1 in metadata.managedFields.
  Applying a field another manager owns with a different value is a conflict
  (409) unless forced, which moves ownership; fields an applier stops sending
  are removed unless another manager still owns them; updates (PUT, other
  patches) take ownership of what they change without conflicts.
"""

import copy
import functools
import json

from .resources import SET_LISTS, merge_keys
from .store import ApiError

MISSING = object()
# Fields no manager owns.
_UNOWNED_META = {"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "name", "namespace"}


# ---------------------------------------------------------------- merge patch

def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ----------------------------------------------------------------- JSON patch

def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"the server rejected our request due to an error in our request: "
                            f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _walk(doc, parts):
    for part in parts:
        if isinstance(doc, list):
            doc = doc[int(part)]
        else:
            doc = doc[part]
    return doc


def json_patch(doc, operations):
    doc = copy.deepcopy(doc)
    if not isinstance(operations, list):
        raise ApiError(400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch", "BadRequest")
    for op in operations:
        kind = op.get("op")
        try:
            parts = _pointer(op.get("path", ""))
            if kind == "test":
                if _walk(doc, parts) != op.get("value"):
                    raise ApiError(422, f"the server rejected our request due to an error in our request: "
                                        f"testing value {op['path']} failed: test failed")
                continue
            if kind in ("move", "copy"):
                value = copy.deepcopy(_walk(doc, _pointer(op["from"])))
                if kind == "move":
                    doc = _remove(doc, _pointer(op["from"]))
                doc = _add(doc, parts, value)
            elif kind == "add":
                doc = _add(doc, parts, copy.deepcopy(op["value"]))
            elif kind == "remove":
                doc = _remove(doc, parts)
            elif kind == "replace":
                _walk(doc, parts)
                doc = _remove(doc, parts)
                doc = _add(doc, parts, copy.deepcopy(op["value"]))
            else:
                raise ApiError(422, f"the server rejected our request due to an error in our request: "
                                    f"Unexpected kind: {kind}")
        except (KeyError, IndexError, ValueError, TypeError) as err:
            raise ApiError(422, f"the server rejected our request due to an error in our request: "
                                f"{kind} operation does not apply: doc is missing path: {op.get('path')}: "
                                f"{type(err).__name__}") from err
    return doc


def _add(doc, parts, value):
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if index > len(parent):
            raise IndexError(last)
        parent.insert(index, value)
    else:
        parent[last] = value
    return doc


def _remove(doc, parts):
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        del parent[int(last)]
    else:
        del parent[last]
    return doc


# ------------------------------------------------------ strategic merge patch

def _item_key(item, keys):
    return tuple(item.get(k) if not (k == "protocol" and item.get(k) is None) else "TCP" for k in keys) \
        if isinstance(item, dict) else None


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return value


def strategic_merge(original, patch, path=()):
    if not isinstance(patch, dict):
        return _strip(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip(patch)
    if directive == "delete":
        return MISSING
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        child = path + (key,)
        current = result.get(key)
        keys = merge_keys(child)
        if isinstance(value, list) and isinstance(current, list) and keys:
            result[key] = _merge_keyed(current, value, keys, child + ("*",))
        elif isinstance(value, list) and isinstance(current, list) and child in SET_LISTS:
            result[key] = current + [v for v in value if v not in current]
        elif isinstance(value, dict) and isinstance(current, dict):
            merged = strategic_merge(current, value, child)
            if merged is MISSING:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            stripped = _strip(value)
            if stripped is not MISSING:
                result[key] = stripped
    return result


def _merge_keyed(current, patch_items, keys, item_path):
    result = copy.deepcopy(current)
    for item in patch_items:
        if isinstance(item, dict) and item.get("$patch") == "replace" and len(item) == 1:
            result = []
            continue
        key = _item_key(item, keys)
        index = next((i for i, old in enumerate(result) if _item_key(old, keys) == key), None)
        if isinstance(item, dict) and item.get("$patch") == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            result.append(_strip(item))
        else:
            result[index] = strategic_merge(result[index], item, item_path)
    return result


# ---------------------------------------------------------- server-side apply

def _token_for_item(item, keys):
    return "k:" + json.dumps({k: item.get(k) for k in keys if item.get(k) is not None},
                             sort_keys=True, separators=(",", ":"))


def field_set(value, path=(), top=True):
    """FieldsV1 tree of what value sets."""
    tree = {}
    if not isinstance(value, dict):
        return tree
    for key, child in value.items():
        if child is None:
            continue
        if top and key in ("apiVersion", "kind", "status"):
            continue
        if path == ("metadata",) and key in _UNOWNED_META:
            continue
        child_path = path + (key,)
        keys = merge_keys(child_path)
        if isinstance(child, dict) and child:
            sub = field_set(child, child_path, False)
            # metadata holding only what no manager owns (name, namespace...) is no field of
            # anyone's: the field manager strips those before it computes the sets (fieldmanager's
            # stripMeta), so two appliers of the same object do not conflict over ".metadata".
            if sub or child_path != ("metadata",):
                tree["f:" + key] = sub
        elif isinstance(child, list) and keys and child and all(isinstance(i, dict) for i in child):
            items = {}
            for item in child:
                sub = field_set(item, child_path + ("*",), False)
                sub["."] = {}
                items[_token_for_item(item, keys)] = sub
            tree["f:" + key] = items
        elif isinstance(child, list) and child_path in SET_LISTS and child:
            tree["f:" + key] = {"v:" + json.dumps(v, separators=(",", ":")): {} for v in child}
        else:
            tree["f:" + key] = {}
    return tree


def leaf_paths(tree, prefix=()):
    paths = set()
    for token, sub in tree.items():
        here = prefix + (token,)
        if token == ".":
            paths.add(here)
        elif not sub:
            paths.add(here)
        else:
            paths |= leaf_paths(sub, here)
    return paths


def to_tree(paths):
    """The fieldsV1 tree of a set of leaf paths. Trees are never changed in place once built (an entry
    gets a new one), so one tree is shared by the entries of the same fields: the kubelet's status
    writes of a thousand pods of one shape build it once."""
    return _tree_of(frozenset(paths))


@functools.lru_cache(maxsize=4096)
def _tree_of(paths):
    tree = {}
    for path in sorted(paths):
        node = tree
        for token in path:
            node = node.setdefault(token, {})
    return tree


@functools.lru_cache(maxsize=4096)
def _token_value(token):
    """The JSON of a k: or v: token, parsed once (shared: callers only read it)."""
    return json.loads(token[2:])


def _step(value, token):
    """The value one path token leads to from value, or MISSING (not for the "." token)."""
    if token.startswith("f:"):
        if not isinstance(value, dict) or token[2:] not in value:
            return MISSING
        return value[token[2:]]
    if token.startswith("k:"):
        if not isinstance(value, list):
            return MISSING
        want = _token_value(token)
        return next((i for i in value if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())),
                    MISSING)
    if token.startswith("v:"):
        want = _token_value(token)
        return want if isinstance(value, list) and want in value else MISSING
    return value


def value_at(obj, path):
    value = obj
    for token in path:
        if token == ".":
            return value
        value = _step(value, token)
        if value is MISSING:
            return MISSING
    return value


def changed_leaves(tree, old, new, prefix=()):
    """The leaf paths of a fieldsV1 tree whose values differ between old and new: the paths p for
    which value_at(old, p) != value_at(new, p), found in one walk of both objects that passes over
    any part equal in both."""
    out = set()
    for token, sub in tree.items():
        here = prefix + (token,)
        if token == ".":
            if old != new:
                out.add(here)
            continue
        before = MISSING if old is MISSING else _step(old, token)
        after = MISSING if new is MISSING else _step(new, token)
        if before == after:
            continue
        if sub:
            out |= changed_leaves(sub, before, after, here)
        else:
            out.add(here)
    return out


def remove_path(obj, path):
    """Remove the field (or list item) that path names, if present."""
    if path[-1] == ".":
        path = path[:-1]
    parent = value_at(obj, path[:-1]) if len(path) > 1 else obj
    token = path[-1]
    if parent is MISSING:
        return
    if token.startswith("f:") and isinstance(parent, dict):
        parent.pop(token[2:], None)
    elif token.startswith("k:") and isinstance(parent, list):
        want = _token_value(token)
        parent[:] = [i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in want.items()))]
    elif token.startswith("v:") and isinstance(parent, list):
        want = _token_value(token)
        parent[:] = [i for i in parent if i != want]


def _apply_merge(live, applied, path=()):
    """Merge an applied configuration into the live object (maps and keyed lists granular)."""
    if not isinstance(applied, dict) or not isinstance(live, dict):
        return copy.deepcopy(applied)
    result = copy.deepcopy(live)
    for key, value in applied.items():
        if value is None:
            continue
        child = path + (key,)
        keys = merge_keys(child)
        current = result.get(key)
        if isinstance(value, list) and isinstance(current, list) and keys:
            merged = copy.deepcopy(current)
            for item in value:
                ident = _item_key(item, keys)
                index = next((i for i, old in enumerate(merged) if _item_key(old, keys) == ident), None)
                if index is None:
                    merged.append(copy.deepcopy(item))
                else:
                    merged[index] = _apply_merge(merged[index], item, child + ("*",))
            result[key] = merged
        elif isinstance(value, list) and isinstance(current, list) and child in SET_LISTS:
            result[key] = current + [v for v in value if v not in current]
        elif isinstance(value, dict) and isinstance(current, dict):
            result[key] = _apply_merge(current, value, child)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _entry_paths(entry):
    return leaf_paths(entry.get("fieldsV1") or {})


def _describe(path):
    out = ""
    for token in path:
        if token == ".":
            continue
        if token.startswith("f:"):
            out += "." + token[2:]
        elif token.startswith("k:"):
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(token[2:]).items()) + "]"
        else:
            out += "[" + token[2:] + "]"
    return out


def apply(live, applied, manager, force, api_version, timestamp, subresource=None):
    """Server-side apply of applied by manager onto live (None when creating). Returns the new object."""
    live = copy.deepcopy(live) if live is not None else {}
    managed = copy.deepcopy((live.get("metadata") or {}).get("managedFields") or [])
    before = _without_managed_fields(live)
    previous_time = None
    mine = field_set(applied)
    mine_paths = leaf_paths(mine)
    previous = set()
    conflicts = []
    kept = []
    for entry in managed:
        if entry.get("subresource") != subresource:
            kept.append(entry)
            continue
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            previous = _entry_paths(entry)
            previous_time = entry.get("time")
            continue
        theirs = _entry_paths(entry)
        clash = sorted(p for p in theirs & mine_paths
                       if p[-1] != "." and value_at(live, p) != value_at(applied, p))
        if clash and not force:
            conflicts += [(entry["manager"], p) for p in clash]
        if clash and force:
            theirs -= set(clash)
            entry["fieldsV1"] = to_tree(theirs)
        if theirs:
            kept.append(entry)
    if conflicts:
        text = "; ".join(f'conflict with "{m}": {_describe(p)}' for m, p in conflicts) if len(conflicts) > 1 else \
            f'conflict with "{conflicts[0][0]}": {_describe(conflicts[0][1])}'
        raise ApiError(409, f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}: {text}",
                       "Conflict", {"causes": [{"reason": "FieldManagerConflict",
                                                "message": f'conflict with "{m}"', "field": _describe(p)}
                                               for m, p in conflicts]})
    others = set()
    for entry in kept:
        if entry.get("subresource") == subresource:
            others |= _entry_paths(entry)
    result = live
    for path in sorted(previous - mine_paths, key=len, reverse=True):
        owned_below = any(o[:len(path) - 1] == path[:-1] for o in others) if path[-1] == "." else path in others
        if not owned_below:
            remove_path(result, path)
    result = _apply_merge(result, {k: v for k, v in applied.items() if k != "status" or subresource == "status"})
    entries = list(kept)
    if previous_time and _without_managed_fields(result) == before:
        # An apply that changes nothing keeps the manager's time, so the object and its
        # resourceVersion stay as they were (managedfieldsupdater.go: the time is set only when
        # the apply produced a new object).
        timestamp = previous_time
    if mine_paths:
        entries.append({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": timestamp,
                        "fieldsType": "FieldsV1", "fieldsV1": mine, **({"subresource": subresource}
                                                                       if subresource else {})})
    result.setdefault("metadata", {})["managedFields"] = _sorted_entries(entries)
    return result


def _sorted_entries(entries):
    """managedFields in the apiserver's order: operation, time, manager, subresource
    (fieldmanager/internal/managedfields.go, sortEncodedManagedFields)."""
    return sorted(entries, key=lambda e: (e.get("operation", ""), e.get("time") or "", e.get("manager", ""),
                                          e.get("subresource", "")))


def _without_managed_fields(obj):
    obj = copy.deepcopy(obj)
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def track_update(old, new, manager, api_version, timestamp, subresource=None):
    """Ownership after a non-apply write: manager owns what it changed; others lose it."""
    old = old or {}
    section = (lambda o: {"status": o.get("status")}) if subresource == "status" else (lambda o: o)
    new_tree = _fields_for(section(new), subresource)
    new_paths = leaf_paths(new_tree)
    old_paths = leaf_paths(_fields_for(section(old), subresource))
    changed = changed_leaves(new_tree, old, new)
    removed = old_paths - new_paths
    # Only each entry's fieldsV1 is set below: a copy of each entry is enough.
    managed = [dict(entry) for entry in (old.get("metadata") or {}).get("managedFields") or []]
    entries, mine = [], set()
    for entry in managed:
        paths = _entry_paths(entry)
        if entry.get("manager") == manager and entry.get("operation") == "Update" \
                and entry.get("subresource") == subresource:
            mine = paths
            # Its time changes only when this write changed fields (managedfieldsupdater.go).
            timestamp = entry.get("time", timestamp) if not changed else timestamp
            continue
        paths -= changed | removed
        if paths:
            entry["fieldsV1"] = to_tree(paths)
            entries.append(entry)
    mine = (mine - removed) | changed
    if mine:
        entries.append({"manager": manager, "operation": "Update", "apiVersion": api_version, "time": timestamp,
                        "fieldsType": "FieldsV1", "fieldsV1": to_tree(mine),
                        **({"subresource": subresource} if subresource else {})})
    new.setdefault("metadata", {})["managedFields"] = _sorted_entries(entries)
    return new


def _fields_for(obj, subresource):
    if subresource == "status":
        status = obj.get("status")
        return {"f:status": field_set(status, ("status",), False)} if isinstance(status, dict) and status else {}
    return field_set(obj)
