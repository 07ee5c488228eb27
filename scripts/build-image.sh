#!/usr/bin/env bash
# Build a Debian systemd container image for molecule from Debian's archive
# (no registry needed): mmdebstrap a minimal root file system, import it into podman.
#   scripts/build-image.sh <suite> <image-name>
#   e.g. scripts/build-image.sh bookworm localhost/gpufleet-debian:12
set -euo pipefail

suite=${1:?usage: build-image.sh <suite> <image-name>}
image=${2:?usage: build-image.sh <suite> <image-name>}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if podman image exists "$image"; then
    echo "image $image already present"
    exit 0
fi

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT

packages=systemd,systemd-sysv,dbus,python3,python3-apt,python3-debian,sudo,procps,gnupg,ca-certificates,iproute2,kmod
mmdebstrap --quiet --variant=minbase --include="$packages" \
    "$suite" "$workdir/rootfs.tar" "deb $mirror $suite main"
podman import \
    --change 'CMD=["/sbin/init"]' \
    --change 'STOPSIGNAL=SIGRTMIN+3' \
    "$workdir/rootfs.tar" "$image"
echo "built $image from Debian $suite"
