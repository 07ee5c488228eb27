"""A node's GPUs read from its own nvidia-smi (a command printing `nvidia-smi -L`): NVIDIA's device
plugin enumerates MIG devices when it starts (k8s-device-plugin README, MIG strategies), so a node
whose MIG layout changed advertises the new devices once its plugin pod is started again, and a
compute instance smaller than its GPU instance is never advertised under mixed."""

import sys

from sim_gpu import PLUGIN_NS, plugin_config, plugin_daemonset
from sim_helpers import wait_for

A100_LINE = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-513536b6-7d19-9063-b049-1e69664bb298)"


def _mig_line(profile, number):
    return "  MIG %-11s Device %2d: (UUID: MIG-%08d-0000-0000-0000-%012d)" % (profile, number, number, number)


def _write(path, profiles):
    path.write_text("\n".join([A100_LINE] + [_mig_line(p, n) for n, p in enumerate(profiles)]) + "\n",
                    encoding="utf-8")


def _allocatable(sim):
    have = sim.node("mig-node").status.allocatable or {}
    return dict((k, v) for k, v in have.items() if k.startswith("nvidia.com/") and v != "0")


def test_a_restarted_plugin_advertises_the_new_layout(make_simulator, tmp_path):
    listing = tmp_path / "nvidia-smi-L.txt"
    _write(listing, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    sim = make_simulator({
        "timing": {"podStart": 0.1, "pluginRegister": 0.2},
        "nodes": [{"name": "mig-node", "labels": {"nvidia.com/gpu.present": "true"},
                   "gpus": {"command": [sys.executable, "-c",
                                        "import sys; sys.stdout.write(open(sys.argv[1]).read())", str(listing)]}}],
        "objects": [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                     "handler": "nvidia"}]})
    sim.core.create_namespaced_config_map(PLUGIN_NS, plugin_config("mixed"))
    sim.apps.create_namespaced_daemon_set(PLUGIN_NS, plugin_daemonset())
    wait_for(lambda: _allocatable(sim) == {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                                           "nvidia.com/mig-1g.10gb": "2"}, timeout=20, what="the first layout")
    # A new layout: a 4g.40gb and a 3g.40gb split into two compute instances, which mixed does not advertise.
    _write(listing, ["4g.40gb", "1c.3g.40gb", "2c.3g.40gb"])
    assert "nvidia.com/mig-3g.40gb" in _allocatable(sim), "the running plugin does not see the change"
    for pod in sim.core.list_namespaced_pod(PLUGIN_NS).items:
        sim.core.delete_namespaced_pod(pod.metadata.name, PLUGIN_NS)
    wait_for(lambda: _allocatable(sim) == {"nvidia.com/mig-4g.40gb": "1"}, timeout=20, what="the new layout")
