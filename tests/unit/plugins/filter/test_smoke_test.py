# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Smoke-test filters over real nvidia-smi captures and facts built by the module's own code."""

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import smoke_test as st
from ansible_collections.gpufleet.nvidia.plugins.module_utils import dotted
from ansible_collections.gpufleet.nvidia.plugins.module_utils import nvml_inventory as inv
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils import nvml_readings as readings
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.module_utils.test_nvml_inventory_smi import list_section

H100_MIG_CAPTURE = "nvgpuexp-capture-linux-h100-mig-driver-590.48.01.txt"
H200_CAPTURE = "nvgpuexp-capture-linux-h200-driver-590.48.01.txt"
MIG_UUIDS = ["MIG-0000000%d-0000-0000-0000-00000000000%d" % (n, n) for n in range(4)]


def facts_of(reading):
    """ansible_facts['nvidia'] as nvml_facts builds it from a recorded NVML reading."""
    answer = inv.query_nvml(readings.RecordedNvml(reading))
    return inv.summarise(answer, [], True, answer["driver_version"])


H100 = facts_of(readings.H100)
H100_MIG = facts_of(readings.H100_MIG)


def pod(phase, message=None, state=None, conditions=None, name="gpufleet-smoke-nvidia-smi-node-a", **status):
    container_state = state if state is not None else (
        {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "reason": "Completed" if phase == "Succeeded"
                        else "Error", "message": message}} if phase in ("Succeeded", "Failed") else {})
    body = {"phase": phase, "containerStatuses": [{"name": "smoke", "state": container_state}]}
    if conditions:
        body["conditions"] = conditions
    body.update(status)
    # A pod that ran was bound to its node.
    return {"metadata": {"name": name}, "spec": {"nodeName": "node-" + name.rsplit("-", 1)[-1]}, "status": body}


# ---- nvidia-smi -L ----------------------------------------------------------

def test_list_of_the_h100_mig_capture():
    gpus = st.nvidia_smi_list(list_section(H100_MIG_CAPTURE))
    assert [(g["index"], g["name"]) for g in gpus] == [(0, "NVIDIA H100 80GB HBM3")]
    assert [(m["index"], m["profile"], m["uuid"]) for m in gpus[0]["mig_devices"]] == [
        (0, "3g.40gb", MIG_UUIDS[0]), (1, "2g.20gb", MIG_UUIDS[1]),
        (2, "1g.10gb", MIG_UUIDS[2]), (3, "1g.10gb", MIG_UUIDS[3])]


def test_a_mig_gpu_counts_by_its_mig_devices():
    assert st.smi_list_devices(list_section(H100_MIG_CAPTURE)) == MIG_UUIDS
    gpus = st.nvidia_smi_list(list_section(H200_CAPTURE))
    assert st.smi_list_devices(list_section(H200_CAPTURE)) == [g["uuid"] for g in gpus]
    assert all(uuid.startswith("GPU-") for uuid in st.smi_list_devices(list_section(H200_CAPTURE)))


def test_list_ignores_noise_and_refuses_non_text():
    assert st.smi_list_devices("No devices found.\n") == []
    assert st.nvidia_smi_list(None) == []
    with pytest.raises(AnsibleFilterError):
        st.nvidia_smi_list(["GPU 0"])


def test_facts_uuids_hold_gpus_and_mig_devices():
    assert st.facts_uuids(H100_MIG) == [H100_MIG["gpus"][0]["uuid"]] + MIG_UUIDS
    assert st.facts_uuids(None) == []


# ---- CUDA requirement ---------------------------------------------------------

@pytest.mark.parametrize("image, version", [
    ("nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04", "12.2"),
    ("registry.local:5000/mirror/nvidia/cuda:11.8.0-base-ubi8@sha256:" + "a" * 64, "11.8"),
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", "12.5"),
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda11.7.1-ubuntu20.04", "11.7"),
    ("busybox:1.36", ""),
    ("registry.local:5000/cuda", ""),
    ("nvcr.io/nvidia/cuda@sha256:" + "b" * 64, ""),
])
def test_image_cuda_version(image, version):
    assert st.image_cuda_version(image) == version


@pytest.mark.parametrize("requirement, version", [
    ("12.4", "12.4"),
    ("12.4.1", "12.4"),
    ("cuda>=12.4", "12.4"),
    ("cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471", "12.4"),
    ("brand=tesla,driver>=535,driver<536 cuda>=12.2.2", "12.2"),
    ("", ""),
    (None, ""),
])
def test_cuda_requirement(requirement, version):
    assert st.cuda_requirement(requirement) == version


def test_cuda_requirement_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="gpu_smoke_test_require_cuda is 'twelve'"):
        st.cuda_requirement("twelve", "gpu_smoke_test_require_cuda")


def test_stage_requirement_auto_reads_the_tag():
    stage = {"image": "nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04", "require_cuda": "auto"}
    assert st.stage_cuda_requirement(stage) == "12.2"
    assert st.stage_cuda_requirement(dict(stage, require_cuda="")) == ""
    assert st.stage_cuda_requirement(dict(stage, require_cuda="cuda>=12.8")) == "12.8"


def test_cuda_shortfalls_name_both_versions():
    old = dict(H100, cuda_driver_version="12.2", driver_version="535.247.01")
    new = dict(H100, cuda_driver_version="12.10")
    broken = {"state": "driver_not_loaded", "message": "the driver is not loaded"}
    problems = st.cuda_shortfalls({"old": old, "new": new, "broken": broken}, "cuda>=12.4 brand=tesla", "img:1")
    assert problems == [
        "broken: img:1 needs CUDA 12.4, the node's CUDA version is unknown "
        "(NVIDIA state driver_not_loaded: the driver is not loaded)",
        "old: img:1 needs CUDA 12.4, driver 535.247.01 supports CUDA 12.2",
    ]
    # 12.10 is newer than 12.9: compared as numbers, not text.
    assert st.cuda_shortfalls({"new": new}, "12.9") == []
    assert st.cuda_shortfalls({"old": old}, "") == []


# ---- verdicts -----------------------------------------------------------------

def test_a_pod_that_saw_its_mig_device_passes():
    lines = list_section(H100_MIG_CAPTURE).splitlines()
    seen = "\n".join([lines[0], lines[3]])  # the parent GPU and the one MIG device the pod got
    verdict = st.smoke_verdict(pod("Succeeded", seen), H100_MIG, expected_devices=1)
    assert verdict["ok"], verdict
    assert verdict["devices"] == [MIG_UUIDS[2]]


