# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.nvidia.internal.warn: each message is returned as a warning of the result, as a module's are."""

from __future__ import annotations

from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task
from ansible_collections.gpufleet.nvidia.plugins.action.internal import warn


def run(args):
    task = Task()
    task.args = args
    action = warn.ActionModule(task, connection=mock.MagicMock(), play_context=mock.MagicMock(),
                               loader=mock.MagicMock(), templar=mock.MagicMock(), shared_loader_obj=None)
    result = action.run(task_vars={})
    return result, list(result.get("warnings") or [])


def test_a_message_is_shown_as_a_warning_and_returned():
    result, shown = run({"msg": "gpu-a: Driver branch 535 reached its end of life in June 2026."})
    assert shown == ["gpu-a: Driver branch 535 reached its end of life in June 2026."]
    assert result["warnings_shown"] == shown and result["changed"] is False and not result.get("failed")


def test_each_of_a_list_and_no_empty_one():
    result, shown = run({"msg": ["first", "  ", "", "second"]})
    assert shown == ["first", "second"]
    assert result["msg"] == "first; second"


@pytest.mark.parametrize("msg", ["", None, []])
def test_nothing_to_say_shows_nothing(msg):
    result, shown = run({"msg": msg})
    assert shown == [] and result["warnings_shown"] == [] and result["changed"] is False
    assert "warnings" not in result


def test_msg_is_required():
    with pytest.raises(AnsibleActionFail) as caught:
        run({})
    assert "msg is required" in str(caught.value)


@pytest.mark.parametrize("msg", [{"a": 1}, ["text", 3], 7])
def test_a_message_that_is_not_text_is_refused(msg):
    with pytest.raises(AnsibleActionFail) as caught:
        run({"msg": msg})
    assert "msg must be a string or a list of strings" in str(caught.value)


def test_an_unknown_argument_is_refused():
    with pytest.raises(AnsibleActionFail) as caught:
        run({"msg": "x", "level": "high"})
    assert "level" in str(caught.value)
