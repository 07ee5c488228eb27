#!/usr/bin/env bash
# Run ansible-test on a copy of the collection placed where ansible-test
# wants it (.../ansible_collections/gpufleet/nvidia), since the repository
# root is the collection root and its own path has no such parents.
#   scripts/ansible-test.sh sanity|units [ansible-test options]
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build="$repo/.build/ansible_collections/gpufleet/nvidia"
python=${ANSIBLE_TEST_PYTHON:-3.12}

# The pip bootstrap script ansible-test would download (see the stand-in's docstring).
pip_version=$(python3 - "$(command -v ansible-test)" <<'PY'
import re, sys, pathlib
bin_path = pathlib.Path(sys.argv[1]).resolve()
lib = next(bin_path.parent.parent.glob("lib/python3*/site-packages/ansible_test/_internal/python_requirements.py"))
print(re.search(r"pip='([^']+)'", lib.read_text()).group(1))
PY
)
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
mkdir -p "$(dirname "$cache")"
cmp -s "$repo/scripts/ansible-test-pip-bootstrap.py" "$cache" 2>/dev/null \
    || cp "$repo/scripts/ansible-test-pip-bootstrap.py" "$cache"

# Same files as a clean clone would have: tracked plus new, not ignored.
rm -rf "$build"
mkdir -p "$build"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
    | tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null) \
    | tar -xf - -C "$build"
cd "$build"
git init -q . && git add -A >/dev/null

command=$1
shift
exec ansible-test "$command" --venv --python "$python" --color no "$@"
