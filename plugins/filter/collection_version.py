# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the version of an installed collection, the copy this run of Ansible uses.

Ansible's collection loader resolves ``ansible_collections.<namespace>.<name>``
to the first matching folder on the collections path (including a
playbook-adjacent ``collections/`` folder), and modules such as
``kubernetes.core.k8s_drain`` come from that same folder. Its version is read
the way ``ansible-galaxy collection list`` reads it: ``MANIFEST.json`` of an
installed or built collection, else ``galaxy.yml`` of a source checkout.
"""

from __future__ import annotations

import importlib
import json
import os
import re

import yaml

from ansible.errors import AnsibleFilterError

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")


def version_in(path):
    """Version of the collection in folder ``path``, or None when it has neither MANIFEST.json nor galaxy.yml."""
    manifest = os.path.join(path, "MANIFEST.json")
    if os.path.isfile(manifest):
        try:
            with open(manifest, "rb") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as err:
            raise AnsibleFilterError("cannot read the collection's version from %s: %s" % (manifest, err))
        info = data.get("collection_info") if isinstance(data, dict) else None
        version = info.get("version") if isinstance(info, dict) else None
        if not isinstance(version, str) or not version:
            raise AnsibleFilterError("%s has no collection_info.version (a string); found %r" % (manifest, version))
        return version
    for name in ("galaxy.yml", "galaxy.yaml"):
        galaxy = os.path.join(path, name)
        if not os.path.isfile(galaxy):
            continue
        try:
            with open(galaxy, "rb") as handle:
                data = yaml.safe_load(handle)
        except (OSError, yaml.YAMLError) as err:
            raise AnsibleFilterError("cannot read the collection's version from %s: %s" % (galaxy, err))
        version = data.get("version") if isinstance(data, dict) else None
        if version is None or str(version) == "":
            raise AnsibleFilterError("%s has no version; found %r" % (galaxy, version))
        return str(version)
    return None


def collection_path(name):
    """Folder of collection ``name`` ('namespace.name') as the collection loader finds it, or None."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise AnsibleFilterError("collection_version expects a collection name such as 'kubernetes.core', got %s: %r"
                                 % (type(name).__name__, name))
    try:
        package = importlib.import_module("ansible_collections." + name)
    except ImportError:
        return None
    paths = list(getattr(package, "__path__", None) or [])
    return paths[0] if paths else None


def collection_version(name):
    """Version of the installed collection ``name`` that this run uses, or None when it is not installed."""
    path = collection_path(name)
    if path is None:
        return None
    version = version_in(path)
    if version is None:
        raise AnsibleFilterError("collection %s at %s has neither MANIFEST.json nor galaxy.yml to say its version"
                                 % (name, path))
    return version


class FilterModule(object):
    def filters(self):
        return {"collection_version": collection_version}
