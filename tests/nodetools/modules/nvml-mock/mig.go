package main

// MIG. The mock models MIG mode, the GPU instance and compute instance profiles of each GPU,
// their placements, and GPU and compute instances made with its own CreateGpuInstance and
// CreateComputeInstance; it does not model the MIG devices NVML derives from them (one per
// compute instance: the handles of nvmlDeviceGetMigDeviceHandleByIndex). This file adds those,
// built from the mock's instances and profiles only, and lays out the instances that
// GPUFLEET_NVML_MOCK_MIG asks for.

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// stableUUID is a name-based (SHA-1) UUID: the same server kind and place give the same UUID
// in every process.
func stableUUID(prefix string, parts ...any) string {
	name := "urn:gpufleet:nvml-mock"
	for _, part := range parts {
		name += ":" + fmt.Sprint(part)
	}
	return prefix + uuid.NewSHA1(uuid.NameSpaceURL, []byte(name)).String()
}

// The profile names nvidia-smi gives, "<slices>g.<memory>gb" and the suffix of the profile's
// variant. The memory is named as NVIDIA's go-nvlib names it (getMigMemorySizeGB): the profile's
// share of the GPU's memory rounded up to eighths, times the GPU's memory in whole GiB (rounded up),
// so the A100 80GB's 80384 MiB profile is 7g.80gb, not 79.
var profileSuffixes = map[uint32]string{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: "+me.all",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: "+me.all",
}

func profileName(d *server.Device, p nvml.GpuInstanceProfileInfo) string {
	const oneMiB, oneGiB = 1 << 20, 1 << 30
	total := d.MemoryInfo.Total
	share := math.Ceil(float64(p.MemorySizeMB)*oneMiB/float64(total)*8) / 8
	gib := float64((total + oneGiB - 1) / oneGiB)
	return fmt.Sprintf("%dg.%dgb%s", p.SliceCount, uint64(math.Round(share*gib)), profileSuffixes[p.Id])
}

// gpuProfiles are the GPU instance profiles the mock gives the device, by profile id.
func gpuProfiles(d *server.Device) []nvml.GpuInstanceProfileInfo {
	var profiles []nvml.GpuInstanceProfileInfo
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		if p, ret := d.GetGpuInstanceProfileInfo(id); ret == nvml.SUCCESS {
			profiles = append(profiles, p)
		}
	}
	return profiles
}

// gpuInstances are the device's GPU instances, by id.
func gpuInstances(d *server.Device) []*server.GpuInstance {
	var all []*server.GpuInstance
	for _, p := range gpuProfiles(d) {
		gis, _ := d.GetGpuInstances(&p)
		for _, gi := range gis {
			all = append(all, gi.(*server.GpuInstance))
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Info.Id < all[j].Info.Id })
	return all
}

// computeInstances are a GPU instance's compute instances, by id.
func computeInstances(gi *server.GpuInstance) []*server.ComputeInstance {
	var all []*server.ComputeInstance
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		p, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, _ := gi.GetComputeInstances(&p)
		for _, ci := range cis {
			all = append(all, ci.(*server.ComputeInstance))
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Info.Id < all[j].Info.Id })
	return all
}

