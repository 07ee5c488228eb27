# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Public filters: TOML documents, read and written.

Implemented beside the filters internal to the roles and playbooks, in plugins/filter/internal/runtime_config.py
(gpufleet.nvidia.internal.*); this file exposes only the public ones, under their plain names.
"""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.filter.internal.runtime_config import to_toml, from_toml


class FilterModule(object):
    def filters(self):
        return {"to_toml": to_toml, "from_toml": from_toml}
