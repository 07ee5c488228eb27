#!/usr/bin/env bash
# make demo: turn two local Debian systemd containers into (almost) GPU nodes
# with playbooks/site.yml, exactly as against real nodes, then write the fleet
# report. Run through `make demo`, which sets up what this needs first.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${DEMO_OUT:-$PWD/demo-output}
prefix=${MOLECULE_IMAGE_PREFIX:-localhost/gpufleet-debian}
mirrors=${GPUFLEET_MIRRORS:?GPUFLEET_MIRRORS must name the local mirrors (make demo sets it)}
declare -A nodes=([gpufleet-demo-1]=12 [gpufleet-demo-2]=13)
export ANSIBLE_PIPELINING=true ANSIBLE_PYTHON_INTERPRETER=auto_silent ANSIBLE_DISPLAY_SKIPPED_HOSTS=false
export ANSIBLE_INJECT_FACT_VARS=false ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}

banner() { printf '\n==== %s\n' "$*"; }

banner "Starting the demo nodes (Debian 12 and 13 systemd containers under podman)"
for node in "${!nodes[@]}"; do
    podman rm -f "$node" >/dev/null 2>&1 || true
    podman run -d --name "$node" --hostname "$node" --systemd=always \
        -v "$mirrors:/srv/mirrors:ro" "$prefix:${nodes[$node]}" /sbin/init >/dev/null
done
for node in "${!nodes[@]}"; do
    for _ in $(seq 60); do
        state=$(podman exec "$node" systemctl is-system-running 2>/dev/null || true)
        case "$state" in running|degraded) break ;; esac
        sleep 1
    done
    case "$state" in running|degraded) ;; *) echo "$node: systemd did not come up ($state)" >&2; exit 1 ;; esac
    echo "$node: Debian ${nodes[$node]}, systemd $state"
done

banner "Making them look like kubeadm-joined nodes (real containerd, kubeadm's kubelet layout)"
ansible-playbook -i demo/inventory demo/prepare.yml

banner "ansible-playbook gpufleet.nvidia.site (the node part; this inventory has no control plane)"
started=$(date +%s)
ansible-playbook -i demo/inventory gpufleet.nvidia.site
site_seconds=$(( $(date +%s) - started ))

banner "What each node has now (read back from the nodes)"
ansible-playbook -i demo/inventory demo/summary.yml

banner "Fleet report"
mkdir -p "$out"
ansible-playbook -i demo/inventory gpufleet.nvidia.report -e "gpufleet_report_dir=$out"

cat <<TEXT

==== Done: site.yml converged ${#nodes[@]} nodes in ${site_seconds} s.
Fleet report: $out/fleet-report.html (and fleet-report.md)

What was real here:
  - Debian's NVIDIA driver packages from non-free, installed, pinned and held
    by gpu_driver (535 on Debian 12, 550 on Debian 13); nouveau blacklisted.
  - nvml_facts reading them through Debian's real nvidia-smi.
  - Debian's containerd, given the nvidia runtime through a drop-in by
    gpu_container_toolkit (check: podman exec gpufleet-demo-1 containerd config dump).
  - systemd and kubeadm's kubelet unit layout; gpu_kubelet's drop-in, restart
    and its check that kubelet stays up.
What was NOT real, and why:
  - No GPU: the report says no_gpu, which is what nvml_facts truthfully sees.
    A container runs the host's kernel, so no NVIDIA kernel module is built or
    loaded (gpu_driver_kernel_module: none, gpu_driver_require_gpu: false).
  - nvidia-container-toolkit and kubelet are STAND-INS: Debian ships neither.
    The toolkit packages come from a signed local mirror laid out like
    NVIDIA's; kubelet is a small program that checks its flags like kubelet.
  - No cluster: the device plugin and the smoke test need a Kubernetes API
    (see README, "Quick start on a real cluster").
The nodes keep running for a look around (podman exec -it gpufleet-demo-1 bash);
make demo-clean removes them.
TEXT