// addMigDevices gives a mock GPU the MIG device calls: the most MIG devices it can hold (the
// largest instance count of its profiles: one per slice) and its MIG devices, one per compute
// instance, in the order of GPU instance and compute instance ids.
func addMigDevices(kind string, d *server.Device) {
	made := map[*server.ComputeInstance]nvml.Device{}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		// nvml.h: zero when MIG is not supported or not enabled.
		if current, _, _ := d.GetMigMode(); current != nvml.DEVICE_MIG_ENABLE {
			return 0, nvml.SUCCESS
		}
		most := 0
		for _, p := range gpuProfiles(d) {
			most = max(most, int(p.InstanceCount))
		}
		return most, nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(index int) (nvml.Device, nvml.Return) {
		most, _ := d.GetMaxMigDeviceCount()
		if index < 0 || index >= most {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		var devices []nvml.Device
		if current, _, _ := d.GetMigMode(); current == nvml.DEVICE_MIG_ENABLE {
			for _, gi := range gpuInstances(d) {
				for _, ci := range computeInstances(gi) {
					if made[ci] == nil {
						made[ci] = newMigDevice(kind, d, gi, ci)
					}
					devices = append(devices, made[ci])
				}
			}
		}
		if index >= len(devices) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return devices[index], nvml.SUCCESS
	}
}

// newMigDevice is the MIG device of one compute instance: a mock device of its own, whose
// answers come from the instances' profiles; the calls it leaves nil answer NOT_SUPPORTED.
func newMigDevice(kind string, parent *server.Device, gi *server.GpuInstance, ci *server.ComputeInstance) nvml.Device {
	giProfile, _ := parent.GetGpuInstanceProfileInfo(int(gi.Info.ProfileId))
	ciProfile, _ := gi.GetComputeInstanceProfileInfo(int(ci.Info.ProfileId), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	profile := profileName(parent, giProfile)
	if ciProfile.SliceCount != giProfile.SliceCount {
		profile = fmt.Sprintf("%dc.%s", ciProfile.SliceCount, profile)
	}
	name := parent.Config.Name + " MIG " + profile
	id := stableUUID("MIG-", kind, "gpu", parent.Index, "gi", gi.Info.Id, "ci", ci.Info.Id)
	m := &mock.Device{}
	m.GetUUIDFunc = func() (string, nvml.Return) { return id, nvml.SUCCESS }
	m.GetNameFunc = func() (string, nvml.Return) { return name, nvml.SUCCESS }
	m.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	m.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS }
	m.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return int(gi.Info.Id), nvml.SUCCESS }
	m.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return int(ci.Info.Id), nvml.SUCCESS }
	m.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: giProfile.MemorySizeMB * 1024 * 1024}, nvml.SUCCESS
	}
	m.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount:       ciProfile.MultiprocessorCount,
			SharedCopyEngineCount:     ciProfile.SharedCopyEngineCount,
			SharedDecoderCount:        ciProfile.SharedDecoderCount,
			SharedEncoderCount:        ciProfile.SharedEncoderCount,
			SharedJpegCount:           ciProfile.SharedJpegCount,
			SharedOfaCount:            ciProfile.SharedOfaCount,
			GpuInstanceSliceCount:     giProfile.SliceCount,
			ComputeInstanceSliceCount: ciProfile.SliceCount,
			MemorySizeMB:              giProfile.MemorySizeMB,
		}, nvml.SUCCESS
	}
	return m
}

// applyMigLayout reads "<gpu index>:<profile>,<profile>...;<gpu index>:...": on each GPU named,
// MIG mode on and one GPU instance per profile (nvidia-smi's names: 1g.10gb, 7g.80gb, ...),
// each with one compute instance that spans it. An instance is placed, with the mock's
// possible placements, on the first slices still free; one that does not fit is an error.
func applyMigLayout(s *server.Server, spec string) error {
	for _, part := range strings.Split(spec, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		indexText, profiles, ok := strings.Cut(part, ":")
		index, err := strconv.Atoi(strings.TrimSpace(indexText))
		if !ok || err != nil || index < 0 || index >= len(s.Devices) {
			return fmt.Errorf("%q: want <GPU index 0-%d>:<profile>,<profile>...", part, len(s.Devices)-1)
		}
		d := s.Devices[index].(*server.Device)
		if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: SetMigMode: %v", index, ret)
		}
		for _, name := range strings.Split(profiles, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if err := createInstance(d, name); err != nil {
				return fmt.Errorf("GPU %d: %v", index, err)
			}
		}
	}
	return nil
}

func createInstance(d *server.Device, name string) error {
	var known []string
	for _, p := range gpuProfiles(d) {
		if profileName(d, p) != name {
			known = append(known, profileName(d, p))
			continue
		}
		if existing, _ := d.GetGpuInstances(&p); len(existing) >= int(p.InstanceCount) {
			return fmt.Errorf("%s: at most %d such GPU instances", name, p.InstanceCount)
		}
		used := map[uint32]bool{}
		for _, gi := range gpuInstances(d) {
			for slice := gi.Info.Placement.Start; slice < gi.Info.Placement.Start+gi.Info.Placement.Size; slice++ {
				used[slice] = true
			}
		}
		placements, _ := d.GetGpuInstancePossiblePlacements(&p)
		for _, placement := range placements {
			free := true
			for slice := placement.Start; slice < placement.Start+placement.Size; slice++ {
				free = free && !used[slice]
			}
			if !free {
				continue
			}
			gi, ret := d.CreateGpuInstanceWithPlacement(&p, &placement)
			if ret != nvml.SUCCESS {
				return fmt.Errorf("%s: CreateGpuInstanceWithPlacement: %v", name, ret)
			}
			for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
				ciProfile, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret == nvml.SUCCESS && ciProfile.SliceCount == p.SliceCount {
					if _, ret := gi.CreateComputeInstance(&ciProfile); ret != nvml.SUCCESS {
						return fmt.Errorf("%s: CreateComputeInstance: %v", name, ret)
					}
					return nil
				}
			}
			return fmt.Errorf("%s: the mock has no compute instance profile that spans it", name)
		}
		return fmt.Errorf("%s: no free placement left", name)
	}
	return fmt.Errorf("%s: not a profile of %s (%s)", name, d.Config.Name, strings.Join(known, ", "))
}
