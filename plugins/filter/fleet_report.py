# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Public filters: the NVIDIA facts of many hosts to the data of one fleet report.

Implemented beside the filters internal to the roles and playbooks, in plugins/filter/internal/fleet_report.py
(gpufleet.nvidia.internal.*); this file exposes only the public ones, under their plain names.
"""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.filter.internal.fleet_report import fleet_report


class FilterModule(object):
    def filters(self):
        return {"fleet_report": fleet_report}
