# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/role-docs.py: markup, one row per option with its default, --check and --write."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
SCRIPT = os.path.join(REPO, "scripts", "role-docs.py")
ROLES = os.path.join(REPO, "roles")

_SPEC = importlib.util.spec_from_file_location("role_docs", SCRIPT)
role_docs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(role_docs)

SPECS = role_docs.load_specs(ROLES)
MARKERS = role_docs.BEGIN + "\n" + role_docs.END + "\n"
LEFTOVER_MARKUP = re.compile(r"\b(RV|[CIBMULOVEP])\(")


def spec_description(role, option, index=0):
    text = SPECS[role]["main"]["options"][option]["description"]
    return text if isinstance(text, str) else text[index]


def cells(row):
    """A table row's cells, split at the pipes that are not escaped."""
    assert row.startswith("| ") and row.endswith(" |"), row
    return [part.strip() for part in re.split(r"(?<!\\)\|", row[2:-2])]


def unescape_code(text):
    match = re.fullmatch(r"(`+) ?(.*?) ?\1", text)
    assert match, text
    return match.group(2).replace("\\|", "|")


def role_rows(markdown):
    """{role: [cells of each table row]} from the generated Markdown."""
    rows = {}
    role = None
    for line in markdown.splitlines():
        if line.startswith("### "):
            role = line[4:]
            rows[role] = []
        elif line.startswith("| `"):
            rows[role].append(cells(line))
    return rows


@pytest.mark.parametrize("role, option, index, expected", [
    ("gpu_driver", "gpu_driver_branch", 1,
     "Empty means the OS's own branch with `gpu_driver_source=distro`; `gpu_driver_source=cuda_repo` needs one."),
    ("gpu_driver", "gpu_driver_source", 1,
     "`cuda_repo` adds NVIDIA's CUDA network repository (or a mirror of it) as a deb822 source whose `signed-by` key "
     "is checked against `gpu_driver_cuda_repo_key_fingerprint`."),
    ("gpu_kubelet", "gpu_kubelet_taints", 0,
     "Taints the node registers with, as `key[=value]:Effect`, e.g. `nvidia.com/gpu=present:NoSchedule`."),
    ("gpu_kubelet", "gpu_kubelet_gpu_labels", 0,
     "Add the labels gpu-feature-discovery would set, from `ansible_facts['nvidia']` (filter "
     "`gpufleet.nvidia.node_labels`)."),
    ("gpu_container_toolkit", "gpu_container_toolkit_repo_url", 0,
     "NVIDIA's libnvidia-container repository or a mirror with its layout (`<url>/<channel>/deb/<arch>/`, flat)."),
    ("gpu_device_plugin", "gpu_device_plugin_method", 0,
     "`manifests` applies the role's own manifests with `kubernetes.core.k8s` (no Helm needed). `helm` installs "
     "NVIDIA's chart with `kubernetes.core.helm` at the chart version matching `gpu_device_plugin_version`, with the "
     "same settings as chart values (the `helm` binary is needed where the role runs); the RuntimeClass is still "
     "applied as a manifest."),
])
def test_markup_of_real_descriptions(role, option, index, expected):
    assert role_docs.markup(spec_description(role, option, index)) == expected


@pytest.mark.parametrize("text, expected", [
    ("I(only) B(this)", "*only* **this**"),
    ("see L(the docs,https://example.com/a) or U(https://example.com/b)",
     "see [the docs](https://example.com/a) or <https://example.com/b>"),
    ("RV(changed) E(KUBECONFIG) P(gpufleet.nvidia.node_labels#filter)",
     "`changed` `KUBECONFIG` `gpufleet.nvidia.node_labels#filter`"),
    ("V(a\\)b) O(ignore:old) O(x=y)", "`a)b` `old` `x=y`"),
    ("C(a`b) and *stars* <b>", "``a`b`` and \\*stars\\* &lt;b>"),
    ("ABC(1) SPEC(x) C(unclosed", "ABC(1) SPEC(x) C(unclosed"),
])
def test_markup_of_every_kind(text, expected):
    assert role_docs.markup(text) == expected


def test_no_markup_left_and_no_raw_pipes_or_newlines_in_cells():
    markdown = role_docs.render(SPECS)
    for line in markdown.splitlines():
        if line.startswith("| `"):
            assert len(cells(line)) == 4, line
            assert not LEFTOVER_MARKUP.search(line), line


@pytest.mark.parametrize("role", sorted(SPECS))
def test_every_option_has_its_row_and_default(role):
    options = SPECS[role]["main"]["options"]
    rows = role_rows(role_docs.render(SPECS))[role]
    assert [unescape_code(row[0]) for row in rows] == list(options)
    for row, (name, spec) in zip(rows, options.items()):
        assert row[1].startswith(spec["type"]), name
        for choice in spec.get("choices", []):
            assert role_docs.code(role_docs.default_text(choice)) in row[1], name
        shown = unescape_code(row[2])
        default = spec["default"]
        if isinstance(default, str) and default.startswith("{{"):
            assert shown == default, name
        else:
            assert yaml.safe_load(shown) == default, name
            assert type(yaml.safe_load(shown)) is type(default), name


