# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""boolean_errors and role_booleans: what the roles and playbooks take as a boolean setting."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import to_bool

from ansible_collections.gpufleet.nvidia.plugins.filter.internal.booleans import as_boolean, boolean_errors, role_booleans


@pytest.mark.parametrize("value, meant", [
    (True, True), (False, False), ("true", True), ("false", False), ("True", True), ("FALSE", False),
    ("yes", True), ("no", False), ("on", True), ("off", False), ("1", True), ("0", False), (1, True), (0, False),
])
def test_booleans_mean_what_was_written_and_what_bool_reads(value, meant):
    assert as_boolean(value) is meant
    # The ansible-core these tests run on (2.16 to 2.21) reads each the same way through | bool.
    assert to_bool(value) is meant
    assert boolean_errors({"gpu_driver_require_gpu": value}) == []


@pytest.mark.parametrize("value, shown", [
    ("maybe", '"maybe"'), ("y", '"y"'), ("t", '"t"'), ("n", '"n"'), ("", '""'), (" true", '" true"'),
    (None, "null"), (2, "2"), (1.0, "1.0"), ([True], "[true]"), ({}, "{}"),
])
def test_anything_else_is_named_with_its_value(value, shown):
    assert as_boolean(value) is None
    assert boolean_errors({"gpu_driver_allow_branch_change": value, "gpu_driver_require_gpu": "false"}) == [
        "gpu_driver_allow_branch_change is %s, not a boolean; give true or false (yes/no, on/off, 1/0)" % shown]


def test_errors_come_sorted_by_name():
    errors = boolean_errors({"gpu_smoke_test_skip_busy": "maybe", "gpu_driver_persistenced": "y"})
    assert [error.split()[0] for error in errors] == ["gpu_driver_persistenced", "gpu_smoke_test_skip_busy"]


def test_boolean_errors_wants_a_dict():
    with pytest.raises(AnsibleFilterError, match="expects a dict"):
        boolean_errors(["gpu_driver_persistenced"])


def test_role_booleans_reads_the_argument_specs():
    names = role_booleans("gpu_kubelet")
    assert names == ["gpu_kubelet_gpu_labels", "gpu_kubelet_skip_when_converged"]
    both = role_booleans(["gpu_kubelet", "gpu_smoke_test"])
    assert set(names) < set(both) and "gpu_smoke_test_skip_busy" in both and both == sorted(both)
    assert "gpu_driver_allow_branch_change" in role_booleans(["gpu_driver"])
    # Options of other types are not booleans.
    assert "gpu_driver_reboot" not in role_booleans("gpu_driver")


@pytest.mark.parametrize("role", ["no_such_role", "../roles", 7])
def test_role_booleans_refuses_what_is_not_a_role(role):
    with pytest.raises(AnsibleFilterError):
        role_booleans(role)
