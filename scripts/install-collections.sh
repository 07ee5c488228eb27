#!/usr/bin/env bash
# Install the collections the tests need into .collections/ without Ansible Galaxy:
# they come out of the `ansible` community package on PyPI (pinned), of which
# only the needed folders are unpacked. The collection under test is linked in
# from the source tree so that every tool uses the working copy.
#   scripts/install-collections.sh <python> <dest>
set -euo pipefail

python=${1:?usage: install-collections.sh <python> <dest>}
dest=${2:?usage: install-collections.sh <python> <dest>}
ansible_pkg=${ANSIBLE_PACKAGE_VERSION:-14.5.0}
collections="containers/podman kubernetes/core ansible/posix community/general"
repo=$(cd "$(dirname "$0")/.." && pwd)
stamp="$dest/.installed-ansible-$ansible_pkg"

mkdir -p "$dest/ansible_collections/gpufleet"
ln -sfn "$repo" "$dest/ansible_collections/gpufleet/nvidia"

if [ -f "$stamp" ]; then
    exit 0
fi

cache="$repo/.cache/pip-ansible"
mkdir -p "$cache"
"$python" -m pip download --quiet --no-deps --dest "$cache" "ansible==$ansible_pkg"
wheel=$(ls "$cache"/ansible-"$ansible_pkg"-*.whl)

patterns=()
for c in $collections; do
    rm -rf "${dest:?}/ansible_collections/$c"
    patterns+=("ansible_collections/$c/*")
done
"$python" - "$wheel" "$dest" "${patterns[@]}" <<'PY'
import fnmatch
import sys
import zipfile

wheel, dest, *patterns = sys.argv[1:]
with zipfile.ZipFile(wheel) as zf:
    members = [m for m in zf.namelist() if any(fnmatch.fnmatch(m, p) for p in patterns)]
    zf.extractall(dest, members)
print(f"unpacked {len(members)} files of {len(patterns)} collections from {wheel}")
PY
touch "$stamp"
