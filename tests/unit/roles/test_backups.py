# Copyright: gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backups of the files the roles edit go beside the path the user knows.

A configuration a configuration manager owns is often a link into its own tree
(/etc/containerd/config.toml -> /srv/cm/containerd/config.toml); the roles write through the link
(follow: true) so that it stays one. ansible.builtin.copy's and template's backup: true then makes
the backup beside the link's target, inside the manager's tree (the module resolves the link before
backing up). A task that follows a link therefore keeps no backup of its own, and a task before it
copies the file beside the link.
"""

from __future__ import annotations

import glob
import os

import pytest

from ansible_collections.gpufleet.nvidia.tests.unit.templating import DataLoader, Templar, evaluate_conditional, load_yaml

ROLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles"))
LOADER = DataLoader()
WRITERS = ("ansible.builtin.copy", "ansible.builtin.template")


def all_tasks(tasks):
    for entry in tasks or []:
        yield entry
        for part in ("block", "rescue", "always"):
            yield from all_tasks(entry.get(part))


def task_files():
    return sorted(glob.glob(os.path.join(ROLES, "*", "tasks", "*.yml")))


def writers_following_links():
    for path in task_files():
        for task in all_tasks(load_yaml(LOADER, path)):
            for action in WRITERS:
                args = task.get(action)
                if isinstance(args, dict) and args.get("follow") in (True, "true", "yes"):
                    yield os.path.relpath(path, ROLES), task


def test_the_roles_do_write_through_links():
    assert sorted(set(path for path, dummy in writers_following_links())) == [
        "gpu_container_toolkit/tasks/restore.yml", "gpu_container_toolkit/tasks/runtime-containerd.yml",
        "gpu_container_toolkit/tasks/runtime-docker.yml"]


@pytest.mark.parametrize("path,task", list(writers_following_links()), ids=lambda value: getattr(value, "get", lambda k: value)("name"))
def test_a_write_through_a_link_keeps_no_backup_beside_the_target(path, task):
    args = [task[action] for action in WRITERS if action in task][0]
    assert not args.get("backup"), "%s: %r backs up beside the link's target" % (path, task["name"])


@pytest.mark.parametrize("tasks_file,backup_name,write_name,variable", [
    ("runtime-containerd.yml", "Keep config.toml as it was, beside it", "Add the drop-in to config.toml's imports",
     "gpu_container_toolkit_containerd_config"),
    ("runtime-docker.yml", "Keep daemon.json as it was, beside it", "Write daemon.json with the nvidia runtime",
     "gpu_container_toolkit_docker_config"),
])
def test_the_backup_is_made_beside_the_link_before_the_write(tasks_file, backup_name, write_name, variable):
    tasks = list(all_tasks(load_yaml(LOADER, os.path.join(ROLES, "gpu_container_toolkit", "tasks", tasks_file))))
    names = [task.get("name") for task in tasks]
    assert names.index(backup_name) + 1 == names.index(write_name)
    backup = tasks[names.index(backup_name)]["ansible.builtin.copy"]
    link = "/etc/containerd/config.toml" if "containerd" in variable else "/etc/docker/daemon.json"
    done = Templar(loader=LOADER, variables={variable: link}).template(backup)
    # remote_src copies what the link leads to; the copy's name is the link's, beside it.
    assert done["remote_src"] is True and done["src"] == link
    assert os.path.dirname(done["dest"]) == os.path.dirname(link)
    assert done["dest"].startswith(link + ".") and done["dest"].endswith("~")


@pytest.mark.parametrize("new,expected", [("version = 2\nimports = ['x']\n", True), ("version = 2\n", False)])
def test_config_toml_is_kept_only_when_it_changes(new, expected):
    tasks = list(all_tasks(load_yaml(LOADER, os.path.join(ROLES, "gpu_container_toolkit", "tasks",
                                                          "runtime-containerd.yml"))))
    (backup,) = [task for task in tasks if task.get("name") == "Keep config.toml as it was, beside it"]
    templar = Templar(loader=LOADER, variables={
        "__gpu_container_toolkit_containerd_config_file": {"content": "dmVyc2lvbiA9IDIK"},
        "__gpu_container_toolkit_containerd_text": "version = 2\n",
        "__gpu_container_toolkit_containerd_new_text": new})
    assert all(evaluate_conditional(templar, condition) for condition in backup["when"]) is expected
