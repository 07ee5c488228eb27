# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each role's argument spec is its contract: its defaults equal defaults/main.yml, key by key."""

from __future__ import annotations

import os

import pytest
import yaml

ROLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles")
ROLE_NAMES = sorted(name for name in os.listdir(ROLES) if os.path.isdir(os.path.join(ROLES, name)))


def load(role, *path):
    with open(os.path.join(ROLES, role, *path)) as handle:
        return yaml.safe_load(handle) or {}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_spec_defaults_equal_role_defaults(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = load(role, "defaults", "main.yml")
    assert sorted(options) == sorted(defaults)
    for name, spec in options.items():
        assert spec.get("default") == defaults[name], name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_public_variable_is_prefixed_and_described(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, spec in options.items():
        assert name.startswith(role + "_"), name
        assert spec.get("description"), name
        assert spec.get("type"), name
