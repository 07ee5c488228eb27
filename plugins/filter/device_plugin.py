# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Public filters: the inventory hosts with their Kubernetes node names and NVIDIA facts.

Implemented beside the filters internal to the roles and playbooks, in plugins/filter/internal/device_plugin.py
(gpufleet.nvidia.internal.*); this file exposes only the public ones, under their plain names.
"""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.filter.internal.device_plugin import fleet_nodes


class FilterModule(object):
    def filters(self):
        return {"fleet_nodes": fleet_nodes}
