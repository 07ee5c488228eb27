#!/usr/bin/env bash
# Take Debian 13's own python3.13 out of the Debian 13 test image, to run on this Debian 12
# machine as the tests' controller Python (.venv, and ansible-test of the newer releases).
#   scripts/debian-python.sh <image> <folder> <patchelf>
#   e.g. scripts/debian-python.sh localhost/gpufleet-debian:13 .venvs/debian13 .venvs/uv/bin/patchelf
#
# Why: Debian builds CPython with profile-guided and link-time optimisation; pyenv's builds have
# neither. Measured on this 2-core machine, the same ansible-test sanity run took about a quarter
# fewer CPU-seconds on Debian's 3.13 than on pyenv's 3.12 (docs/docsite/rst/testing.rst, "How make test runs").
# Debian 12 has no Python newer than 3.11, which ansible-core 2.20 and newer no longer accept
# on the controller; Debian 13's is built for Debian 13's C library, so the folder carries that
# library and the others its extension modules link to (the image's /usr/lib/x86_64-linux-gnu),
# and the interpreter is told, in its own ELF headers (patchelf), to start with that folder's
# dynamic loader and libraries. Programs it starts (ssh, podman, git) are this machine's own and
# start as usual: nothing is set in the environment.
set -euo pipefail
image=${1:?usage: debian-python.sh <image> <folder> <patchelf>}
dest=${2:?usage: debian-python.sh <image> <folder> <patchelf>}
patchelf=${3:?usage: debian-python.sh <image> <folder> <patchelf>}
mkdir -p "$(dirname "$dest")"
dest=$(cd "$(dirname "$dest")" && pwd)/$(basename "$dest")

tmp="$dest.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
container=$(podman create --quiet "$image" /bin/true)
trap 'podman rm --force --ignore "$container" >/dev/null; rm -rf "$tmp"' EXIT
podman export "$container" | tar -x -C "$tmp" --wildcards \
    'usr/bin/python3.13' 'usr/lib/python3.13/*' 'usr/lib/x86_64-linux-gnu/*'

libs=$dest/usr/lib/x86_64-linux-gnu
"$patchelf" --set-interpreter "$libs/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$libs" \
    "$tmp/usr/bin/python3.13"

rm -rf "$dest"
mv "$tmp" "$dest"
# What pip, uv, ansible and the tests import from the standard library's compiled part.
"$dest/usr/bin/python3.13" -I -c '
import bz2, ctypes, decimal, hashlib, lzma, pyexpat, select, socket, sqlite3, ssl, sys, uuid, venv, zlib
print(f"Debian python {sys.version.split()[0]} ({ssl.OPENSSL_VERSION}) in {sys.prefix}")'
