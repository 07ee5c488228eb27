#!/usr/bin/env bash
# Podman settings that let systemd containers run on the CI machine kind
# (no CAP_SYS_RESOURCE: nproc limits above 65535 fail; cgroupfs, runc).
# Writes /etc/containers/containers.conf only when its content differs.
set -euo pipefail

conf=/etc/containers/containers.conf
want=$(cat <<'TOML'
# Managed by gpufleet.nvidia scripts/podman-setup.sh
[containers]
default_ulimits = ["nofile=8192:8192", "nproc=8192:8192"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
TOML
)

if [ -f "$conf" ] && [ "$(cat "$conf")" = "$want" ]; then
    exit 0
fi
if [ -f "$conf" ]; then
    cp -a "$conf" "$conf.$(date +%Y%m%d%H%M%S).bak"
fi
mkdir -p "$(dirname "$conf")"
printf '%s\n' "$want" > "$conf"
echo "wrote $conf"
