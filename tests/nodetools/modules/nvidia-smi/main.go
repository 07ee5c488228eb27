// Command nvidia-smi is a STAND-IN for NVIDIA's nvidia-smi, for the tests (tests/nodetools):
// a few of its commands, answered through NVML (github.com/NVIDIA/go-nvml's pkg/nvml, which
// dlopens libnvidia-ml.so.1 at run time). NVIDIA's real nvidia-smi is a closed binary that talks
// to the kernel driver, so it cannot run over go-nvml's NVML mock (tests/nodetools' bridge,
// .cache/nodetools/lib/libnvidia-ml.so.1); this one runs over any libnvidia-ml.so.1: the bridge
// here, the driver's own library on a real machine. It is used inside the real test nodes'
// containers, where NVIDIA's container runtime mounts it in nvidia-smi's place.
//
// Implemented, in the real tool's formats (real captures: /work/shared/fixtures/nvidia-smi and
// public issue threads):
//
//	nvidia-smi -L | --list-gpus   one line per GPU, its MIG devices under it
//	nvidia-smi --version          marked STAND-IN, with NVML's driver and CUDA versions
//
// When NVML cannot start it says what the real tool says, on stdout, and exits with NVML's return
// code as the real tool does (9: driver not loaded, 12: library not found). Anything else is
// refused with exit code 2, the real tool's code for an invalid argument.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const usage = "nvidia-smi STAND-IN (tests/nodetools): only -L, --list-gpus and --version are implemented"

func main() {
	if len(os.Args) != 2 {
		refuse()
	}
	switch os.Args[1] {
	case "-L", "--list-gpus":
		start()
		listGPUs()
	case "--version":
		start()
		version()
	default:
		refuse()
	}
	nvml.Shutdown()
}

func refuse() {
	fmt.Fprintln(os.Stderr, usage)
	os.Exit(2)
}

// start initialises NVML, or exits as nvidia-smi does when it cannot.
func start() {
	switch ret := nvml.Init(); ret {
	case nvml.SUCCESS:
		return
	case nvml.ERROR_DRIVER_NOT_LOADED:
		fmt.Println("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " +
			"Make sure that the latest NVIDIA driver is installed and running.")
		os.Exit(int(ret)) // 9
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		fmt.Println("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. " +
			"Please make sure that the NVIDIA Display Driver is properly installed and present in your system.")
		fmt.Println("Please also try adding directory that contains libnvidia-ml.so to your system PATH.")
		os.Exit(int(ret)) // 12
	default:
		fmt.Printf("Failed to initialize NVML: %s\n", nvml.ErrorString(ret))
		os.Exit(int(ret))
	}
}

// check exits with NVML's return code when a call failed.
func check(ret nvml.Return, what string) {
	if ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "nvidia-smi STAND-IN: %s: %s\n", what, nvml.ErrorString(ret))
		nvml.Shutdown()
		os.Exit(int(ret))
	}
}

// listGPUs prints what `nvidia-smi -L` prints:
//
//	GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
//	  MIG 3g.40gb     Device  0: (UUID: MIG-...)
func listGPUs() {
	count, ret := nvml.DeviceGetCount()
	check(ret, "device count")
	if count == 0 {
		fmt.Println("No devices were found")
		nvml.Shutdown()
		os.Exit(int(nvml.ERROR_NOT_FOUND)) // 6
	}
	for i := 0; i < count; i++ {
		gpu, ret := nvml.DeviceGetHandleByIndex(i)
		check(ret, fmt.Sprintf("GPU %d: handle", i))
		name, ret := gpu.GetName()
		check(ret, fmt.Sprintf("GPU %d: name", i))
		uuid, ret := gpu.GetUUID()
		check(ret, fmt.Sprintf("GPU %d: UUID", i))
		fmt.Printf("GPU %d: %s (UUID: %s)\n", i, name, uuid)
		listMigDevices(i, gpu)
	}
}

// listMigDevices prints the MIG devices of a GPU in MIG mode, numbered from 0 in NVML's order.
// The profile is what follows "MIG " in the MIG device's name ("NVIDIA H100 80GB HBM3 MIG
// 1g.10gb"), left-aligned in 11 columns and a space, as in the real tool's output.
func listMigDevices(i int, gpu nvml.Device) {
	current, _, ret := gpu.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED || (ret == nvml.SUCCESS && current != nvml.DEVICE_MIG_ENABLE) {
		return
	}
	check(ret, fmt.Sprintf("GPU %d: MIG mode", i))
	slots, ret := gpu.GetMaxMigDeviceCount()
	check(ret, fmt.Sprintf("GPU %d: MIG device count", i))
	n := 0
	for slot := 0; slot < slots; slot++ {
		mig, ret := gpu.GetMigDeviceHandleByIndex(slot)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // an empty slot
		}
		check(ret, fmt.Sprintf("GPU %d: MIG device %d", i, slot))
		name, ret := mig.GetName()
		check(ret, fmt.Sprintf("GPU %d: MIG device %d: name", i, slot))
		uuid, ret := mig.GetUUID()
		check(ret, fmt.Sprintf("GPU %d: MIG device %d: UUID", i, slot))
		profile := name
		if at := strings.LastIndex(name, "MIG "); at >= 0 {
			profile = name[at+len("MIG "):]
		}
		fmt.Printf("  MIG %-11s Device %2d: (UUID: %s)\n", profile, n, uuid)
		n++
	}
}

// version prints --version's lines, the first marking this as the stand-in.
func version() {
	driver, ret := nvml.SystemGetDriverVersion()
	check(ret, "driver version")
	fmt.Printf("NVIDIA-SMI version  : STAND-IN (gpufleet tests/nodetools; NVML's driver version %s)\n", driver)
	fmt.Printf("DRIVER version      : %s\n", driver)
	if cuda, ret := nvml.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		fmt.Printf("CUDA Version        : %d.%d\n", cuda/1000, cuda%1000/10)
	}
}
