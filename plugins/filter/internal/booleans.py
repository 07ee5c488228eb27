# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters: the boolean settings of the roles, and the values among them that are not booleans.

``-e name=false`` hands the roles the text "false", and the roles read every boolean setting through
``| bool``. That filter reads only some texts as booleans, and not the same ones on every
ansible-core: 2.16 to 2.18 read "y" and "t" as false, 2.19 and newer read any text it does not know
as false with a deprecation warning, while the roles' argument specs accept "y", "t", "n" and "f".
So the roles and the playbooks refuse, before any change, any value that ``| bool`` would not read
as its writer meant on every release: only true, false, their texts ("true", "yes", "on", "1" and
their opposites, in any case) and the numbers 1 and 0 are booleans here.
"""

from __future__ import annotations

import json
import os
import re

import yaml

from ansible.errors import AnsibleFilterError

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TEXTS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def as_boolean(value):
    """The boolean a setting's value means, or None when it is no boolean on every ansible-core."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return TEXTS.get(value.lower())
    return None


def _shown(value):
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def boolean_errors(values):
    """{name: value} -> a sentence for each value that is not a boolean, sorted by name."""
    if not isinstance(values, dict):
        raise AnsibleFilterError("boolean_errors expects a dict of settings by name, got %s" % type(values).__name__)
    return ["%s is %s, not a boolean; give true or false (yes/no, on/off, 1/0)" % (name, _shown(value))
            for name, value in sorted(values.items()) if as_boolean(value) is None]


def role_booleans(roles):
    """The boolean settings (argument spec options of type bool) of a role of this collection, or of a list of
    them, sorted."""
    names = set()
    if not isinstance(roles, (str, list)):
        raise AnsibleFilterError("role_booleans expects a role's name or a list of them, got %r" % (roles,))
    for role in [roles] if isinstance(roles, str) else roles:
        if not isinstance(role, str) or not re.match(r"^[a-z][a-z0-9_]*$", role):
            raise AnsibleFilterError("role_booleans: %r is not a role of this collection" % (role,))
        path = os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")
        try:
            with open(path) as handle:
                spec = yaml.load(handle, Loader=SAFE_LOADER)
        except (OSError, yaml.YAMLError) as err:
            raise AnsibleFilterError("role_booleans: cannot read the argument spec of %s: %s" % (role, err))
        options = spec["argument_specs"]["main"].get("options") or {}
        names.update(name for name, option in options.items() if option.get("type") == "bool")
    return sorted(names)


class FilterModule(object):
    def filters(self):
        return {"boolean_errors": boolean_errors, "role_booleans": role_booleans}
