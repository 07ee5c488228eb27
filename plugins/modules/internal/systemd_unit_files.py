#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_unit_files
version_added: 0.2.0
short_description: "Internal: Find a system unit's file and drop-ins as systemd loads them at its next reload"
description:
  - C(systemctl show) answers with the files systemd loaded (C(FragmentPath), C(DropInPaths)), which stay as they were
    until C(systemctl daemon-reload). A drop-in written without a reload is on disk, not in C(DropInPaths), and the
    unit runs with it after the next reload, whoever makes it.
  - This module finds the unit's files on disk as systemd's unit loader does, so that a role that re-declares a
    unit's command from its other drop-ins works from what systemd will run, not from what it loaded.
  - Changes nothing.
  - Internal to the role gpufleet.nvidia.gpu_kubelet, not part of the collection's public interface; its options and
    results may change in any release.
author:
  - gpufleet.nvidia contributors (@gpufleet)
options:
  name:
    description: The unit, C(kubelet) or C(kubelet.service).
    type: str
    required: true
attributes:
  check_mode:
    description: Can run in check mode.
    support: full
    details: The module only reads.
  diff_mode:
    description: Would show a diff of what changed.
    support: none
    details: The module never changes anything.
  idempotent:
    description: A second run with the same arguments reports no change.
    support: full
    details: The module never reports a change.
  platform:
    description: Targets the module runs on.
    support: full
    platforms: posix
notes:
  - The system manager's unit load path of systemd.unit(5) is searched; C($SYSTEMD_UNIT_PATH) and user units are not.
  - Drop-ins are the C(*.conf) files of C(<unit>.d/), of the dash-truncated C(<prefix>-.<type>.d/) and of the
    type-wide C(<type>.d/) folders in every directory of the load path; of the files of one name the first in
    systemd's order is used, one that is empty or a link to C(/dev/null) masks the name, and the rest are applied in
    the lexical order of their names.
  - Needs C(systemctl) for RV(need_daemon_reload) only.
"""

EXAMPLES = r"""
- name: Find kubelet's unit file and drop-ins as systemd loads them at its next reload
  gpufleet.nvidia.internal.systemd_unit_files:
    name: kubelet
  register: kubelet_files

- name: Read them in systemd's order
  ansible.builtin.slurp:
    src: "{{ item }}"
  loop: "{{ [kubelet_files.fragment_path] + kubelet_files.dropin_paths }}"
"""

RETURN = r"""
fragment_path:
  description: The unit file, the first of the load path; null when there is none or the unit is masked.
  returned: always
  type: str
  sample: /usr/lib/systemd/system/kubelet.service
dropin_paths:
  description: The drop-ins, in the order systemd applies them.
  returned: always
  type: list
  elements: str
  sample: [/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf, /etc/systemd/system/kubelet.service.d/90-gpu.conf]
need_daemon_reload:
  description:
    - Whether systemd says its loaded copy of the unit is older than the files (C(NeedDaemonReload)); null when
      C(systemctl) cannot say.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.nvidia.plugins.module_utils.systemd_units import unit_files_on_disk, unit_name


def main():
    module = AnsibleModule(argument_spec={"name": {"type": "str", "required": True}}, supports_check_mode=True)
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C"}
    name = unit_name(module.params["name"])
    fragment, dropins = unit_files_on_disk(name)
    need_reload = None
    systemctl = module.get_bin_path("systemctl")
    if systemctl is not None:
        rc, out, dummy = module.run_command([systemctl, "show", "--property=NeedDaemonReload", "--", name])
        value = out.strip().partition("=")[2] if rc == 0 else ""
        need_reload = {"yes": True, "no": False}.get(value)
    module.exit_json(changed=False, fragment_path=fragment, dropin_paths=dropins, need_daemon_reload=need_reload)


if __name__ == "__main__":
    main()