def test_a_uuid_the_facts_do_not_list_fails_and_is_named():
    seen = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-deadbeef-0000-0000-0000-000000000000)\n"
    verdict = st.smoke_verdict(pod("Succeeded", seen), H100)
    assert not verdict["ok"]
    assert "GPU-deadbeef-0000-0000-0000-000000000000" in verdict["reason"]
    assert H100["gpus"][0]["uuid"] in verdict["reason"]


def test_device_count_is_checked_when_expected():
    seen = list_section(H100_MIG_CAPTURE)
    verdict = st.smoke_verdict(pod("Succeeded", seen), H100_MIG, expected_devices=1)
    assert not verdict["ok"]
    assert "asked for 1 device(s) and saw 4" in verdict["reason"]
    assert st.smoke_verdict(pod("Succeeded", seen), H100_MIG, expected_devices=4)["ok"]


def test_empty_output_and_facts_without_gpus_fail():
    assert "listed no GPU" in st.smoke_verdict(pod("Succeeded", "No devices were found\n"), H100)["reason"]
    seen = list_section(H200_CAPTURE)
    verdict = st.smoke_verdict(pod("Succeeded", seen), {"state": "no_gpu", "gpus": []})
    assert not verdict["ok"] and "NVIDIA state no_gpu" in verdict["reason"]


def test_failed_pod_reports_state_and_output():
    failed = pod("Failed", "/bin/sh: 1: nvidia-smi: not found\n")
    failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 127
    verdict = st.smoke_verdict(failed, H100)
    assert not verdict["ok"]
    assert verdict["reason"] == "the pod failed (terminated, Error, exit code 127): /bin/sh: 1: nvidia-smi: not found"


