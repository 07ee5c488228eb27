#!/usr/bin/env bash
# Run ansible-test on a copy of the collection placed where ansible-test
# wants it (.../ansible_collections/gpufleet/nvidia), since the repository
# root is the collection root and its own path has no such parents.
#   scripts/ansible-test.sh sanity|units [ansible-test options]
# ANSIBLE_TEST_WORKDIR names the copy (.build/<name>/...), so that runs of
# several ansible-core releases can go side by side; each copy keeps the
# virtualenv ansible-test made for its last run (tests/output/.tmp/delegation),
# which ansible-test checks and completes at every run.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
workdir=$repo/.build/${ANSIBLE_TEST_WORKDIR:-default}
build="$workdir/ansible_collections/gpufleet/nvidia"

# The release of ansible-test on PATH, and the pip bootstrap script it would download (see the
# stand-in's docstring).
read -r core pip_version < <(python3 - "$(command -v ansible-test)" <<'PY'
import re, sys, pathlib
bin_path = pathlib.Path(sys.argv[1]).resolve()
site = next(bin_path.parent.parent.glob("lib/python3*/site-packages"))
lib = site / "ansible_test/_internal/python_requirements.py"
release = re.search(r"__version__ = '([^']+)'", (site / "ansible/release.py").read_text()).group(1)
print(release, re.search(r"pip='([^']+)'", lib.read_text()).group(1))
PY
)
[ -n "$pip_version" ] || { echo "ansible-test.sh: no ansible-test release found on PATH" >&2; exit 1; }
# The Python the tests run on (the Makefile's PYTHONS): Debian 12's 3.11 for 2.16, 3.12 for 2.17,
# Debian 13's 3.13 for 2.18 and newer; each a controller Python its release accepts.
case "$core" in
    2.16.*) python=3.11 ;;
    2.17.*) python=3.12 ;;
    *) python=3.13 ;;
esac
python=${ANSIBLE_TEST_PYTHON:-$python}
if [ -d "$repo/.venvs/pythons/bin" ]; then
    PATH="$repo/.venvs/pythons/bin:$PATH"
fi
# ansible-test keeps its sanity virtualenvs in ~/.ansible/test/venv, for every checkout on the
# machine, and takes one whose marker.txt is there as ready. Each venv's python is a link to the
# interpreter that made it, which may be another checkout's .venvs/debian13: once that checkout is
# gone the link is broken, and ansible-test would stop on 'Required program ".../bin/python" not
# found'. Removing such a venv's marker makes ansible-test remove it and make it anew, under the
# lock of its own pip version (a link that resolves is left alone, whoever made it).
for venv in "$HOME"/.ansible/test/venv/*/*/*/; do
    if [ -L "${venv}bin/python" ] && [ ! -e "${venv}bin/python" ]; then
        rm -f "${venv}marker.txt"
    fi
done
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
mkdir -p "$(dirname "$cache")"
# With the path of the project's uv in it, when there is one.
uv=$repo/.venvs/uv/bin/uv
[ -x "$uv" ] || uv=
bootstrap=$(sed "s|^UV = \"\"$|UV = \"$uv\"|" "$repo/scripts/ansible-test-pip-bootstrap.py")
if [ "$(cat "$cache" 2>/dev/null)" != "$bootstrap" ]; then
    # Replaced in one step: another run may be reading it.
    printf '%s\n' "$bootstrap" > "$cache.$$"
    mv -f "$cache.$$" "$cache"
fi

# Same files as a clean clone would have: tracked plus new, not ignored.
# Only the delegation virtualenv of the last run is kept.
kept="$workdir/delegation"
rm -rf "$kept"
if [ -d "$build/tests/output/.tmp/delegation" ]; then
    mv "$build/tests/output/.tmp/delegation" "$kept"
fi
rm -rf "$build"
mkdir -p "$build"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
    | tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null) \
    | tar -xf - -C "$build"
cd "$build"
git init -q . && git add -A >/dev/null
if [ -d "$kept" ]; then
    mkdir -p tests/output/.tmp
    mv "$kept" tests/output/.tmp/delegation
fi

command=$1
shift
exec ansible-test "$command" --venv --python "$python" --color no "$@"
