#!/usr/bin/env bash
# Galaxy's own import checks on the built collection (make docs-test): build the tarball as a
# user would (ansible-galaxy collection build), then run galaxy-importer on it with
# tests/docs/galaxy-importer.cfg. It fails on what Galaxy refuses (galaxy.yml and the manifest,
# the tarball's layout, a role without a README, every plugin's documentation through
# ansible-doc, the changelog) and on any error or warning the importer logs, but one: Galaxy
# warns about every sanity ignore file, and tests/sanity/ignore-*.txt exist, empty (an empty
# one is what ansible-test sanity's policy asks for).
#   tests/docs/galaxy-import.sh OUT_DIR
# Needs the docs venv's bin/ on PATH (galaxy-importer, ansible-galaxy).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: tests/docs/galaxy-import.sh OUT_DIR}
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
ansible-galaxy collection build --output-path "$out" . > /dev/null
tarball=$(ls "$out"/gpufleet-nvidia-*.tar.gz)
# From $out: the importer writes importer_result.json into the folder it runs in.
(cd "$out" && GALAXY_IMPORTER_CONFIG=$OLDPWD/tests/docs/galaxy-importer.cfg python -m galaxy_importer.main "$tarball") > "$out/import.log" 2>&1 || {
    cat "$out/import.log"; echo "galaxy-importer refused $tarball" >&2; exit 1; }
grep -v '^Loading ' "$out/import.log"
if grep -E '^(ERROR|WARNING)' "$out/import.log" | grep -v -E '^WARNING: Ignore files skip ansible-test sanity tests, found ignore-[0-9.]+\.txt with 0 statement\(s\)$'; then
    echo "galaxy-importer logged the errors or warnings above about $tarball" >&2
    exit 1
fi
grep -q '^Importer processing completed successfully' "$out/import.log" || {
    echo "galaxy-importer did not complete its import of $tarball" >&2; exit 1; }
echo "galaxy-importer accepted $tarball"
