# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""collection_version: installed and source-checkout layouts, and the copy the collection loader finds."""

from __future__ import annotations

import json
import os
import types

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter import collection_version as cv

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def manifest(version):
    # The shape ansible-galaxy writes (kubernetes.core 6.6.0 from the ansible 14.5.0 package, trimmed).
    return {"collection_info": {"namespace": "kubernetes", "name": "core", "version": version,
                                "dependencies": {}},
            "file_manifest_file": {"name": "FILES.json", "ftype": "file", "format": 1}, "format": 1}


def write(folder, name, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder


def test_installed_collection_reads_manifest(tmp_path):
    assert cv.version_in(str(write(tmp_path, "MANIFEST.json", json.dumps(manifest("6.6.0"))))) == "6.6.0"


def test_manifest_wins_over_galaxy_yml(tmp_path):
    write(tmp_path, "galaxy.yml", "namespace: kubernetes\nname: core\nversion: 7.0.0-dev\n")
    write(tmp_path, "MANIFEST.json", json.dumps(manifest("6.4.0")))
    assert cv.version_in(str(tmp_path)) == "6.4.0"


@pytest.mark.parametrize("name,text,version", [
    ("galaxy.yml", "namespace: kubernetes\nname: core\nversion: 6.5.0\n", "6.5.0"),
    ("galaxy.yaml", "---\nnamespace: kubernetes\nname: core\nversion: '6.5.1'\n", "6.5.1"),
])
def test_source_checkout_reads_galaxy_yml(tmp_path, name, text, version):
    assert cv.version_in(str(write(tmp_path, name, text))) == version


def test_folder_without_either_file_has_no_version(tmp_path):
    assert cv.version_in(str(tmp_path)) is None


@pytest.mark.parametrize("name,text,words", [
    ("MANIFEST.json", "{not json", "cannot read the collection's version from"),
    ("MANIFEST.json", json.dumps({"collection_info": {"name": "core"}}), "has no collection_info.version"),
    ("MANIFEST.json", json.dumps(["6.5.0"]), "has no collection_info.version"),
    ("galaxy.yml", "version: [unclosed\n", "cannot read the collection's version from"),
    ("galaxy.yml", "namespace: kubernetes\nname: core\n", "has no version"),
])
def test_unreadable_version_names_the_file(tmp_path, name, text, words):
    write(tmp_path, name, text)
    with pytest.raises(AnsibleFilterError) as caught:
        cv.version_in(str(tmp_path))
    assert words in str(caught.value)
    assert os.path.join(str(tmp_path), name) in str(caught.value)


def test_this_collection_is_found_through_the_loader():
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        expected = str(yaml.safe_load(handle)["version"])
    assert cv.collection_version("gpufleet.nvidia") == expected


def test_missing_collection_is_none():
    assert cv.collection_version("gpufleet_missing.nothing_here") is None


@pytest.mark.parametrize("version", ["6.4.0", "6.5.0", "6.6.0"])
def test_version_comes_from_the_folder_the_loader_resolves(tmp_path, monkeypatch, version):
    first = write(tmp_path / "first" / "kubernetes" / "core", "MANIFEST.json", json.dumps(manifest(version)))
    write(tmp_path / "second" / "kubernetes" / "core", "MANIFEST.json", json.dumps(manifest("9.9.9")))
    asked = []

    def import_module(name):
        asked.append(name)
        return types.SimpleNamespace(__path__=[str(first)])

    monkeypatch.setattr(cv.importlib, "import_module", import_module)
    assert cv.collection_version("kubernetes.core") == version
    assert asked == ["ansible_collections.kubernetes.core"]


def test_found_folder_without_a_version_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cv.importlib, "import_module", lambda name: types.SimpleNamespace(__path__=[str(tmp_path)]))
    with pytest.raises(AnsibleFilterError) as caught:
        cv.collection_version("kubernetes.core")
    assert "neither MANIFEST.json nor galaxy.yml" in str(caught.value) and str(tmp_path) in str(caught.value)


@pytest.mark.parametrize("value", ["kubernetes", "kubernetes.core.k8s_drain", "../etc.passwd", "", None, 6])
def test_wrong_input_names_what_it_got(value):
    with pytest.raises(AnsibleFilterError) as caught:
        cv.collection_version(value)
    assert "expects a collection name such as 'kubernetes.core'" in str(caught.value)


def test_filter_is_registered():
    assert cv.FilterModule().filters()["collection_version"] is cv.collection_version