def test_pending_pod_reports_why_it_is_not_scheduled():
    pending = pod("Pending", state={}, conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu."}])
    verdict = st.smoke_verdict(pending, H100)
    assert not verdict["ok"]
    assert "phase Pending" in verdict["reason"]
    assert "Insufficient nvidia.com/gpu" in verdict["reason"]
    waiting = pod("Pending", state={"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}})
    assert "waiting, ImagePullBackOff, Back-off pulling image" in st.smoke_verdict(waiting, H100)["reason"]


def test_gone_pod_fails():
    assert st.smoke_verdict(None, H100) == {
        "ok": False, "phase": None, "state": None, "devices": [], "unknown": [], "output": "",
        "reason": "the pod is gone (deleted or never created)"}


def test_log_is_the_fallback_and_a_marker_judges_workloads():
    silent = pod("Succeeded", None)
    log = "[Vector addition of 50000 elements]\nTest PASSED\nDone\n"
    assert st.smoke_verdict(silent, H100, log=log, marker="Test PASSED")["ok"]
    verdict = st.smoke_verdict(silent, H100, log="Test FAILED\n", marker="Test PASSED")
    assert not verdict["ok"] and "did not print 'Test PASSED'" in verdict["reason"]
    # nvidia-smi -L from the log when the termination message is empty.
    verdict = st.smoke_verdict(silent, H100_MIG, expected_devices=4, log=list_section(H100_MIG_CAPTURE))
    assert verdict["ok"] and verdict["devices"] == MIG_UUIDS


# ---- plan, stages, rows ---------------------------------------------------------

def node(name, allocatable=None, ready="True"):
    return {"metadata": {"name": name},
            "status": {"allocatable": allocatable or {}, "conditions": [
                {"type": "Ready", "status": ready, "reason": "KubeletNotReady" if ready != "True" else "KubeletReady",
                 "message": "container runtime network not ready" if ready != "True" else "kubelet is posting"}]}}


def fleet():
    return [
        {"host": "h100", "node": "node-a", "facts": H100},
        {"host": "mig", "node": "node-b", "facts": H100_MIG},
        {"host": "gone", "node": "node-c", "facts": H100},
        {"host": "notready", "node": "node-d", "facts": H100},
        {"host": "noplugin", "node": "node-e", "facts": H100},
        {"host": "nodriver", "node": "node-f", "facts": {"state": "driver_not_loaded", "message": "not loaded"}},
    ]


NODES = [node("node-a", {"nvidia.com/gpu": "4"}), node("node-b", {"nvidia.com/gpu": "4"}),
         node("node-d", {"nvidia.com/gpu": "1"}, ready="False"), node("node-e", {"cpu": "8"}),
         node("node-f", {"nvidia.com/gpu": "1"})]


def test_plan_places_one_pod_per_testable_node_and_says_why_not_for_the_others():
    answer = st.smoke_plan(fleet(), NODES, "nvidia.com/gpu", "one", stages=["nvidia-smi", "vector-add"])
    assert [(e["host"], e["request"], e["expected_devices"]) for e in answer["plan"]] == [
        ("h100", 1, 1), ("mig", 1, 1)]
    assert answer["plan"][0]["pods"] == {"nvidia-smi": "gpufleet-smoke-nvidia-smi-node-a",
                                         "vector-add": "gpufleet-smoke-vector-add-node-a"}
    # Each node that cannot be tested is named by its node, with why, as failed and not tested; the
    # others keep their plan (before: one such node ended the run before any pod).
    assert answer["problems"] == [
        "node-c: not in the cluster (no Node named node-c)",
        "node-d: node node-d is not Ready (container runtime network not ready)",
        "node-e: node node-e advertises no nvidia.com/gpu (allocatable 0); is the device plugin running there?",
        "node-f: NVIDIA state driver_not_loaded: not loaded",
    ]
    assert [(e["node"], e["why"], e["failed"], e["reason"]) for e in answer["not_tested"]] == [
        ("node-c", "not_in_cluster", True, "not tested: not in the cluster (no Node named node-c)"),
        ("node-d", "not_ready", True, "not tested: node node-d is not Ready (container runtime network not ready)"),
        ("node-e", "no_gpus", True,
         "not tested: node node-e advertises no nvidia.com/gpu (allocatable 0); is the device plugin running there?"),
        ("node-f", "driver", True, "not tested: NVIDIA state driver_not_loaded: not loaded"),
    ]
    # The report: each of them failed, not tested, with no raw object in its words.
    rows = st.smoke_rows(answer["plan"], {}, ["nvidia-smi"], not_tested=answer["not_tested"])
    failed = [(r["node"], r["ok"], r["tested"], r["why"]) for r in rows if r["ok"] is False]
    assert failed == [("node-c", False, False, "not_in_cluster"), ("node-d", False, False, "not_ready"),
                      ("node-e", False, False, "no_gpus"), ("node-f", False, False, "driver")]
    assert all("{" not in r["verdict"] for r in rows)


def test_a_node_deleted_after_its_facts_were_read_leaves_the_others_tested():
    # node-c's Node is gone from the API (deleted, a scale-down) while its facts are still here.
    answer = st.smoke_plan(fleet()[:3], NODES, "nvidia.com/gpu", "one")
    assert [e["node"] for e in answer["plan"]] == ["node-a", "node-b"]
    assert answer["problems"] == ["node-c: not in the cluster (no Node named node-c)"]
    assert "gpufleet_node_name" not in answer["problems"][0]


def test_plan_asks_a_node_under_the_mixed_strategy_for_one_of_its_mig_devices():
    mixed = node("node-b", {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                            "nvidia.com/mig-1g.10gb": "2", "nvidia.com/gpu": "0"})
    entry = st.smoke_plan([fleet()[1]], [mixed], "nvidia.com/gpu", "one")["plan"][0]
    assert (entry["resource"], entry["request"], entry["allocatable"]) == ("nvidia.com/mig-1g.10gb", 1, 2)
    # gpu_mig's choice (fleet_nodes' resource) wins, and another resource the user asks for is kept.
    chosen = dict(fleet()[1], resource="nvidia.com/mig-3g.40gb")
    assert st.smoke_plan([chosen], [mixed], "nvidia.com/gpu", "one")["plan"][0]["resource"] == "nvidia.com/mig-3g.40gb"
    shared = st.smoke_plan([fleet()[1]], [mixed], "nvidia.com/gpu.shared", "one")
    assert shared["plan"] == [] and "advertises no nvidia.com/gpu.shared" in shared["problems"][0]
    assert shared["not_tested"][0]["why"] == "no_gpus"


def test_plan_all_asks_for_the_allocatable_count():
    plan = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "all")["plan"]
    # node-a: one H100 advertised 4 times (time-slicing): the UUID count is not checked.
    # node-b: four MIG devices advertised as 4 (single strategy): all four must be seen.
    assert [(e["request"], e["expected_devices"]) for e in plan] == [(4, None), (4, 4)]


def test_stage_verdicts_rows_and_summary():
    plan = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "one")["plan"]
    lines = list_section(H100_MIG_CAPTURE).splitlines()
    good = pod("Succeeded", "\n".join([lines[0], lines[2]]), name="gpufleet-smoke-nvidia-smi-node-b")
    bad = pod("Pending", state={"waiting": {"reason": "ContainerCreating"}}, name="gpufleet-smoke-nvidia-smi-node-a")
    events = {"gpufleet-smoke-nvidia-smi-node-a": [
        {"reason": "FailedCreatePodSandBox", "message": "no runtime for \"nvidia\" is configured",
         "lastTimestamp": "2026-11-21T10:00:02Z"},
        {"reason": "Scheduled", "message": "Successfully assigned", "lastTimestamp": "2026-11-21T10:00:00Z"}]}
    verdicts = st.smoke_stage_verdicts(plan, [good, bad], logs={}, stage="nvidia-smi")
    verdicts = st.smoke_add_events(verdicts, events)
    assert [(v["node"], v["ok"]) for v in verdicts] == [("node-a", False), ("node-b", True)]
    assert verdicts[0]["events"] == ["Scheduled: Successfully assigned",
                                     "FailedCreatePodSandBox: no runtime for \"nvidia\" is configured"]
    rows = st.smoke_rows(plan, {"nvidia-smi": verdicts}, ["nvidia-smi"])
    assert [(r["node"], r["ok"], r["verdict"]) for r in rows] == [
        ("node-a", False, "FAILED nvidia-smi"), ("node-b", True, "passed nvidia-smi")]
    assert "no runtime for \"nvidia\" is configured" in rows[0]["detail"][0]
    assert rows[1]["gpus"] == "1 x NVIDIA H100 80GB HBM3" and rows[1]["allocatable"] == 4
    text = st.smoke_summary(rows)
    assert text[0].split() == ["NODE", "GPUS", "DRIVER", "CUDA", "ALLOCATABLE", "VERDICT"]
    assert text[2].startswith("node-b") and text[2].endswith("passed nvidia-smi")
    assert len(set(line.index("VERDICT") if "VERDICT" in line else len(line) - len("passed nvidia-smi")
                   for line in text[:1] + text[2:])) == 1  # aligned columns


def test_a_node_failing_the_first_stage_is_not_judged_by_the_second():
    plan = st.smoke_plan(fleet()[:1], NODES, "nvidia.com/gpu", "one", stages=["nvidia-smi", "vector-add"])["plan"]
    first = [{"node": "node-a", "ok": False, "reason": "the pod failed", "events": [], "log_tail": ""}]
    rows = st.smoke_rows(plan, {"nvidia-smi": first, "vector-add": []}, ["nvidia-smi", "vector-add"])
    assert rows[0]["verdict"] == "FAILED nvidia-smi"
    passed = [dict(first[0], ok=True, reason="saw GPU-x")]
    second = [{"node": "node-a", "ok": False, "reason": "did not print", "events": [], "log_tail": "Test FAILED"}]
    rows = st.smoke_rows(plan, {"nvidia-smi": passed, "vector-add": second}, ["nvidia-smi", "vector-add"])
    assert rows[0]["verdict"] == "FAILED vector-add"
    assert rows[0]["detail"][-1] == "vector-add: did not print; log: Test FAILED"


def test_events_are_given_to_the_pod_of_their_uid_only():
    # One list of the namespace's events: this run's pod (uid-2) and an earlier run's pod of the same
    # name (uid-1), each scheduled once; the DRA claim of uid-2 could not be allocated.
    verdicts = [{"node": "node-a", "pod": "gpufleet-smoke-nvidia-smi-node-a", "uid": "uid-2", "ok": False,
                 "events": []},
                {"node": "node-b", "pod": "gpufleet-smoke-nvidia-smi-node-b", "uid": "uid-3", "ok": False,
                 "events": []}]
    events = [
        {"involvedObject": {"uid": "uid-1"}, "reason": "Scheduled", "message": "Successfully assigned ... to node-a",
         "lastTimestamp": "2026-11-29T01:00:00Z"},
        {"involvedObject": {"uid": "uid-2"}, "reason": "FailedScheduling",
         "message": "0/3 nodes are available: 1 cannot allocate all claims.", "eventTime": "2026-11-29T03:00:01.000000Z"},
        {"involvedObject": {"uid": "uid-2"}, "reason": "FailedScheduling",
         "message": "0/3 nodes are available: 1 cannot allocate all claims.", "lastTimestamp": "2026-11-29T03:00:05Z"},
        {"involvedObject": {}, "reason": "Other", "message": "no uid"}]
    rows = st.smoke_add_events(verdicts, events)
    assert rows[0]["events"] == ["FailedScheduling: 0/3 nodes are available: 1 cannot allocate all claims."] * 2
    assert rows[1]["events"] == []
    # by name (the older form), the earlier pod's event would have been mixed in
    by_name = st.smoke_add_events(verdicts, {"gpufleet-smoke-nvidia-smi-node-a": events[:3]})
    assert "Scheduled: Successfully assigned ... to node-a" in by_name[0]["events"]
    assert verdicts[0]["events"] == []  # the input is not modified


def test_a_verdict_row_carries_its_pods_uid():
    plan = st.smoke_plan(fleet()[:1], NODES, "nvidia.com/gpu", "one")["plan"]
    running = pod("Pending", None, name="gpufleet-smoke-nvidia-smi-node-a")
    running.setdefault("metadata", {})["uid"] = "uid-9"
    assert st.smoke_stage_verdicts(plan, [running], stage="nvidia-smi")[0]["uid"] == "uid-9"


def test_a_run_that_stopped_keeps_no_node_without_a_verdict():
    # The API refused the pods of the second stage: node-a kept its first verdict, node-b never got one.
    plan = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "one", stages=["nvidia-smi"])["plan"]
    given = [{"node": "node-a", "ok": True, "reason": "saw GPU-x", "events": [], "log_tail": ""}]
    rows = st.smoke_rows(plan, {"nvidia-smi": given}, ["nvidia-smi"])
    assert [(r["node"], r["ok"], r["tested"], r["verdict"]) for r in rows] == [
        ("node-a", True, True, "passed nvidia-smi"), ("node-b", None, True, "not run")]
    rows = st.smoke_rows(plan, {"nvidia-smi": given}, ["nvidia-smi"], stopped="before its verdict")
    assert [(r["node"], r["ok"], r["tested"], r.get("why"), r["verdict"]) for r in rows] == [
        ("node-a", True, True, None, "passed nvidia-smi"),
        ("node-b", None, False, "stopped", "not tested: the smoke test stopped before its verdict")]
    # so that the results file replaces node-b's earlier verdict (a row with no verdict is not kept)
    from ansible_collections.gpufleet.nvidia.plugins.filter.internal import fleet_report as fr
    earlier = {"format": 1, "written_by": "gpufleet.nvidia.site", "hosts": {"mig": {"node": "node-b", "smoke_test": {
        "node": "node-b", "ok": True, "tested": True, "verdict": "passed nvidia-smi", "time": "2026-01-01T00:00:00Z"}}}}
    kept = fr.cluster_results(json.dumps(earlier), smoke_test=rows, time="2026-11-29T03:00:00Z")["hosts"]["mig"]
    assert kept["smoke_test"]["verdict"] == "not tested: the smoke test stopped before its verdict"
    assert kept["smoke_test"]["time"] == "2026-11-29T03:00:00Z"


