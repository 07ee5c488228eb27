#!/usr/bin/env bash
# Build the documentation site into $1 (make docs: .build/docs): antsibull-docs writes a page for every
# module, filter and role from the collection's own documentation (plugins' DOCUMENTATION, the
# filters' .yml files, roles' meta/argument_specs.yml) and takes in the guides of docs/docsite;
# Sphinx turns them into HTML with warnings as errors (nitpicky: every reference must resolve),
# and scripts/docs-links.py checks every relative link and anchor of the built pages.
#   scripts/docs-build.sh OUT_DIR
# Needs the docs venv's bin/ on PATH (antsibull-docs, sphinx-build). The collection documented is
# this checkout, linked as ansible_collections/gpufleet/nvidia into OUT_DIR/collections, the only
# folder of ANSIBLE_COLLECTIONS_PATH here: its documentation needs no other collection, so the site
# needs neither make collections nor another gpufleet.nvidia installed elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/docs-build.sh OUT_DIR}

rm -rf "$out"
mkdir -p "$out/collections/ansible_collections/gpufleet"
out=$(cd "$out" && pwd)
ln -s "$PWD" "$out/collections/ansible_collections/gpufleet/nvidia"
export ANSIBLE_COLLECTIONS_PATH="$out/collections"
# antsibull-docs writes only into a folder that no one else may write to.
install -d -m 700 "$out/rst" "$out/rst/collection"

start=$(date +%s)
antsibull-docs --config-file docs/site/antsibull-docs.cfg collection \
    --use-current --squash-hierarchy --fail-on-error \
    --dest-dir "$out/rst/collection" gpufleet.nvidia
# The role index first, before the plugin index: antsibull-docs puts the roles last, after every
# module and every filter, the roles' internal ones included.
python3 - "$out/rst/collection/index.rst" <<'PY'
import re
import sys

path = sys.argv[1]
with open(path, encoding="utf-8") as handle:
    text = handle.read()
plugins = ".. _plugin_index_for_gpufleet.nvidia:\n"
roles = ".. _role_plugins_in_gpufleet.nvidia:\n"
start = text.find(roles)
# The role index must be the page's last section, after the plugin index, for this move to be whole.
if text.count(plugins) != 1 or text.count(roles) != 1 or start < text.index(plugins) \
        or re.search(r"^\.\. _", text[start + len(roles):], re.M):
    sys.exit("%s: antsibull-docs no longer ends its collection index with the role index after "
             "the plugin index; change the move in scripts/docs-build.sh" % path)
role_index = text[start:].rstrip("\n") + "\n\n"
text = text[:start].rstrip("\n") + "\n"
at = text.index(plugins)
with open(path, "w", encoding="utf-8") as handle:
    handle.write(text[:at] + role_index + text[at:])
PY
# The public modules and filters first: antsibull-docs lists every module, then every filter, by name, so the
# roles' and playbooks' own (plugins/*/internal/, named gpufleet.nvidia.internal.*) sit among the public ones.
# They move to a section of their own at the end of the page, each kind with its bullets and its hidden toctree.
python3 - "$out/rst/collection/index.rst" <<'PY'
import re
import sys

path = sys.argv[1]
with open(path, encoding="utf-8") as handle:
    text = handle.read()
INTERNAL = "gpufleet.nvidia.internal."
KINDS = (("module", "Modules"), ("filter", "Filter Plugins"))
problem = "%s: antsibull-docs' plugin index is not laid out as scripts/docs-build.sh expects (%s); change the move there"


def layout(text, kind, title):
    """(start, end, bullets, toctree entries) of the kind's subsection of the plugin index."""
    label = ".. _%s_plugins_in_gpufleet.nvidia:\n\n%s\n%s\n\n" % (kind, title, "~" * len(title))
    if text.count(label) != 1:
        sys.exit(problem % (path, "no single %s subsection" % kind))
    start = text.index(label) + len(label)
    match = re.compile(r"((?:\* .*\n(?:  .*\n)*)+)\n\.\. toctree::\n    :maxdepth: 1\n    :hidden:\n\n((?:    \S.*\n)+)"
                       ).match(text, start)
    if not match:
        sys.exit(problem % (path, "the %s subsection is not bullets then a hidden toctree" % kind))
    bullets = re.findall(r"\* .*\n(?:  .*\n)*", match.group(1))
    entries = match.group(2).splitlines(True)
    return start, match.end(), bullets, entries


moved = []
for kind, title in KINDS:
    start, end, bullets, entries = layout(text, kind, title)
    internal = [bullet for bullet in bullets if "<%s" % INTERNAL in bullet]
    names = [entry for entry in entries if entry.strip().startswith("internal.")]
    if len(internal) != len(names) or not internal or len(internal) == len(bullets):
        sys.exit(problem % (path, "%d internal %ss listed, %d internal pages, %d %ss in all"
                            % (len(internal), kind, len(names), len(bullets), kind)))
    kept = "".join(b for b in bullets if b not in internal) + "\n.. toctree::\n    :maxdepth: 1\n    :hidden:\n\n" \
        + "".join(e for e in entries if e not in names)
    text = text[:start] + kept + text[end:]
    heading = "Internal %s" % title
    moved.append(".. _internal_%s_plugins_in_gpufleet.nvidia:\n\n%s\n%s\n\n" % (kind, heading, "~" * len(heading))
                 + "".join(internal) + "\n.. toctree::\n    :maxdepth: 1\n    :hidden:\n\n" + "".join(names))
section = """.. _internal_plugins_in_gpufleet.nvidia:

Internal Plugins of the Roles and Playbooks
-------------------------------------------

These modules and filters are internal to the collection's roles and playbooks, which call them as
``gpufleet.nvidia.internal.NAME``. They are not part of the collection's public interface: their options,
input and output may change in any release.

"""
with open(path, "w", encoding="utf-8") as handle:
    handle.write(text.rstrip("\n") + "\n\n\n" + section + "\n".join(moved))
PY
cp docs/site/index.rst "$out/rst/index.rst"
# The changelog page: antsibull-changelog's CHANGELOG.rst, as released.
cp CHANGELOG.rst "$out/rst/changelog.rst"
echo "antsibull-docs: $(( $(date +%s) - start )) s"

start=$(date +%s)
sphinx-build -q -b html -c docs/site -W --keep-going -n "$out/rst" "$out/html"
echo "sphinx-build: $(( $(date +%s) - start )) s"

python3 scripts/docs-links.py "$out/html"
echo "site: $out/html/index.html"
