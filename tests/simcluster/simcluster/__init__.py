"""A simulated Kubernetes control plane with simulated GPU nodes, for tests.

It serves the Kubernetes HTTP API (discovery, CRUD, list/watch, patches,
server-side apply, dry runs, subresources) over an in-memory object store,
runs the controllers a GPU cluster relies on (DaemonSets, ReplicaSets and
Deployments, PodDisruptionBudgets, the scheduler, garbage collection,
namespace deletion, a kubelet per node) and gives each node the GPUs of a
recorded ``nvidia-smi`` capture. NVIDIA's device plugin is recognised by
what its container runs; while it runs, the node advertises its GPUs.

It is a STAND-IN for kube-apiserver, kube-scheduler, kube-controller-manager
and the kubelets, which cannot run on the machines the tests run on. It is
modelled on the Kubernetes API reference and documentation; each behaviour
cites where it comes from. See tests/simcluster/README.md.
"""