def test_pods_needing_logs():
    pods = [pod("Succeeded", "GPU 0: x (UUID: GPU-1)", name="a"), pod("Succeeded", None, name="b"),
            pod("Failed", "boom", name="c"), pod("Pending", state={}, name="d")]
    assert st.pods_needing_logs(pods) == ["b", "c", "d"]


def test_event_words_keep_the_newest():
    events = [{"reason": "R%d" % n, "message": "m", "lastTimestamp": "2026-11-21T10:00:%02dZ" % n} for n in range(9)]
    assert st.event_words(copy.deepcopy(events)[::-1], limit=3) == ["R6: m", "R7: m", "R8: m"]


def test_a_termination_message_the_kubelet_cut_is_read_from_the_log():
    # 8 GPUs x 7 MIG devices: more than the 4096 bytes the kubelet keeps of a termination message.
    lines = []
    for gpu in range(8):
        lines.append("GPU %d: NVIDIA H100 80GB HBM3 (UUID: GPU-%08d-0000-0000-0000-000000000000)" % (gpu, gpu))
        lines.extend("  MIG 1g.10gb     Device  %d: (UUID: MIG-%04d%04d-0000-0000-0000-000000000000)" % (n, gpu, n)
                     for n in range(7))
    full = "\n".join(lines) + "\n"
    assert len(full) > 4096
    kept = full[-4096:]
    cut = pod("Succeeded", kept)
    assert st.pods_needing_logs([cut]) == [cut["metadata"]["name"]]
    facts = {"state": "ok", "gpus": [
        {"uuid": "GPU-%08d-0000-0000-0000-000000000000" % gpu, "mig": {"current_mode": "enabled", "devices": [
            {"uuid": "MIG-%04d%04d-0000-0000-0000-000000000000" % (gpu, n)} for n in range(7)]}} for gpu in range(8)]}
    assert not st.smoke_verdict(cut, facts, expected_devices=56)["ok"]
    verdict = st.smoke_verdict(cut, facts, expected_devices=56, log=full)
    assert verdict["ok"] and len(verdict["devices"]) == 56


# ---- nodes whose GPUs are all requested by running pods ------------------------------

def workload(namespace, name, node, containers, init=(), phase="Running", labels=None):
    """A Pod as the API returns it: containers given as (requests, limits) of nvidia.com/gpu."""
    def body(index, spec):
        requests, limits = spec[:2]
        resources = {}
        if requests is not None:
            resources["requests"] = {"cpu": "1", "nvidia.com/gpu": requests}
        if limits is not None:
            resources["limits"] = {"memory": "1Gi", "nvidia.com/gpu": limits}
        container = {"name": "c%d" % index, "image": "train:1", "resources": resources}
        if len(spec) > 2:
            container["restartPolicy"] = spec[2]
        return container
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [body(n, c) for n, c in enumerate(containers)],
                     "initContainers": [body(n, c) for n, c in enumerate(init)]},
            "status": {"phase": phase}}


@pytest.mark.parametrize("pod, requested", [
    (workload("ml", "a", "n", [("2", "2")]), 2),
    (workload("ml", "a", "n", [(None, "2"), (1, None)]), 3),           # a limit alone is the request
    (workload("ml", "a", "n", [("1", "1")], init=[("3", "3"), ("2", "2")]), 3),  # max(max(init), sum)
    (workload("ml", "a", "n", [("2", "2"), ("2", "2")], init=[("3", "3")]), 4),
    # A sidecar (init container with restartPolicy Always) runs beside the containers: added to them.
    (workload("ml", "a", "n", [("1", "1")], init=[("1", "1", "Always"), ("1", "1")]), 2),
    (workload("ml", "a", "n", [(None, None)]), 0),
])
def test_a_pod_requests_what_the_scheduler_counts(pod, requested):
    assert st.pod_requests(pod, "nvidia.com/gpu") == requested


