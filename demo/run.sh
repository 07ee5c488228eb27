#!/usr/bin/env bash
# make demo: turn two local Debian systemd containers into GPU nodes of a
# Kubernetes cluster (the real kube-apiserver, controller manager and scheduler on
# this machine, kwok for the Nodes) with playbooks/site.yml, exactly as against
# real nodes and a real cluster, then write the fleet report. Run through
# `make demo`, which sets up what this needs first.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${DEMO_OUT:-$PWD/demo-output}
prefix=${MOLECULE_IMAGE_PREFIX:-localhost/gpufleet-debian}
mirrors=${GPUFLEET_MIRRORS:?GPUFLEET_MIRRORS must name the local mirrors (make demo sets it)}
declare -A nodes=([gpufleet-demo-1]=12 [gpufleet-demo-2]=13)
# The real kubelet each node runs, built with the control plane (tests/controlplane/build.sh): the
# same release on both, so that the demo builds one Kubernetes (make test builds the oldest supported
# one too, and molecule gpu_kubelet runs it).
declare -A kubelets=([gpufleet-demo-1]=.cache/controlplane/bin/kubelet
                     [gpufleet-demo-2]=.cache/controlplane/bin/kubelet)
cluster_state=$out/testcluster
export GPUFLEET_DEMO_KUBECONFIG=$cluster_state/kubeconfig
testcluster() { "${PYTHON:-.venv/bin/python}" tests/controlplane/testcluster.py "$@"; }
export ANSIBLE_PIPELINING=true ANSIBLE_PYTHON_INTERPRETER=auto_silent ANSIBLE_DISPLAY_SKIPPED_HOSTS=false
export ANSIBLE_INJECT_FACT_VARS=false ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}

banner() { printf '\n==== %s\n' "$*"; }

banner "Starting the demo nodes (Debian 12 and 13 systemd containers under podman)"
for node in "${!nodes[@]}"; do
    [ -x "${kubelets[$node]}" ] || { echo "${kubelets[$node]} is missing: make demo-setup builds it" >&2; exit 1; }
    podman rm -f "$node" >/dev/null 2>&1 || true
    podman run -d --name "$node" --hostname "$node" --systemd=always \
        -v "$mirrors:/srv/mirrors:ro" -v "$PWD/${kubelets[$node]}:/usr/local/lib/gpufleet-test/kubelet:ro" \
        "$prefix:${nodes[$node]}" /sbin/init >/dev/null
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

banner "Making them look like kubeadm-joined nodes (real containerd, the real kubelet in kubeadm's layout, a STAND-IN nvidia-smi replaying a real capture)"
ansible-playbook -i demo/inventory demo/prepare.yml

banner "Starting the cluster: kube-apiserver, kube-controller-manager, kube-scheduler and etcd on this machine, kwok for the Nodes (tests/controlplane, demo/cluster.yml)"
mkdir -p "$out"
# Stopped when this script ends, however it ends; --ttl stops it even if this script is killed.
trap 'testcluster stop --state "$cluster_state" >/dev/null 2>&1 || true' EXIT
testcluster start --cluster demo/cluster.yml --kubeconfig "$GPUFLEET_DEMO_KUBECONFIG" \
    --state "$cluster_state" --ttl 1800
KUBECONFIG=$GPUFLEET_DEMO_KUBECONFIG kubectl version 2>/dev/null | grep -i server || true
KUBECONFIG=$GPUFLEET_DEMO_KUBECONFIG kubectl get nodes -o wide 2>/dev/null || true

banner "ansible-playbook gpufleet.nvidia.site (node part on the containers, cluster part against the cluster)"
started=$(date +%s)
ansible-playbook -i demo/inventory gpufleet.nvidia.site -e "gpufleet_report_dir=$out"
site_seconds=$(( $(date +%s) - started ))

banner "What each node has now (read back from the nodes)"
ansible-playbook -i demo/inventory demo/summary.yml

banner "Fleet report (facts from the nodes, Nodes from the API, smoke verdicts site.yml recorded)"
ansible-playbook -i demo/inventory gpufleet.nvidia.report -e "gpufleet_report_dir=$out"

banner "Stopping the cluster"
testcluster stop --state "$cluster_state"

kubernetes_version=$(sed -n 's/^KUBERNETES_VERSION=//p' tests/controlplane/versions.env)
cat <<TEXT

==== Done in ${SECONDS} s: site.yml converged ${#nodes[@]} nodes and the cluster in ${site_seconds} s.
Fleet report: $out/fleet-report.html (and fleet-report.md); the smoke
verdicts it shows are kept in the cluster, in ConfigMap
kube-system/gpufleet-cluster-results (stopped with the cluster here).

What was real here:
  - Debian's NVIDIA driver packages from non-free, installed, pinned and held
    by gpu_driver (535 on Debian 12, 550 on Debian 13); nouveau blacklisted.
  - Debian's containerd, given the nvidia runtime through a drop-in by
    gpu_container_toolkit (check: podman exec gpufleet-demo-1 containerd config dump).
  - kubelet ${kubernetes_version} on both nodes (the --config-dir drop-in), built
    from the k8s.io/kubernetes Go module, in
    kubeadm's unit layout: it judged gpu_kubelet's drop-in with the GPU labels
    and taint by its own flag parsing, configuration loading and validation,
    through the role's restart and its check that kubelet stays up.
  - nvml_facts, the device plugin's manifests, the Node labels (the health
    gating's gpufleet.nvidia.com/gpu-health among them), the smoke test's
    pods and every API call: the collection's own code, unchanged, through
    kubernetes.core and the kubernetes Python client over TLS.
  - The Kubernetes control plane: kube-apiserver, kube-controller-manager and
    kube-scheduler ${kubernetes_version} (built from the k8s.io/kubernetes Go module) with
    etcd, RBAC and kubeadm's admission plugins; stopped now.
What was FAKED (cluster file demo/cluster.yml):
  - the kubelets of the Nodes gpufleet-demo-1 and gpufleet-demo-2: kwok keeps
    the Nodes and their pods alive; no pod ran in the containers;
  - NVIDIA's device plugin and the GPUs (tests/controlplane/gpunodes.py, a
    STAND-IN): the plugin's pods make the Nodes advertise what their GPUs give;
    each Node replays a real nvidia-smi -q -x capture (2 x RTX A5000, 1 x RTX
    4000 SFF Ada), and its smoke-test pod printed them.
What was a STAND-IN, and why:
  - nvidia-smi in each container (tests/standins/nvidia-smi) prints the same
    capture as its Node's GPU side, so nvml_facts reads real GPU data; there is
    no GPU. Only its driver version is Debian's installed package's (535, 550);
    the CUDA version and everything else are the capture's. No kernel module
    is built or loaded (a container runs the host's kernel:
    gpu_driver_kernel_module: none).
  - nvidia-container-toolkit: Debian ships none. Its packages come from a
    signed local mirror laid out like NVIDIA's (with NVIDIA's real nvidia-ctk).
  - the kubelet service: a real kubelet cannot run a node in a container (it
    stops at /dev/kmsg and read-only /proc/sys), so a small service runs the
    real kubelet with the unit's arguments, exits with kubelet's own words when
    kubelet refuses them and stays running once kubelet accepted them
    (molecule/gpu_kubelet/files/kubelet-node-standin.py). It joins nothing.
The nodes keep running for a look around (podman exec -it gpufleet-demo-1 bash);
make demo-clean removes them.
TEXT
