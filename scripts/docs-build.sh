#!/usr/bin/env bash
# Build the documentation site into $1 (make docs: .build/docs): antsibull-docs writes a page for every
# module, filter and role from the collection's own documentation (plugins' DOCUMENTATION, the
# filters' .yml files, roles' meta/argument_specs.yml) and takes in the guides of docs/docsite;
# Sphinx turns them into HTML with warnings as errors (nitpicky: every reference must resolve),
# and scripts/docs-links.py checks every relative link and anchor of the built pages.
#   scripts/docs-build.sh OUT_DIR
# Needs the docs venv's bin/ on PATH (antsibull-docs, sphinx-build) and ANSIBLE_COLLECTIONS_PATH
# holding this checkout as ansible_collections/gpufleet/nvidia (make collections).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/docs-build.sh OUT_DIR}

rm -rf "$out"
mkdir -p "$out"
# antsibull-docs writes only into a folder that no one else may write to.
install -d -m 700 "$out/rst" "$out/rst/collection"

start=$(date +%s)
antsibull-docs --config-file docs/site/antsibull-docs.cfg collection \
    --use-current --squash-hierarchy --fail-on-error \
    --dest-dir "$out/rst/collection" gpufleet.nvidia
cp docs/site/index.rst "$out/rst/index.rst"
# The changelog page: antsibull-changelog's CHANGELOG.rst, as released.
cp CHANGELOG.rst "$out/rst/changelog.rst"
echo "antsibull-docs: $(( $(date +%s) - start )) s"

start=$(date +%s)
sphinx-build -q -b html -c docs/site -W --keep-going -n "$out/rst" "$out/html"
echo "sphinx-build: $(( $(date +%s) - start )) s"

python3 scripts/docs-links.py "$out/html"
echo "site: $out/html/index.html"