def test_a_quantity_that_is_not_a_whole_number_is_named():
    with pytest.raises(AnsibleFilterError, match="ml/a.*'half'"):
        st.pod_requests(workload("ml", "a", "n", [("half", "half")]), "nvidia.com/gpu")


OWN = {"app.kubernetes.io/name": "gpufleet-smoke-test", "app.kubernetes.io/managed-by": "gpufleet.nvidia"}


def busy_pods():
    return [
        workload("ml", "train-0", "node-a", [("2", "2")]),
        workload("ml", "finished", "node-a", [("4", "4")], phase="Succeeded"),
        workload("ml", "failed", "node-a", [("4", "4")], phase="Failed"),
        workload("gpufleet-smoke-test", "gpufleet-smoke-nvidia-smi-node-a", "node-a", [("4", "4")], labels=OWN),
        workload("ml", "train-1", "node-b", [("3", "3")]),
        workload("ml", "infer-0", "node-b", [(None, "1")], init=[("1", "1")]),
        workload("ml", "elsewhere", "node-z", [("8", "8")]),
        dict(workload("ml", "pending", None, [("8", "8")]), status={"phase": "Pending"}),
    ]


def test_plan_asks_only_for_what_running_pods_leave_free():
    answer = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "all", pods=busy_pods(), own_labels=OWN)
    # node-a: 4 allocatable, train-0 holds 2 (finished pods, our own leftover and other nodes do not count).
    assert [(e["node"], e["allocatable"], e["requested"], e["request"]) for e in answer["plan"]] == [
        ("node-a", 4, 2, 2)]
    assert answer["problems"] == []
    # node-b: train-1 (3) and infer-0 (1) hold all 4: no pod, no failure, a reason.
    (busy,) = answer["not_tested"]
    assert (busy["host"], busy["node"], busy["allocatable"], busy["requested"]) == ("mig", "node-b", 4, 4)
    assert busy["reason"] == "not tested: all 4 nvidia.com/gpu are requested by running pods (ml/train-1, ml/infer-0)"
    one = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "one", pods=busy_pods(), own_labels=OWN)
    assert [(e["node"], e["request"], e["expected_devices"]) for e in one["plan"]] == [("node-a", 1, 1)]


def test_time_sliced_replicas_left_free_are_not_counted_as_distinct_gpus():
    # node-a: one H100 advertised 4 times; 2 replicas free may be the same GPU.
    plan = st.smoke_plan(fleet()[:1], NODES, "nvidia.com/gpu", "all", pods=busy_pods(), own_labels=OWN)["plan"]
    assert [(e["request"], e["expected_devices"]) for e in plan] == [(2, None)]


def test_many_busy_pods_are_cut_short_in_the_reason():
    pods = [workload("ml", "w%d" % n, "node-b", [("1", "1")]) for n in range(8)]
    nodes = [node("node-b", {"nvidia.com/gpu": "8"})]
    (busy,) = st.smoke_plan(fleet()[1:2], nodes, "nvidia.com/gpu", "one", pods=pods)["not_tested"]
    assert busy["reason"] == ("not tested: all 8 nvidia.com/gpu are requested by running pods "
                              "(ml/w0, ml/w1, ml/w2, ml/w3, ml/w4 and 3 more)")


def test_a_node_not_tested_is_in_the_rows_and_the_summary_without_failing():
    answer = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "one", pods=busy_pods(), own_labels=OWN)
    seen = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)" % H100["gpus"][0]["uuid"]
    verdicts = st.smoke_stage_verdicts(answer["plan"], [pod("Succeeded", seen)], stage="nvidia-smi")
    rows = st.smoke_rows(answer["plan"], {"nvidia-smi": verdicts}, ["nvidia-smi"], not_tested=answer["not_tested"])
    assert [(r["node"], r["ok"], r["verdict"]) for r in rows] == [
        ("node-a", True, "passed nvidia-smi"),
        ("node-b", None, "not tested: all 4 nvidia.com/gpu are requested by running pods (ml/train-1, ml/infer-0)")]
    assert [r for r in rows if r["ok"] is False] == []  # the play's failure test finds nothing
    text = st.smoke_summary(rows)
    assert text[-1] == ("1 of 2 GPU nodes not tested: node-b (all 4 nvidia.com/gpu are requested by running pods "
                        "(ml/train-1, ml/infer-0))")
    assert text[2].split()[0] == "node-b" and text[2].endswith("(ml/train-1, ml/infer-0)")


def test_hosts_left_out_of_the_run_are_named_and_never_planned():
    out = [{"host": "lost", "node": "node-a", "facts": None, "excluded": "outside --limit, not contacted"},
           {"host": "b", "node": "node-b", "facts": None, "excluded": "unreachable (timed out)"}]
    answer = st.smoke_plan(out + fleet()[:0], NODES, "nvidia.com/gpu", "one")
    # Not a problem that stops the test ("NVIDIA state not gathered"), not a pod.
    assert answer["plan"] == [] and answer["problems"] == []
    assert [(b["node"], b["why"], b["reason"]) for b in answer["not_tested"]] == [
        ("node-a", "excluded", "not tested: outside --limit, not contacted"),
        ("node-b", "excluded", "not tested: unreachable (timed out)")]
    rows = st.smoke_rows([], {}, ["nvidia-smi"], not_tested=answer["not_tested"])
    assert [(r["ok"], r["tested"], r["why"]) for r in rows] == [(None, False, "excluded")] * 2


def test_every_node_busy_plans_no_pod():
    pods = [workload("ml", "big-%s" % name, name, [("4", "4")]) for name in ("node-a", "node-b")]
    answer = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "all", pods=pods)
    assert answer["plan"] == [] and answer["problems"] == []
    assert [b["node"] for b in answer["not_tested"]] == ["node-a", "node-b"]
    rows = st.smoke_rows([], {}, ["nvidia-smi"], not_tested=answer["not_tested"])
    assert st.smoke_summary(rows)[-1].startswith("2 of 2 GPU nodes not tested: node-a (all 4 nvidia.com/gpu")


# ---- unhealthy nodes ----------------------------------------------------------------
# The health fields of the facts contract, added by hand to facts nvml_facts builds from the H100 reading.

