# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Public filters: the GPUs and MIG devices that nvidia-smi -L lists.

Implemented beside the filters internal to the roles and playbooks, in plugins/filter/internal/smoke_test.py
(gpufleet.nvidia.internal.*); this file exposes only the public ones, under their plain names.
"""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.filter.internal.smoke_test import nvidia_smi_list


class FilterModule(object):
    def filters(self):
        return {"nvidia_smi_list": nvidia_smi_list}
