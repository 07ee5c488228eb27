# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action behind gpufleet.nvidia.internal.warn: say something as a warning, on the controller.

The warnings are returned in the result's ``warnings``, as a module's are, so the callback
shows them as ``[WARNING]`` lines on every ansible-core release and AWX's job events carry them.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    """Returns each of ``msg`` as a warning of the result; never changes anything."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("msg",))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        if "msg" not in self._task.args:
            raise AnsibleActionFail("msg is required: the warning, or a list of them")
        msg = self._task.args["msg"]
        if msg is None:
            msg = []
        elif isinstance(msg, str):
            msg = [msg]
        elif not isinstance(msg, (list, tuple)) or not all(isinstance(item, str) for item in msg):
            raise AnsibleActionFail("msg must be a string or a list of strings, got %s" % type(msg).__name__)
        warnings = [to_text(item).strip() for item in msg if to_text(item).strip()]
        if warnings:
            result["warnings"] = list(result.get("warnings") or []) + warnings
        result.update(changed=False, warnings_shown=warnings, msg="; ".join(warnings))
        return result