def unhealthy(facts, *problems, **extra):
    sick = copy.deepcopy(facts)
    sick["health"] = {"status": "unhealthy", "problems": [
        {"code": code, "pci_address": address, "gpu_index": None, "message": "%s on %s" % (code, address)}
        for code, address in problems]}
    sick.update(extra)
    return sick


LOST = unhealthy(H100, ("gpu_lost", "0000:3b:00.0"), state="gpu_lost",
                 lost_gpus=[{"pci_address": "0000:3b:00.0", "source": "pci", "message": "not reported"}])
FABRIC = unhealthy(H100, ("fabric_not_ready", H100["gpus"][0]["pci_address"]))


def sick_fleet():
    return [{"host": "lost", "node": "node-a", "facts": LOST},
            {"host": "fabric", "node": "node-b", "facts": FABRIC},
            {"host": "h100", "node": "node-g", "facts": H100}]


SICK_NODES = NODES + [node("node-g", {"nvidia.com/gpu": "1"})]


def test_unhealthy_nodes_are_named_and_not_tested_by_default():
    answer = st.smoke_plan(sick_fleet(), SICK_NODES, "nvidia.com/gpu", "one")
    assert [e["node"] for e in answer["plan"]] == ["node-g"]
    assert answer["plan"][0]["unhealthy"] is False
    assert answer["problems"] == []
    assert [(b["node"], b["why"], b["reason"]) for b in answer["not_tested"]] == [
        ("node-a", "unhealthy", "not tested: unhealthy: gpu_lost 0000:3b:00.0"),
        ("node-b", "unhealthy", "not tested: unhealthy: fabric_not_ready %s" % H100["gpus"][0]["pci_address"])]
    seen = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)" % H100["gpus"][0]["uuid"]
    verdicts = st.smoke_stage_verdicts(answer["plan"], [pod("Succeeded", seen, name="gpufleet-smoke-nvidia-smi-node-g")])
    rows = st.smoke_rows(answer["plan"], {"nvidia-smi": verdicts}, not_tested=answer["not_tested"])
    assert [(r["node"], r["ok"], r["tested"], r.get("why")) for r in rows] == [
        ("node-g", True, True, None), ("node-a", None, False, "unhealthy"), ("node-b", None, False, "unhealthy")]
    assert st.smoke_summary(rows)[-1] == (
        "2 of 3 GPU nodes not tested: node-a (unhealthy: gpu_lost 0000:3b:00.0); node-b (unhealthy: "
        "fabric_not_ready %s)" % H100["gpus"][0]["pci_address"])


def test_healthy_nodes_that_fail_still_fail_beside_unhealthy_ones():
    answer = st.smoke_plan(sick_fleet(), SICK_NODES, "nvidia.com/gpu", "one")
    failed = pod("Failed", "NVIDIA-SMI has failed", name="gpufleet-smoke-nvidia-smi-node-g")
    verdicts = st.smoke_stage_verdicts(answer["plan"], [failed])
    rows = st.smoke_rows(answer["plan"], {"nvidia-smi": verdicts}, not_tested=answer["not_tested"])
    assert [r["node"] for r in rows if r["ok"] is False] == ["node-g"]


@pytest.mark.parametrize("skip", [False, "false", "no"])
def test_unhealthy_nodes_are_tested_when_asked_on_the_gpus_the_driver_reads(skip):
    answer = st.smoke_plan(sick_fleet(), SICK_NODES, "nvidia.com/gpu", "one", skip_unhealthy=skip)
    assert [(e["node"], e["unhealthy"]) for e in answer["plan"]] == [
        ("node-a", True), ("node-b", True), ("node-g", False)]
    assert answer["not_tested"] == [] and answer["problems"] == []


def test_unhealthy_pods_tolerate_the_health_taint_only_there():
    from ansible_collections.gpufleet.nvidia.tests.unit.roles.test_manifests import render
    plan = st.smoke_plan(sick_fleet(), SICK_NODES, "nvidia.com/gpu", "one", skip_unhealthy=False)["plan"]
    pods = render("gpu_smoke_test", "pods.json.j2", __gpu_smoke_test_stage_plan=plan,
                  __gpu_smoke_test_stage_name="nvidia-smi", __gpu_smoke_test_run="20261123180000-7")
    health = {"key": "gpufleet.nvidia.com/gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    assert [health in p["spec"]["tolerations"] for p in pods] == [True, True, False]


def test_a_node_without_a_working_driver_fails_as_before_even_when_unhealthy():
    broken = unhealthy({"state": "driver_not_loaded", "message": "not loaded", "gpus": []}, ("driver", None))
    answer = st.smoke_plan([{"host": "nodriver", "node": "node-f", "facts": broken}], NODES, "nvidia.com/gpu")
    assert [(e["why"], e["failed"]) for e in answer["not_tested"]] == [("driver", True)]
    assert answer["problems"] == ["node-f: NVIDIA state driver_not_loaded: not loaded"]


def test_facts_without_health_are_tested_as_before():
    older = dict((key, value) for key, value in H100.items() if key != "health")
    answer = st.smoke_plan([{"host": "h100", "node": "node-a", "facts": older}], NODES, "nvidia.com/gpu", "one")
    assert [e["node"] for e in answer["plan"]] == ["node-a"]
    # gpu_lost facts without health are not healthy enough to test blindly: a problem, as any state but ok.
    lost = dict(older, state="gpu_lost", message="1 GPU lost")
    assert st.smoke_plan([{"host": "x", "node": "node-a", "facts": lost}], NODES, "nvidia.com/gpu")["problems"] == [
        "node-a: NVIDIA state gpu_lost: 1 GPU lost"]


def test_cuda_check_leaves_out_the_nodes_skipped_as_unhealthy():
    old = dict(LOST, cuda_driver_version="11.8", driver_version="520.61.05")
    assert st.cuda_shortfalls({"node-a": old}, "12.2") == ["node-a: the image needs CUDA 12.2, driver 520.61.05 "
                                                           "supports CUDA 11.8"]
    assert st.cuda_shortfalls({"node-a": old}, "12.2", skip_unhealthy=True) == []


def test_cuda_check_can_leave_out_the_nodes_the_plan_cannot_test():
    broken = {"state": "driver_not_loaded", "message": "not loaded"}
    old = dict(H100, cuda_driver_version="11.8", driver_version="520.61.05")
    both = {"node-f": broken, "node-a": old}
    assert [p.split(":")[0] for p in st.cuda_shortfalls(both, "12.2")] == ["node-a", "node-f"]
    # the plan names node-f as failed and not tested; node-a's old driver still stops the run
    assert st.cuda_shortfalls(both, "12.2", skip_untestable=True) == [
        "node-a: the image needs CUDA 12.2, driver 520.61.05 supports CUDA 11.8"]


def role_fails_on(rows, skip_busy):
    """The node names tasks/report.yml of gpu_smoke_test fails the play on."""
    import os
    from ansible_collections.gpufleet.nvidia.tests.unit.templating import DataLoader, Templar, load_yaml
    loader = DataLoader()
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "gpu_smoke_test", "tasks",
                        "report.yml")
    fail = [t for t in load_yaml(loader, path) if "ansible.builtin.fail" in t][0]
    engine = Templar(loader=loader, variables=dict(fail["vars"], gpu_smoke_test_report=rows,
                                                   gpu_smoke_test_skip_busy=skip_busy))
    return [row["node"] for row in engine.template(fail["vars"]["__gpu_smoke_test_failed"])]


