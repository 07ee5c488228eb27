#!/usr/bin/env bash
# Install the system packages `make demo` and `make test` need, from Debian's
# archive, when any is missing: podman and runc (systemd containers),
# mmdebstrap (the Debian images), gnupg and apt-utils (the signed local
# mirror), shellcheck, chromium and tesseract-ocr (the fleet report's
# screenshot test, with a font to render it), openssl and time (the test control plane's
# certificates and build times), gcc and libc6-dev (cgo: NVIDIA's nvidia-ctk, tests/nodetools).
# Needs root, or sudo. The control plane and nvidia-ctk are built with Go 1.26
# (tests/controlplane/build.sh, tests/nodetools/build.sh), which the project's machines carry
# beside Python.
set -euo pipefail

packages=(podman runc mmdebstrap apt-utils gnupg shellcheck make git openssh-client chromium fonts-liberation fonts-dejavu-core tesseract-ocr openssl time gcc libc6-dev)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "Missing packages: ${missing[*]}; run as root or install sudo." >&2; exit 1; }
    sudo=(sudo)
fi
echo "Installing from Debian's archive: ${missing[*]}"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
