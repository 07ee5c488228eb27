"""Dynamic Resource Allocation (resource.k8s.io/v1), driven through kubectl and the kubernetes
client: NVIDIA's DRA kubelet plugin publishes a ResourceSlice per GPU node from the node's capture
(dra-driver-nvidia-gpu's attributes and names), claims made from templates are allocated by the
scheduler with CEL selectors (concepts/scheduling-eviction/dynamic-resource-allocation/), a pod
sees exactly its allocated GPUs in `nvidia-smi -L`, and the API refuses what the API server
refuses (pkg/apis/resource/validation)."""

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from sim_gpu import capture_list_lines
from sim_helpers import status_of, wait_for, wait_until

CLUSTER = "dra.yml"
H100_MIG = "nvgpuexp-capture-linux-h100-mig-driver-590.48.01.txt"
L40S = "nvgpuexp-capture-linux-l40s-driver-595.80.txt"
GPU_NODES = ("h100-node", "h100-mig-node", "l40s-node")


def _template(name, requests, namespace="team-a", constraints=None):
    devices = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": {"devices": devices}}}


def _request(name="gpu", device_class="gpu.nvidia.com", selectors=(), **extra):
    exactly = dict({"deviceClassName": device_class}, **extra)
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def _pod(name, template, node=None, namespace="team-a", command=None):
    spec = {"restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.6.3-base-ubuntu24.04",
                            "command": command or ["nvidia-smi", "-L"], "resources": {"claims": [{"name": "gpu"}]}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _slices(sim, node=None):
    args = ["get", "resourceslices"] + (["--field-selector", f"spec.nodeName={node}"] if node else [])
    return sim.kubectl_json(*args)["items"]


@pytest.fixture(scope="module")
def published(simulator):
    wait_for(lambda: {s["spec"]["nodeName"] for s in _slices(simulator)} == set(GPU_NODES), timeout=30,
             what="a ResourceSlice from each GPU node")
    return simulator


def _claim_of(sim, pod, namespace="team-a"):
    name = sim.pod(pod, namespace).status.resource_claim_statuses[0].resource_claim_name
    return sim.kubectl_json("get", "resourceclaim", "-n", namespace, name)


def test_discovery_lists_the_dra_kinds(simulator):
    out = simulator.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "name").stdout.split()
    assert sorted(out) == ["deviceclasses.resource.k8s.io", "resourceclaims.resource.k8s.io",
                           "resourceclaimtemplates.resource.k8s.io", "resourceslices.resource.k8s.io"]


def test_each_gpu_node_publishes_one_slice_of_its_capture(published):
    slices = _slices(published)
    assert len(slices) == 3
    mig = _slices(published, "h100-mig-node")
    assert len(mig) == 1
    spec = mig[0]["spec"]
    assert spec["driver"] == "gpu.nvidia.com"
    assert spec["pool"] == {"name": "h100-mig-node", "generation": 1, "resourceSliceCount": 1}
    assert mig[0]["metadata"]["name"].startswith("00000-gpu.nvidia.com-h100-mig-node-")
    # The capture's MIG devices, by UUID and profile; a GPU with MIG on is published as those only.
    lines = capture_list_lines(H100_MIG)
    uuids = [line.split("UUID: ")[1].rstrip(")") for line in lines if line.strip().startswith("MIG")]
    published_uuids = [d["attributes"]["uuid"]["string"] for d in spec["devices"]]
    assert published_uuids == uuids
    first = spec["devices"][0]
    # GPU instance 2 of profile 9 (3g) is the one placed at memory slice 4.
    assert first["name"] == "gpu-0-mig-3g40gb-9-4"
    assert first["attributes"]["type"] == {"string": "mig"}
    assert first["attributes"]["profile"] == {"string": "3g.40gb"}
    assert first["attributes"]["parentUUID"]["string"].startswith("GPU-")
    assert first["capacity"]["memory"] == {"value": "40448Mi"}
    assert first["capacity"]["multiprocessors"] == {"value": "60"}
    l40s = _slices(published, "l40s-node")[0]["spec"]["devices"]
    assert [d["name"] for d in l40s] == ["gpu-0"]
    attributes = l40s[0]["attributes"]
    assert attributes["productName"] == {"string": "NVIDIA L40S"}
    assert attributes["architecture"] == {"string": "Ada Lovelace"}
    assert attributes["cudaComputeCapability"] == {"version": "8.9.0"}
    assert attributes["driverVersion"] == {"version": "595.80.0"}
    assert attributes["resource.kubernetes.io/pciBusID"] == {"string": "0000:01:00.0"}