def test_role_fails_on_unhealthy_nodes_only_when_every_node_must_be_tested():
    answer = st.smoke_plan(sick_fleet(), SICK_NODES, "nvidia.com/gpu", "one")
    rows = st.smoke_rows([], {}, not_tested=answer["not_tested"])
    assert role_fails_on(rows, True) == []
    assert role_fails_on(rows, False) == ["node-a", "node-b"]


def test_a_node_that_cannot_be_tested_fails_once_whether_or_not_every_node_must_be_tested():
    answer = st.smoke_plan(fleet()[2:4], NODES, "nvidia.com/gpu", "one")  # node-c gone, node-d not Ready
    rows = st.smoke_rows([], {}, not_tested=answer["not_tested"])
    assert role_fails_on(rows, True) == ["node-c", "node-d"]
    assert role_fails_on(rows, False) == ["node-c", "node-d"]


# ---- a node that stops being Ready while its pod runs -------------------------------------

def test_a_pod_on_a_node_that_stopped_being_ready_is_judged_by_that_node():
    plan = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "one")["plan"]
    seen = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)" % H100["gpus"][0]["uuid"]
    waiting = {"waiting": {"reason": "ContainerCreating"}}
    pods = [pod("Succeeded", seen, name=plan[0]["pods"]["nvidia-smi"]),
            dict(pod("Pending", state=waiting, name=plan[1]["pods"]["nvidia-smi"]), spec={"nodeName": "node-b"})]
    down = {"node-b": "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"}
    verdicts = st.smoke_stage_verdicts(plan, pods, nodes_not_ready=down)
    assert verdicts[0]["ok"] is True
    assert verdicts[1]["ok"] is False
    assert verdicts[1]["reason"].startswith(
        "node node-b is not Ready: Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.); "
        "the pod did not finish: phase Pending")
    # Its kubelet cannot serve a log: not read; nor is a pod that was never bound.
    assert st.pods_needing_logs(pods, down) == []
    assert st.pods_needing_logs(pods) == [plan[1]["pods"]["nvidia-smi"]]
    assert st.pods_needing_logs([dict(pods[1], spec={})]) == []


# ---- what the role keeps of a thousand hosts' facts ------------------------------------
def role_vars():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "gpu_smoke_test", "vars", "main.yml")
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_the_facts_the_role_keeps_plan_judge_and_report_as_the_whole_facts_do():
    # The role keeps only __gpu_smoke_test_fact_paths of each host's facts (fleet_nodes keep=): a path
    # missing there would change a plan, a verdict, the CUDA check or the report, and this says which.
    paths = role_vars()["__gpu_smoke_test_fact_paths"]
    whole = fleet() + sick_fleet()
    kept = [dict(entry, facts=dotted.keep_paths(entry["facts"], paths)) for entry in whole]
    assert len(json.dumps(kept)) < len(json.dumps(whole)) / 3
    for skip in (True, False):
        assert st.smoke_plan(kept, SICK_NODES, "nvidia.com/gpu", "all", skip_unhealthy=skip) == \
            st.smoke_plan(whole, SICK_NODES, "nvidia.com/gpu", "all", skip_unhealthy=skip)
    by_node = dict((entry["node"], entry["facts"]) for entry in kept)
    assert st.cuda_shortfalls(by_node, "99.0", "img:1") == \
        st.cuda_shortfalls(dict((entry["node"], entry["facts"]) for entry in whole), "99.0", "img:1")
    assert len(st.cuda_shortfalls(by_node, "99.0", "img:1")) == len(by_node)


def test_the_plan_carries_each_nodes_uuids_and_gpus_and_judges_by_them():
    plan = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "one")["plan"]
    mig = plan[1]["facts"]
    assert mig["uuids"] == st.facts_uuids(H100_MIG) and len(mig["uuids"]) > 1
    assert mig["gpus"] == "1 x NVIDIA H100 80GB HBM3" and "health" not in mig
    lines = list_section(H100_MIG_CAPTURE).splitlines()
    seen = pod("Succeeded", "\n".join([lines[0], lines[2]]), name="gpufleet-smoke-nvidia-smi-node-b")
    stranger = pod("Succeeded", "GPU 0: NVIDIA H100 (UUID: GPU-11111111-2222-3333-4444-555555555555)",
                   name="gpufleet-smoke-nvidia-smi-node-a")
    verdicts = st.smoke_stage_verdicts(plan, [seen, stranger], stage="nvidia-smi")
    assert [(v["node"], v["ok"]) for v in verdicts] == [("node-a", False), ("node-b", True)]
    assert "GPU-11111111-2222-3333-4444-555555555555" in verdicts[0]["reason"]


def test_a_node_on_the_dra_path_asks_for_its_gpu_model_through_a_claim():
    dra_node = node("node-a", {"cpu": "8"})
    dra_node["metadata"]["labels"] = {"nvidia.com/dra-kubelet-plugin": "true"}
    mig_node = node("node-b", {"cpu": "8"})
    mig_node["metadata"]["labels"] = {"nvidia.com/dra-kubelet-plugin": "true"}
    answer = st.smoke_plan(fleet()[:2], [dra_node, mig_node], "nvidia.com/gpu", "one",
                           dra_label="nvidia.com/dra-kubelet-plugin")
    assert answer["problems"] == [] and answer["not_tested"] == []
    name = H100["gpus"][0]["name"]
    assert [(e["node"], e["request"], e["expected_devices"], e["dra"]) for e in answer["plan"]] == [
        ("node-a", 1, 1, {"template": "gpufleet-smoke-node-a", "class": "gpu.nvidia.com",
                          "selector": "device.attributes['gpu.nvidia.com'].productName == '%s'" % name}),
        ("node-b", 1, 1, {"template": "gpufleet-smoke-node-b", "class": "mig.nvidia.com",
                          "selector": "device.attributes['gpu.nvidia.com'].productName == '%s'" % name})]
    # Without the rule (or with the label false) it is a node without the device plugin, as before.
    assert st.smoke_plan(fleet()[:1], [dra_node], "nvidia.com/gpu", "one")["problems"] == [
        "node-a: node node-a advertises no nvidia.com/gpu (allocatable 0); is the device plugin running there?"]


