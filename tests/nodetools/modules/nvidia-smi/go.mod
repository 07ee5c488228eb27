// nvidia-smi's STAND-IN for the tests (-L, --version), over NVML through
// github.com/NVIDIA/go-nvml v0.13.4-1 (tests/nodetools/README.md).
// go.mod written by tests/nodetools/update-modules.sh: do not edit.
module gpufleet.test/nodetools/nvidia-smi

go 1.26.0

require github.com/NVIDIA/go-nvml v0.13.4-1
