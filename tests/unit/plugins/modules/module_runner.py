# Copyright: gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a module's main() in-process with given arguments, on every ansible-core from 2.16.

ansible-core 2.19 added ansible.module_utils.testing.patch_module_args and reads
module arguments through it; older releases read them from basic._ANSIBLE_ARGS.
"""

from __future__ import annotations

import contextlib
import json

import pytest

from ansible.module_utils import basic

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.16 to 2.18
    @contextlib.contextmanager
    def patch_module_args(args):
        saved = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode("utf-8")
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = saved


def run_module(module, args, capsys):
    """Run module.main() with args; return its JSON result, with its exit code as rc_exit."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as caught:
            module.main()
    result = json.loads(capsys.readouterr().out)
    result["rc_exit"] = caught.value.code
    return result
