#!/usr/bin/env bash
# Build a Debian systemd container image for molecule from Debian's archive
# (no registry needed): mmdebstrap a minimal root file system, import it into podman.
#   scripts/build-image.sh <suite> <image-name>
#   e.g. scripts/build-image.sh bookworm localhost/gpufleet-debian:12
#        scripts/build-image.sh forky localhost/gpufleet-debian:forky (Debian testing)
# The image carries a label with a hash of its inputs (this script, the package list and
# tests/image/); an image whose label differs is built again.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=${1:?usage: build-image.sh <suite> <image-name>}
image=${2:?usage: build-image.sh <suite> <image-name>}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=systemd,systemd-sysv,dbus,python3,python3-apt,python3-debian,python3-yaml,sudo,procps,gnupg,ca-certificates,iproute2,kmod,openssh-server

# Debian's testing and unstable suites carry a Release file valid for a week; the archive this
# machine reaches can be older than that, so apt is told not to judge its age there (the
# signatures are still checked). The option stays in the image, for the tests' own apt runs.
aptopts=()
case $suite in
    stable|bookworm|trixie|oldstable) ;;
    *) aptopts=(--aptopt='Acquire::Check-Valid-Until "false"') ;;
esac

inputs=$( (echo "$suite $mirror $packages ${aptopts[*]}"; cat scripts/build-image.sh tests/image/gpufleet_test_bytecode.py tests/image/gpufleet-test-sshd tests/image/gpufleet-cgroup2-init) | sha256sum | cut -c1-16)
if podman image exists "$image"; then
    present=$(podman image inspect --format '{{ index .Labels "org.gpufleet.image-inputs" }}' "$image")
    if [ "$present" = "$inputs" ]; then
        echo "image $image already present (inputs $inputs)"
        exit 0
    fi
    echo "image $image was built from other inputs (${present:-none}, now $inputs): building it again"
fi

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT

# tests/image/README.md: the zip-import bytecode cache, a test-image speed-up only.
# The hooks' $1 (the root file system) is mmdebstrap's to expand, not this script's.
# shellcheck disable=SC2016
# The package lists mmdebstrap fetched stay in the image (--skip=cleanup/apt/lists): the scenarios'
# prepare steps update them only when they are older than a day (cache_valid_time), instead of each
# container fetching the same lists again at every run.
mmdebstrap --quiet --variant=minbase --include="$packages" "${aptopts[@]}" --skip=cleanup/apt/lists \
    --customize-hook='mkdir -p "$1/var/cache/gpufleet-test-bytecode"' \
    --customize-hook='copy-in tests/image/gpufleet_test_bytecode.py /usr/lib/python3/dist-packages' \
    --customize-hook='echo "import gpufleet_test_bytecode" > "$1/usr/lib/python3/dist-packages/gpufleet_test_bytecode.pth"' \
    --customize-hook='copy-in tests/image/gpufleet-test-sshd /usr/local/sbin' \
    --customize-hook='copy-in tests/image/gpufleet-cgroup2-init /usr/local/sbin' \
    --customize-hook='chroot "$1" systemctl disable ssh.service' \
    --customize-hook='sed -i "/^AcceptEnv/d" "$1/etc/ssh/sshd_config"' \
    "$suite" "$workdir/rootfs.tar" "deb $mirror $suite main"
podman import \
    --change 'CMD=["/sbin/init"]' \
    --change 'STOPSIGNAL=SIGRTMIN+3' \
    --change "LABEL=org.gpufleet.image-inputs=$inputs" \
    "$workdir/rootfs.tar" "$image"
echo "built $image from Debian $suite (inputs $inputs)"
