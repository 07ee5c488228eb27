"""The scheduler (filters, the FailedScheduling message, matchFields pinning) and the kubelet
(pod phases, container states, termination messages, restarts and CrashLoopBackOff)
(concepts/scheduling-eviction/kube-scheduler/, concepts/workloads/pods/pod-lifecycle/,
tasks/debug/debug-application/determine-reason-pod-failure/)."""

import time

from sim_helpers import pod_manifest, wait_for, wait_until

CLUSTER = "basic.yml"
NS = "default"


def _condition(pod, kind):
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def _unschedulable(sim, name):
    def refused(pod):
        condition = _condition(pod, "PodScheduled")
        return condition is not None and condition.status == "False"
    return wait_until(lambda: sim.pod(name), refused, what=f"{name} found unschedulable")


def test_match_fields_pins_a_pod_to_a_node(simulator):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]}}}
    simulator.core.create_namespaced_pod(NS, pod_manifest("pinned", ["sleep", "infinity"], affinity=affinity))
    simulator.kubectl("wait", "--for=condition=Ready", "pod/pinned", "--timeout=20s")
    pod = simulator.pod("pinned")
    assert pod.spec.node_name == "node-b"
    assert _condition(pod, "PodScheduled").status == "True"
    scheduled = [e for e in simulator.events_for("pinned") if e.reason == "Scheduled"]
    assert scheduled and scheduled[0].message == "Successfully assigned default/pinned to node-b"
    assert scheduled[0].source.component == "default-scheduler"


def test_no_matching_node_is_unschedulable_and_unresolvable(simulator):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-z"]}]}]}}}
    simulator.core.create_namespaced_pod(NS, pod_manifest("nowhere", ["sleep", "infinity"], affinity=affinity))
    pod = _unschedulable(simulator, "nowhere")
    condition = _condition(pod, "PodScheduled")
    assert pod.status.phase == "Pending" and condition.reason == "Unschedulable"
    assert condition.message == ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
                                 "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
    assert not pod.spec.node_name


def test_insufficient_resources_give_the_scheduler_message_and_event(simulator):
    pod = pod_manifest("greedy", ["sleep", "infinity"], container={"resources": {"requests": {"cpu": "100"}}})
    simulator.core.create_namespaced_pod(NS, pod)
    condition = _condition(_unschedulable(simulator, "greedy"), "PodScheduled")
    message = ("0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
               "3 No preemption victims found for incoming pod.")
    assert condition.message == message
    events = wait_for(lambda: [e for e in simulator.events_for("greedy") if e.reason == "FailedScheduling"],
                      what="a FailedScheduling event")
    assert events[0].type == "Warning" and events[0].message == message
    assert events[0].involved_object.kind == "Pod" and events[0].involved_object.name == "greedy"
    described = simulator.kubectl("describe", "pod", "greedy").stdout
    assert "FailedScheduling" in described and "Insufficient cpu" in described


def test_a_pod_that_succeeds(simulator):
    simulator.core.create_namespaced_pod(NS, pod_manifest("once", ["sh", "-c", "echo hi"], restartPolicy="Never"))
    pod = simulator.wait_pod_phase("once", "Succeeded")
    state = pod.status.container_statuses[0].state.terminated
    assert state.exit_code == 0 and state.reason == "Completed"
    assert state.started_at is not None and state.finished_at is not None
    ready = _condition(pod, "Ready")
    assert ready.status == "False" and ready.reason == "PodCompleted"
    assert pod.status.pod_ip and pod.status.host_ip
    assert pod.status.start_time is not None


def test_a_pod_that_fails_keeps_the_exit_code(simulator):
    simulator.core.create_namespaced_pod(NS, pod_manifest("fails", ["sh", "-c", "exit 3"], restartPolicy="Never"))
    pod = simulator.wait_pod_phase("fails", "Failed")
    state = pod.status.container_statuses[0].state.terminated
    assert state.exit_code == 3 and state.reason == "Error"
    assert pod.status.container_statuses[0].restart_count == 0


def test_termination_message_from_the_file(simulator):
    simulator.core.create_namespaced_pod(NS, pod_manifest(
        "last-words", ["sh", "-c", "echo bye > /dev/termination-log; exit 2"], restartPolicy="Never"))
    state = simulator.wait_pod_phase("last-words", "Failed").status.container_statuses[0].state.terminated
    assert state.message == "bye\n" and state.exit_code == 2
    simulator.core.create_namespaced_pod(NS, pod_manifest(
        "custom-path", ["sh", "-c", "echo done > /tmp/why"], restartPolicy="Never",
        container={"terminationMessagePath": "/tmp/why"}))
    state = simulator.wait_pod_phase("custom-path", "Succeeded").status.container_statuses[0].state.terminated
    assert state.message == "done\n"


