# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Public filters: NVIDIA driver branches, their end of life, and the fingerprints of OpenPGP keys.

Implemented beside the filters internal to the roles and playbooks, in plugins/filter/internal/driver_plan.py
(gpufleet.nvidia.internal.*); this file exposes only the public ones, under their plain names.
"""

from __future__ import annotations

from ansible_collections.gpufleet.nvidia.plugins.filter.internal.driver_plan import (
    driver_branch_of,
    driver_end_of_life,
    openpgp_fingerprints,
)


class FilterModule(object):
    def filters(self):
        return {
            "driver_branch_of": driver_branch_of,
            "driver_end_of_life": driver_end_of_life,
            "openpgp_fingerprints": openpgp_fingerprints,
        }
