# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plugins only the roles and playbooks use live under internal/ (gpufleet.nvidia.internal.*), the public
ones under their plain names: each filter and module is in the folder its documentation says it belongs to."""

from __future__ import annotations

import ast
import glob
import importlib
import os

import pytest
import yaml

PLUGINS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "plugins"))
PACKAGE = "ansible_collections.gpufleet.nvidia.plugins"


def python_files(folder):
    return sorted(os.path.basename(path)[:-3] for path in glob.glob(os.path.join(PLUGINS, folder, "*.py"))
                  if not os.path.basename(path).startswith("__"))


def filters(internal):
    """name -> function of every filter the FilterModules of plugins/filter/ (or of its internal/) expose."""
    folder = "filter/internal" if internal else "filter"
    found = {}
    for name in python_files(folder):
        module = importlib.import_module("%s.%s.%s" % (PACKAGE, folder.replace("/", "."), name))
        for filter_name, function in module.FilterModule().filters().items():
            assert filter_name not in found, "%s is exposed twice in plugins/%s" % (filter_name, folder)
            found[filter_name] = function
    return found


def load_yaml(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def module_doc(path):
    """DOCUMENTATION and EXAMPLES of a module, read from its source."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    texts = dict((node.targets[0].id, node.value.value) for node in tree.body
                 if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                 and isinstance(node.value, ast.Constant))
    return yaml.safe_load(texts["DOCUMENTATION"]), texts["EXAMPLES"]


def text_of(value):
    return " ".join(value) if isinstance(value, list) else str(value or "")


@pytest.mark.parametrize("internal", [False, True])
def test_every_filter_has_its_documentation_in_its_folder(internal):
    folder = os.path.join(PLUGINS, "filter", "internal") if internal else os.path.join(PLUGINS, "filter")
    prefix = "gpufleet.nvidia.internal." if internal else "gpufleet.nvidia."
    exposed = filters(internal)
    documented = sorted(os.path.basename(path)[:-4] for path in glob.glob(os.path.join(folder, "*.yml")))
    assert sorted(exposed) == documented
    for name in documented:
        doc = load_yaml(os.path.join(folder, name + ".yml"))
        short = doc["DOCUMENTATION"]["short_description"]
        assert doc["DOCUMENTATION"]["name"] == name
        assert short.startswith("Internal") is internal, (name, short)
        assert ("Internal to " in text_of(doc["DOCUMENTATION"]["description"])) is internal, name
        assert prefix + name in doc["EXAMPLES"], name


def test_no_filter_is_both_public_and_internal():
    public, internal = filters(False), filters(True)
    assert public
    assert internal
    assert not set(public) & set(internal)


@pytest.mark.parametrize("internal", [False, True])
def test_every_module_is_in_the_folder_its_documentation_says(internal):
    folder = os.path.join("modules", "internal") if internal else "modules"
    names = python_files(folder)
    assert names
    for name in names:
        doc, examples = module_doc(os.path.join(PLUGINS, folder, name + ".py"))
        assert doc["module"] == name
        assert doc["short_description"].startswith("Internal: ") is internal, (name, doc["short_description"])
        assert ("Internal to " in text_of(doc["description"])) is internal, name
        fqcn = ("gpufleet.nvidia.internal.%s:" if internal else "gpufleet.nvidia.%s:") % name
        assert fqcn in examples, name


def test_every_action_plugin_has_its_module_beside_it():
    for folder in ("action", os.path.join("action", "internal")):
        for name in python_files(folder):
            assert os.path.isfile(os.path.join(PLUGINS, folder.replace("action", "modules"), name + ".py")), name