def test_kubectl_prints_node_driver_and_pool(published):
    out = published.kubectl("get", "resourceslices", "--field-selector", "spec.nodeName=h100-node").stdout
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "NODE", "DRIVER", "POOL", "AGE"]
    assert row.split()[1:4] == ["h100-node", "gpu.nvidia.com", "h100-node"]
    by_driver = published.kubectl_json("get", "resourceslices", "--field-selector", "spec.driver=example.com")
    assert by_driver["items"] == []


def test_a_claim_from_a_template_gets_the_gpu_its_selectors_ask_for(published):
    sim = published
    sim.apply_yaml(json.dumps(_template("h100-79gi", [_request(selectors=[
        "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('h100')",
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('79Gi')) >= 0"])])))
    sim.apply_yaml(json.dumps(_pod("one-h100", "h100-79gi")))
    pod = sim.wait_pod_phase("one-h100", ("Succeeded", "Failed"), namespace="team-a", timeout=20)
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == "h100-node"
    claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
    assert claim_name.startswith("one-h100-gpu-")
    log = sim.core.read_namespaced_pod_log("one-h100", "team-a").splitlines()
    assert len(log) == 1 and log[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    # Once the pod is done its claim is released and, made for the pod, deleted.
    wait_for(lambda: claim_name not in [c["metadata"]["name"] for c in
                                        sim.kubectl_json("get", "resourceclaims", "-n", "team-a")["items"]],
             timeout=15, what="the claim deleted after its pod finished")


def test_the_allocation_names_the_device_the_pod_sees(published):
    sim = published
    sim.apply_yaml(json.dumps(_template("any-gpu", [_request()])))
    sim.apply_yaml(json.dumps(_pod("holder", "any-gpu", node="h100-node", command=["sleep", "infinity"])))
    sim.wait_pod_phase("holder", "Running", namespace="team-a")
    claim = _claim_of(sim, "holder")
    meta = claim["metadata"]
    assert meta["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert meta["ownerReferences"][0]["kind"] == "Pod" and meta["ownerReferences"][0]["controller"] is True
    assert "resource.kubernetes.io/delete-protection" in meta["finalizers"]
    allocation = claim["status"]["allocation"]
    result = allocation["devices"]["results"][0]
    assert (result["request"], result["driver"], result["pool"]) == ("gpu", "gpu.nvidia.com", "h100-node")
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": ["h100-node"]}]
    reserved = claim["status"]["reservedFor"]
    assert reserved == [{"resource": "pods", "name": "holder", "uid": sim.pod("holder", "team-a").metadata.uid}]
    out = sim.kubectl("get", "resourceclaims", "-n", "team-a", meta["name"]).stdout.splitlines()
    assert out[0].split() == ["NAME", "STATE", "AGE"] and out[1].split()[1] == "allocated,reserved"
    # The device allocated is the one whose UUID the pod's nvidia-smi prints.
    device = next(d for d in _slices(sim, "h100-node")[0]["spec"]["devices"] if d["name"] == result["device"])
    sim.apply_yaml(json.dumps(_pod("second", "any-gpu", node="h100-node")))
    second = sim.wait_pod_phase("second", ("Succeeded", "Failed"), namespace="team-a", timeout=20)
    assert second.status.phase == "Succeeded"
    other = sim.core.read_namespaced_pod_log("second", "team-a")
    assert device["attributes"]["uuid"]["string"] not in other
    sim.core.delete_namespaced_pod("holder", "team-a", grace_period_seconds=0)
    wait_for(lambda: meta["name"] not in [c["metadata"]["name"] for c in
                                          sim.kubectl_json("get", "resourceclaims", "-n", "team-a")["items"]],
             timeout=15, what="the claim deleted with its pod")


def test_all_devices_of_a_node_and_mig_devices_by_profile(published):
    sim = published
    sim.apply_yaml(json.dumps(_template("all-gpus", [_request(allocationMode="All")])))
    sim.apply_yaml(json.dumps(_pod("all", "all-gpus", node="h100-node")))
    pod = sim.wait_pod_phase("all", ("Succeeded", "Failed"), namespace="team-a", timeout=20)
    assert pod.status.phase == "Succeeded"
    assert len(sim.core.read_namespaced_pod_log("all", "team-a").splitlines()) == 2
    sim.apply_yaml(json.dumps(_template("two-1g", [_request("mig", "mig.nvidia.com", [
        "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"], count=2)],
        constraints=[{"matchAttribute": "gpu.nvidia.com/parentUUID"}])))
    body = _pod("migs", "two-1g")
    body["spec"]["resourceClaims"][0]["name"] = "mig"
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "mig"}]
    sim.apply_yaml(json.dumps(body))
    pod = sim.wait_pod_phase("migs", ("Succeeded", "Failed"), namespace="team-a", timeout=20)
    assert pod.status.phase == "Succeeded" and pod.spec.node_name == "h100-mig-node"
    lines = sim.core.read_namespaced_pod_log("migs", "team-a").splitlines()
    expected = [line for line in capture_list_lines(H100_MIG) if "1g.10gb" in line]
    assert lines[0].startswith("GPU 0: NVIDIA H100 80GB HBM3")
    assert [line.split("(UUID: ")[1] for line in lines[1:]] == [line.split("(UUID: ")[1] for line in expected]


def test_nothing_fits_is_unschedulable_with_the_schedulers_words(published):
    sim = published
    sim.apply_yaml(json.dumps(_template("huge", [_request(selectors=[
        "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('100Gi'))"])])))
    sim.apply_yaml(json.dumps(_pod("too-big", "huge")))
    pod = wait_until(lambda: sim.pod("too-big", "team-a"),
                     lambda p: any(c.type == "PodScheduled" and c.status == "False"
                                   for c in p.status.conditions or []), what="the pod unschedulable")
    condition = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert condition.reason == "Unschedulable"
    assert condition.message == ("0/4 nodes are available: 4 cannot allocate all claims. still not schedulable, "
                                 "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")
    claim = _claim_of(sim, "too-big")
    assert "allocation" not in claim.get("status", {})
    assert sim.kubectl("get", "resourceclaims", "-n", "team-a", claim["metadata"]["name"]).stdout.splitlines()[
        1].split()[1] == "pending"
    sim.apply_yaml(json.dumps(_template("no-class", [_request(device_class="nope.example.com")])))
    sim.apply_yaml(json.dumps(_pod("no-class", "no-class")))
    pod = wait_until(lambda: sim.pod("no-class", "team-a"),
                     lambda p: any(c.type == "PodScheduled" and c.status == "False"
                                   for c in p.status.conditions or []), what="the pod unschedulable")
    message = next(c for c in pod.status.conditions if c.type == "PodScheduled").message
    assert message.startswith("0/4 nodes are available: request gpu: device class nope.example.com does not exist.")


def test_a_missing_template_is_an_event_and_the_pod_waits(published):
    sim = published
    sim.apply_yaml(json.dumps(_pod("no-template", "not-there")))
    events = wait_for(lambda: [e for e in sim.events_for("no-template", "team-a")
                               if e.reason == "FailedResourceClaimCreation"], what="the claim controller's event")
    assert events[0].message == ('PodResourceClaim gpu: resource claim template "not-there": '
                                 'resourceclaimtemplate.resource.k8s.io "not-there" not found')
    pod = sim.pod("no-template", "team-a")
    assert pod.spec.node_name is None and not pod.status.conditions


def test_a_runtime_without_cdi_gives_the_container_no_gpu(published):
    sim = published
    sim.apply_yaml(json.dumps(_template("l40s", [_request(selectors=[
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'"])])))
    sim.apply_yaml(json.dumps(_pod("l40s", "l40s")))
    pod = sim.wait_pod_phase("l40s", ("Succeeded", "Failed"), namespace="team-a", timeout=20)
    assert pod.spec.node_name == "l40s-node" and pod.status.phase == "Failed"
    assert "nvidia-smi: not found" in sim.core.read_namespaced_pod_log("l40s", "team-a")


@pytest.mark.parametrize("requests, field, words", [
    ([{"name": "gpu", "exactly": {}}], "spec.devices.requests[0].exactly.deviceClassName", "Required value"),
    ([{"name": "gpu"}], "spec.devices.requests[0]", "exactly one of `exactly` or `firstAvailable` is required"),
    ([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "count": 2}}],
     "spec.devices.requests[0].exactly.count", "must not be specified when allocationMode is 'All'"),
    ([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": -1}}],
     "spec.devices.requests[0].exactly.count", "must be greater than zero"),
    ([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                  "selectors": [{"cel": {"expression": "device.driver =="}}]}}],
     "spec.devices.requests[0].exactly.selectors[0].cel.expression", "compilation failed: ERROR: <input>:1:"),
    ([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                  "selectors": [{"cel": {"expression": "device.driver.toUpper() == 'X'"}}]}}],
     "spec.devices.requests[0].exactly.selectors[0].cel.expression", "compilation failed"),
    ([{"name": "Gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}], "spec.devices.requests[0].name",
     "a lowercase RFC 1123 label"),
])
def test_invalid_claims_are_refused_with_the_field(published, requests, field, words):
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "bad"},
            "spec": {"devices": {"requests": requests}}}
    with pytest.raises(ApiException) as caught:
        # The dynamic client sends the body as it is (the typed one checks required fields first).
        published.create_raw(body, namespace="team-a")
    assert caught.value.status == 422
    status = status_of(caught.value)
    assert status["message"].startswith('ResourceClaim.resource.k8s.io "bad" is invalid: ')
    cause = next(c for c in status["details"]["causes"] if c["field"] == field)
    assert words in cause["message"]


def test_a_claims_spec_is_immutable_and_defaults_are_filled(published):
    api = client.ResourceV1Api(published.api)
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "fixed"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
    created = api.create_namespaced_resource_claim("team-a", body)
    exactly = created.spec.devices.requests[0].exactly
    assert (exactly.allocation_mode, exactly.count) == ("ExactCount", 1)
    patch = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}}}
    with pytest.raises(ApiException) as caught:
        api.patch_namespaced_resource_claim("fixed", "team-a", patch)
    assert caught.value.status == 422 and "field is immutable" in status_of(caught.value)["message"]
    # Reserving a claim that is not allocated is refused on the status subresource.
    with pytest.raises(ApiException) as caught:
        api.patch_namespaced_resource_claim_status("fixed", "team-a", {"status": {"reservedFor": [
            {"resource": "pods", "name": "x", "uid": "1234"}]}})
    assert "may not be specified when `allocated` is not set" in status_of(caught.value)["message"]


def test_a_slice_with_two_node_selections_is_refused(published):
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "bad-slice"},
            "spec": {"driver": "example.com", "pool": {"name": "p", "resourceSliceCount": 1},
                     "nodeName": "cpu-node", "allNodes": True,
                     "devices": [{"name": "dev-0", "attributes": {"model": {"string": "x", "int": 1}}}]}}
    with pytest.raises(ApiException) as caught:
        published.create_raw(body)
    message = status_of(caught.value)["message"]
    assert "spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of" in message
    assert "spec.devices[0].attributes[model]: Invalid value: {...}: exactly one value must be specified" in message


def test_a_slice_deleted_behind_the_plugins_back_is_published_again(published):
    sim = published
    old = _slices(sim, "l40s-node")[0]["metadata"]["name"]
    sim.kubectl("delete", "resourceslice", old)
    fresh = wait_for(lambda: _slices(sim, "l40s-node"), what="the slice published again")
    assert fresh[0]["metadata"]["name"] != old
    assert [d["name"] for d in fresh[0]["spec"]["devices"]] == ["gpu-0"]


def _plugin_pod(node, namespace):
    """NVIDIA's gpu-kubelet-plugin as a bare pod on the node, with the kubelet's plugin directories."""
    folders = {"registry": "/var/lib/kubelet/plugins_registry", "plugins": "/var/lib/kubelet/plugins"}
    image = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
    container = {"name": "gpus", "image": image, "command": ["gpu-kubelet-plugin", "--node-name", node],
                 "env": [{"name": "IMAGE_NAME", "value": image}],
                 "volumeMounts": [{"name": name, "mountPath": path} for name, path in folders.items()]
                 + [{"name": "driver-root", "mountPath": "/driver-root"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plugin", "namespace": namespace},
            "spec": {"nodeName": node, "containers": [container],
                     "volumes": [{"name": name, "hostPath": {"path": path}} for name, path in folders.items()]
                     + [{"name": "driver-root", "hostPath": {"path": "/"}}]}}


def test_without_the_plugin_slices_go_and_pods_wait_to_prepare(make_simulator):
    device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}
    sim = make_simulator({
        "kubernetesVersion": "1.35.0",
        "timing": {"tick": 0.02, "podStart": 0.05, "programRun": 0.05, "pluginRegister": 0.3, "podShutdown": 0.05},
        "nodes": [{"name": "gpu-a", "runtime": {"cdi": True}, "gpus": {"capture": L40S}}],
        "namespaces": ["dra"], "objects": [device_class, _plugin_pod("gpu-a", "dra")]})
    wait_for(lambda: _slices(sim, "gpu-a"), what="the slice")
    sim.apply_yaml(json.dumps(_template("one", [_request()], namespace="dra")))
    # The plugin goes: its node's slice goes with it, and a claim allocated before cannot be prepared.
    sim.apply_yaml(json.dumps(_pod("first", "one", namespace="dra", command=["sleep", "infinity"])))
    sim.wait_pod_phase("first", "Running", namespace="dra")
    sim.core.delete_namespaced_pod("plugin", "dra", grace_period_seconds=0)
    wait_for(lambda: not _slices(sim, "gpu-a"), what="the slice removed")
    sim.core.delete_namespaced_pod("first", "dra", grace_period_seconds=0)
    wait_for(lambda: not sim.kubectl_json("get", "resourceclaims", "-n", "dra")["items"], what="claims gone")
    sim.apply_yaml(json.dumps(_pod("second", "one", namespace="dra")))
    pod = wait_until(lambda: sim.pod("second", "dra"), lambda p: any(
        c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or []),
        what="no node for the claim")
    assert "1 cannot allocate all claims" in next(c.message for c in pod.status.conditions
                                                  if c.type == "PodScheduled")


def test_a_release_before_1_34_serves_no_dra(make_simulator):
    sim = make_simulator({"kubernetesVersion": "1.33.4", "nodes": [{"name": "node-a"}]})
    assert sim.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "name").stdout.split() == []
    with pytest.raises(ApiException) as caught:
        sim.dynamic.request("get", "/apis/resource.k8s.io/v1/resourceslices")
    assert caught.value.status == 404


def test_a_container_may_use_only_the_pods_claims(published):
    body = _pod("stray", "any-gpu")
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpuu"}]
    with pytest.raises(ApiException) as caught:
        published.create_raw(body, namespace="team-a")
    assert caught.value.status == 422
    assert ('spec.containers[0].resources.claims[0]: Not found: "gpuu": must be one of the names in '
            "pod.spec.resourceClaims: gpu") in status_of(caught.value)["message"]


def test_a_plugin_without_its_required_flags_crash_loops(make_simulator):
    pod = _plugin_pod("gpu-a", "dra")
    pod["spec"]["containers"][0]["command"] = ["gpu-kubelet-plugin"]
    sim = make_simulator({
        "kubernetesVersion": "1.35.0", "timing": {"tick": 0.02, "programRun": 0.05, "crashBackoff": 0.2},
        "nodes": [{"name": "gpu-a", "runtime": {"cdi": True}, "gpus": {"capture": L40S}}],
        "namespaces": ["dra"], "objects": [pod]})
    wait_for(lambda: sim.pod("plugin", "dra").status.container_statuses[0].restart_count >= 1,
             what="the plugin restarted")
    assert 'Required flags "node-name" not set' in sim.core.read_namespaced_pod_log("plugin", "dra", previous=True)
    assert not _slices(sim)


def test_a_plugin_not_registered_publishes_but_pods_wait_to_prepare(make_simulator):
    pod = _plugin_pod("gpu-a", "dra")
    # The kubelet's plugin directories not mounted: the slice is published, the kubelet never hears of it.
    pod["spec"]["containers"][0]["volumeMounts"] = [m for m in pod["spec"]["containers"][0]["volumeMounts"]
                                                    if m["name"] == "driver-root"]
    device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}
    sim = make_simulator({
        "kubernetesVersion": "1.35.0", "timing": {"tick": 0.02, "podStart": 0.05, "programRun": 0.05},
        "nodes": [{"name": "gpu-a", "runtime": {"cdi": True}, "gpus": {"capture": L40S}}],
        "namespaces": ["dra"], "objects": [device_class, pod]})
    wait_for(lambda: _slices(sim, "gpu-a"), what="the slice")
    sim.apply_yaml(json.dumps(_template("one", [_request()], namespace="dra")))
    sim.apply_yaml(json.dumps(_pod("waits", "one", namespace="dra")))
    events = wait_for(lambda: [e for e in sim.events_for("waits", "dra") if e.reason == "FailedPrepareDynamicResources"],
                      what="the kubelet's event")
    assert events[0].message == ("Failed to prepare dynamic resources: prepare dynamic resources: DRA driver "
                                 "gpu.nvidia.com is not registered")
    pod = sim.pod("waits", "dra")
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"


def test_a_misspelt_device_field_is_refused_and_gated_fields_are_dropped(published):
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "typo.example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.drivr == 'gpu.nvidia.com'"}}]}}
    with pytest.raises(ApiException) as caught:
        published.create_raw(body)
    assert "undefined field 'drivr'" in status_of(caught.value)["message"]
    # DRAExtendedResource is off before 1.36: the API server drops the field (this cluster serves 1.35).
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "extended.example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
                     "extendedResourceName": "example.com/gpu"}}
    created = published.create_raw(body)
    assert "extendedResourceName" not in created.to_dict()["spec"]
