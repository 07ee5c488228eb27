#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: warn
version_added: 0.2.0
short_description: "Internal: Say something as a warning"
description:
  - Shows each message as a C([WARNING]) line of the run, as a module's own warnings are shown, and returns them.
  - The roles use it for what an operator must hear of without the run stopping, such as a driver branch past its
    end of life.
  - Runs on the controller only; changes nothing and never fails for a message.
  - Internal to the roles gpufleet.nvidia.gpu_driver, gpufleet.nvidia.gpu_kubelet, gpufleet.nvidia.gpu_device_plugin,
    gpufleet.nvidia.gpu_dra_driver and gpufleet.nvidia.gpu_smoke_test and the playbooks site.yml and gpu_path.yml, not
    part of the collection's public interface; its options and results may change in any release.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  msg:
    description:
      - The warning, or a list of them. Empty strings are left out; nothing is shown when none is left.
    type: raw
    required: true
attributes:
  action:
    description: Runs as an action plugin on the controller.
    support: full
  async:
    description: Cannot run asynchronously.
    support: none
  bypass_host_loop:
    description: Runs once per host.
    support: none
  check_mode:
    description: Can run in check mode, and warns there too.
    support: full
  diff_mode:
    description: Would show a diff of what changed.
    support: none
    details: Nothing changes.
  idempotent:
    description: A second run with the same arguments reports no change.
    support: full
  platform:
    description: Targets the action runs for.
    support: full
    platforms: all
"""

EXAMPLES = r"""
- name: Say the driver branch is past its end of life
  gpufleet.nvidia.internal.warn:
    msg: "Driver branch 535 reached its end of life in June 2026."
"""

RETURN = r"""
warnings_shown:
  description: The warnings that were shown.
  returned: always
  type: list
  elements: str
  sample: ["Driver branch 535 reached its end of life in June 2026."]
msg:
  description: The warnings joined with C(; ).
  returned: always
  type: str
"""