def test_a_dra_node_whose_devices_are_all_allocated_is_busy_not_tested():
    dra_node = node("node-a", {})
    dra_node["metadata"]["labels"] = {"nvidia.com/dra-kubelet-plugin": "true"}

    def claim(name, node_name, devices, driver="gpu.nvidia.com"):
        return {"metadata": {"name": name, "namespace": "ml"}, "status": {"allocation": {"devices": {"results": [
            {"driver": driver, "pool": node_name, "device": "gpu-%d" % index, "request": "gpu"}
            for index in range(devices)]}}}}

    one_gpu = fleet()[:1]  # node-a: one H100
    # its one GPU allocated to a training job's claim: busy, named with the claim, no pod
    answer = st.smoke_plan(one_gpu, [dra_node], "nvidia.com/gpu", "one", dra_label="nvidia.com/dra-kubelet-plugin",
                           claims=[claim("train-0-gpu", "node-a", 1), claim("other", "node-b", 1)])
    assert answer["plan"] == [] and answer["problems"] == []
    assert [(e["why"], e["holders"], e["reason"]) for e in answer["not_tested"]] == [
        ("busy", ["ml/train-0-gpu"],
         "not tested: all 1 gpu.nvidia.com devices are allocated to ResourceClaims (ml/train-0-gpu)")]
    # a claim with admin access (a monitoring agent's) takes nothing from the others
    monitoring = claim("dcgm-admin", "node-a", 1)
    monitoring["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    watched = st.smoke_plan(one_gpu, [dra_node], "nvidia.com/gpu", "one", dra_label="nvidia.com/dra-kubelet-plugin",
                            claims=[monitoring])
    assert [e["node"] for e in watched["plan"]] == ["node-a"]
    # a node with one GPU in MIG mode (its MIG devices) and one whole: each counts as published
    mixed = {"gpus": [{"mig": {"current_mode": "enabled", "devices": [{"uuid": "MIG-1"}, {"uuid": "MIG-2"}]}},
                      {"mig": {"current_mode": "disabled"}}]}
    assert st._dra_device_count(mixed) == 3  # pylint: disable=protected-access
    # another driver's devices, or another node's, leave it free
    free = st.smoke_plan(one_gpu, [dra_node], "nvidia.com/gpu", "one", dra_label="nvidia.com/dra-kubelet-plugin",
                         claims=[claim("nic", "node-a", 1, driver="nic.example.com"), claim("x", "node-b", 2)])
    assert [e["node"] for e in free["plan"]] == ["node-a"] and free["not_tested"] == []
    # the claim of an earlier run's smoke pod (the role's labels, copied from its claim template) is its leftover,
    # deleted with that pod before the new one is made: the node is tested
    own = {"app.kubernetes.io/managed-by": "gpufleet.nvidia", "app.kubernetes.io/name": "gpufleet-smoke-test"}
    leftover = claim("gpufleet-smoke-nvidia-smi-node-a-gpu-x7k2p", "node-a", 1)
    leftover["metadata"]["labels"] = dict(own, **{"gpufleet.nvidia/run": "20261128-1"})
    again = st.smoke_plan(one_gpu, [dra_node], "nvidia.com/gpu", "one", dra_label="nvidia.com/dra-kubelet-plugin",
                          claims=[leftover], own_labels=own)
    assert [e["node"] for e in again["plan"]] == ["node-a"] and again["not_tested"] == []
    # a workload's claim that carries only some of those labels still holds the GPU
    leftover["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "gpufleet.nvidia"}
    held = st.smoke_plan(one_gpu, [dra_node], "nvidia.com/gpu", "one", dra_label="nvidia.com/dra-kubelet-plugin",
                         claims=[leftover], own_labels=own)
    assert [e["why"] for e in held["not_tested"]] == ["busy"]


def test_a_product_name_is_a_cel_string():
    assert st._cel_string("it's \\ odd") == "'it\\'s \\\\ odd'"


def test_a_pod_its_kubelet_could_not_start_is_judged_by_the_kubelets_words():
    """pods_wait's not_started words lead the verdict, with what to do for a RuntimeClass handler the
    runtime lacks (containerd's words, as a real node says them) and an image that cannot be pulled."""
    plan = st.smoke_plan(fleet()[:2], NODES, "nvidia.com/gpu", "one")["plan"]
    stuck = pod("Pending", state={"waiting": {"reason": "ContainerCreating"}}, name="gpufleet-smoke-nvidia-smi-node-a")
    pulling = pod("Pending", state={"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
                  name="gpufleet-smoke-nvidia-smi-node-b")
    words = {"gpufleet-smoke-nvidia-smi-node-a": "FailedCreatePodSandBox: Failed to create pod sandbox: rpc error: code = "
                                                 "Unknown desc = failed to get sandbox runtime: no runtime for \"nvidia\" "
                                                 "is configured",
             "gpufleet-smoke-nvidia-smi-node-b": "ImagePullBackOff: Back-off pulling image: no such host"}
    verdicts = st.smoke_stage_verdicts(plan, [stuck, pulling], stage="nvidia-smi", not_started=words)
    assert [v["ok"] for v in verdicts] == [False, False]
    assert verdicts[0]["reason"].startswith("the pod could not start on node node-a: FailedCreatePodSandBox: ")
    assert "the node's container runtime has no handler 'nvidia'" in verdicts[0]["reason"]
    assert "gpu_container_toolkit" in verdicts[0]["reason"]
    assert verdicts[1]["reason"].startswith("the pod could not start on node node-b: ImagePullBackOff: ")
    assert "gpu_smoke_test_image" in verdicts[1]["reason"]
    # CRI-O's words for the same missing handler
    assert "no handler 'nvidia'" in st.start_failure_reason(
        "node-c", "FailedCreatePodSandBox: failed to find runtime handler nvidia from runtime list map[runc:...]")
    # without not_started the verdict is the plain one
    plain = st.smoke_stage_verdicts(plan, [stuck, pulling], stage="nvidia-smi")
    assert plain[0]["reason"].startswith("the pod did not finish")