def test_roles_are_sorted_and_all_documented():
    markdown = role_docs.render(SPECS)
    headings = [line[4:] for line in markdown.splitlines() if line.startswith("### ")]
    with_specs = [name for name in sorted(os.listdir(ROLES))
                  if os.path.isfile(os.path.join(ROLES, name, "meta", "argument_specs.yml"))]
    assert headings == with_specs
    for role in with_specs:
        assert SPECS[role]["main"]["short_description"].rstrip(".") + "." in markdown


def test_defaults_in_compact_flow_form():
    assert role_docs.default_cell("") == '`""`'
    assert role_docs.default_cell(None) == "`null`"
    assert role_docs.default_cell("true") == '`"true"`'
    assert role_docs.default_cell("10%") == "`10%`"
    assert role_docs.default_cell(["a", "b"]) == "`[a, b]`"
    assert role_docs.default_cell({"nvidia.com/gpu.present": "true"}) == "`{nvidia.com/gpu.present: 'true'}`"
    long = role_docs.default_cell(["x" * 50] * 5)
    assert len(long) <= role_docs.MAX_DEFAULT + 2 and long.endswith("…`")


def test_suboptions_required_and_other_entry_points():
    specs = {"demo": {
        "main": {
            "short_description": "Demo role",
            "options": {
                "demo_rules": {
                    "description": ["Rules, each a C(dict)."],
                    "type": "list",
                    "elements": "dict",
                    "required": True,
                    "options": {
                        "name": {"description": "Name.", "type": "str", "required": True},
                        "mode": {"description": "Mode.", "type": "str", "choices": ["a|b", "c"], "default": "c"},
                    },
                },
            },
        },
        "upgrade": {"short_description": "Upgrade only", "options": {"demo_force": {"type": "bool", "default": False}}},
    }}
    markdown = role_docs.render(specs)
    assert markdown == role_docs.render(specs)
    assert "| `demo_rules` | list of dict, **required** |  | Rules, each a `dict`. |" in markdown
    assert "| `demo_rules.name` | str, **required** |  | Name. |" in markdown
    assert "| `demo_rules.mode` | str: `a\\|b` \\| `c` | `c` | Mode. |" in markdown
    assert markdown.index("Demo role.") < markdown.index("#### demo: entry point `upgrade`") < markdown.index(
        "| `demo_force` | bool | `false` |  |")


@pytest.fixture
def readme(tmp_path):
    path = tmp_path / "README.md"
    path.write_text("# Title\n\n## Role variables\n\n" + MARKERS + "\n## After\n\ntext\n", encoding="utf-8")
    return path


def test_check_detects_stale_section_and_passes_after_write(readme, capsys):
    assert role_docs.main(["--check", str(readme)], ROLES) == 1
    out = capsys.readouterr().out
    assert out.startswith("--- " + str(readme) + "\n+++ " + str(readme) + " (generated)\n")
    assert "+| `gpu_driver_reboot_timeout` | int | `1200` |" in out
    assert "python3 scripts/role-docs.py --write " + str(readme) in out

    assert role_docs.main(["--write", str(readme)], ROLES) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# Title\n\n## Role variables\n\n" + role_docs.BEGIN + "\n\n### gpu_container_toolkit\n")
    assert text.endswith("|\n\n" + role_docs.END + "\n\n## After\n\ntext\n")
    capsys.readouterr()
    assert role_docs.main(["--check", str(readme)], ROLES) == 0

    readme.write_text(text.replace("| int | `1200` |", "| int | `600` |"), encoding="utf-8")
    assert role_docs.main(["--check", str(readme)], ROLES) == 1
    out = capsys.readouterr().out
    assert "-| `gpu_driver_reboot_timeout` | int | `600` |" in out
    assert "+| `gpu_driver_reboot_timeout` | int | `1200` |" in out
    assert role_docs.main(["--write", str(readme)], ROLES) == 0
    assert readme.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("content, found", [
    ("# Title\n\nno markers\n", "0 BEGIN and 0 END"),
    ("# Title\n\n" + role_docs.BEGIN + "\n", "1 BEGIN and 0 END"),
    ("# Title\n\n" + role_docs.END + "\n" + role_docs.BEGIN + "\n", "the END marker before the BEGIN marker"),
    ("# Title\n\n" + MARKERS + MARKERS, "2 BEGIN and 2 END"),
])
@pytest.mark.parametrize("mode", ["--check", "--write"])
def test_missing_markers_fail_clearly(tmp_path, capsys, content, found, mode):
    path = tmp_path / "README.md"
    path.write_text(content, encoding="utf-8")
    assert role_docs.main([mode, str(path)], ROLES) == 1
    err = capsys.readouterr().err
    assert role_docs.BEGIN in err and role_docs.END in err and found in err
    assert path.read_text(encoding="utf-8") == content


def test_command_line(readme):
    check = [sys.executable, SCRIPT, "--check", str(readme)]
    stale = subprocess.run(check, capture_output=True, text=True, check=False)
    assert stale.returncode == 1 and "out of date" in stale.stdout
    write = subprocess.run([sys.executable, SCRIPT, "--write", str(readme)], capture_output=True, text=True, check=False)
    assert write.returncode == 0, write.stderr
    assert subprocess.run(check, capture_output=True, text=True, check=False).returncode == 0
