# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Public filters: NVIDIA facts (gpufleet.nvidia.nvml_facts) to Kubernetes node labels.

Implemented beside the filters internal to the roles and playbooks, in plugins/filter/internal/node_labels.py
(gpufleet.nvidia.internal.*); this file exposes only the public ones, under their plain names.
"""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.filter.internal.node_labels import node_labels


class FilterModule(object):
    def filters(self):
        return {"node_labels": node_labels}
