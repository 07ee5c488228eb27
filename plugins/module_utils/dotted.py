# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Dotted paths into API objects and facts: keep only some fields, or take some out."""

from __future__ import annotations

_LEAF = object()


def keep_paths(item, paths):
    """``item`` with only the dotted ``paths`` (metadata.name, status.allocatable) and what leads to them. A list
    met on the way keeps every entry, each mapping in it cut the same way (spec.containers.resources keeps every
    container's resources), and any other entry as it is. A path that is missing, or that goes on below a value
    that is neither a mapping nor a list, is left out, though the mappings that lead to it stay (empty when
    nothing else is kept in them). No ``paths`` (None): the whole item."""
    if paths is None:
        return item
    tree = {}
    for path in paths:
        parts = path.split(".")
        here = tree
        for part in parts[:-1]:
            below = here.setdefault(part, {})
            if below is _LEAF:
                break
            here = below
        else:
            here[parts[-1]] = _LEAF
    return _cut(item, tree)


def _cut(value, tree):
    if isinstance(value, list):
        return [_cut(entry, tree) if isinstance(entry, (dict, list)) else entry for entry in value]
    if not isinstance(value, dict):
        return value
    kept = {}
    for key, below in tree.items():
        if key not in value:
            continue
        if below is _LEAF:
            kept[key] = value[key]
        elif isinstance(value[key], (dict, list)):
            kept[key] = _cut(value[key], below)
    return kept


def drop_paths(item, paths):
    """``item`` without the dotted ``paths`` (metadata.managedFields), each taken out where it is."""
    for path in paths:
        parts = path.split(".")
        here = item
        for part in parts[:-1]:
            here = here.get(part) if isinstance(here, dict) else None
        if isinstance(here, dict):
            here.pop(parts[-1], None)
    return item