def test_fallback_to_logs_on_error(simulator):
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    simulator.core.create_namespaced_pod(NS, pod_manifest(
        "fallback", ["sh", "-c", "echo first; echo oops; exit 1"], restartPolicy="Never", container=fallback))
    state = simulator.wait_pod_phase("fallback", "Failed").status.container_statuses[0].state.terminated
    assert state.message == "first\noops\n"
    # Only on an error: a container that succeeds leaves no message.
    simulator.core.create_namespaced_pod(NS, pod_manifest(
        "fallback-ok", ["sh", "-c", "echo fine"], restartPolicy="Never", container=fallback))
    state = simulator.wait_pod_phase("fallback-ok", "Succeeded").status.container_statuses[0].state.terminated
    assert not state.message
    # The default policy (File) never reads the logs.
    simulator.core.create_namespaced_pod(NS, pod_manifest(
        "no-fallback", ["sh", "-c", "echo oops; exit 1"], restartPolicy="Never"))
    state = simulator.wait_pod_phase("no-fallback", "Failed").status.container_statuses[0].state.terminated
    assert not state.message


def test_crash_loop_back_off(simulator):
    simulator.core.create_namespaced_pod(NS, pod_manifest("crasher", ["sh", "-c", "exit 1"]))

    def looping():
        pod = simulator.pod("crasher")
        status = (pod.status.container_statuses or [None])[0]
        return status and status.restart_count >= 2 and status.state.waiting and \
            status.state.waiting.reason == "CrashLoopBackOff" and pod
    pod = wait_for(looping, what="restarts and CrashLoopBackOff")
    status = pod.status.container_statuses[0]
    assert pod.status.phase == "Running"
    assert status.ready is False and _condition(pod, "Ready").status == "False"
    assert status.last_state.terminated.exit_code == 1 and status.last_state.terminated.reason == "Error"
    # The back-off being waited, as a Go duration: basic.yml's crashBackoff 0.2 s doubles with each
    # restart up to 8 times that (the first restart came at once).
    waited = {1: "200ms", 2: "400ms", 3: "800ms"}.get(status.restart_count, "1.6s")
    assert status.state.waiting.message == (f"back-off {waited} restarting failed container=main "
                                            f"pod=crasher_default({pod.metadata.uid})")
    row = simulator.kubectl("get", "pod", "crasher", "--no-headers").stdout.split()
    assert row[2] == "CrashLoopBackOff" and int(row[3]) >= 2
    backoff = [e for e in simulator.events_for("crasher") if e.reason == "BackOff"]
    assert backoff and backoff[0].type == "Warning"
    assert backoff[0].message.startswith("Back-off restarting failed container main in pod crasher_default(")


def test_on_failure_restarts_until_success(simulator):
    simulator.core.create_namespaced_pod(NS, pod_manifest("ok-once", ["sh", "-c", "echo ok"],
                                                          restartPolicy="OnFailure"))
    pod = simulator.wait_pod_phase("ok-once", "Succeeded")
    assert pod.status.container_statuses[0].restart_count == 0


def test_init_containers_run_first(simulator):
    pod = pod_manifest("with-init", ["sleep", "infinity"])
    pod["spec"]["initContainers"] = [{"name": "setup", "image": "registry.example/tools:1.0",
                                      "command": ["sh", "-c", "echo ready"]}]
    simulator.core.create_namespaced_pod(NS, pod)
    simulator.kubectl("wait", "--for=condition=Ready", "pod/with-init", "--timeout=20s")
    pod = simulator.pod("with-init")
    init = pod.status.init_container_statuses[0]
    assert init.state.terminated.reason == "Completed" and init.ready is False
    assert _condition(pod, "Initialized").status == "True"
    assert pod.status.container_statuses[0].state.running is not None
    assert simulator.kubectl("logs", "with-init", "-c", "setup").stdout == "ready\n"


def test_graceful_deletion(simulator):
    simulator.core.create_namespaced_pod(NS, pod_manifest("short-lived", ["sleep", "infinity"]))
    simulator.wait_pod_phase("short-lived", "Running")
    answer = simulator.core.delete_namespaced_pod("short-lived", NS)
    # A running pod is marked first; the kubelet removes it once its containers stopped.
    assert answer.metadata.deletion_timestamp is not None
    assert answer.metadata.deletion_grace_period_seconds == 30
    simulator.kubectl("wait", "--for=delete", "pod/short-lived", "--timeout=20s")


def test_a_finished_pod_deleted_and_made_again_under_its_name_runs_again(simulator):
    # The kubelet keeps what it knows of a pod by its uid: the new pod is a new run, with its own
    # container and exit code, not the finished one's.
    simulator.core.create_namespaced_pod(NS, pod_manifest("again", ["sh", "-c", "exit 4"], restartPolicy="Never"))
    first = simulator.wait_pod_phase("again", "Failed")
    assert first.status.container_statuses[0].state.terminated.exit_code == 4
    simulator.core.delete_namespaced_pod("again", NS)
    simulator.kubectl("wait", "--for=delete", "pod/again", "--timeout=20s")
    simulator.core.create_namespaced_pod(NS, pod_manifest("again", ["sh", "-c", "echo second"], restartPolicy="Never"))
    second = simulator.wait_pod_phase("again", "Succeeded")
    assert second.metadata.uid != first.metadata.uid
    assert second.status.container_statuses[0].state.terminated.exit_code == 0
    assert simulator.kubectl("logs", "again").stdout == "second\n"
    # A finished pod is left as it is, pass after pass: no write once it finished.
    version = second.metadata.resource_version
    time.sleep(1.0)
    assert simulator.core.read_namespaced_pod("again", NS).metadata.resource_version == version
