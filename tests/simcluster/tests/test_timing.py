"""Timing: the compressed profile (the default) and `timing: real`, the durations of a real cluster
of the configured version (kube-controller-manager's --node-monitor-period and
--node-monitor-grace-period, the kubelet's restart back-off, DefaultTolerationSeconds), and what
they drive: the CrashLoopBackOff delays and their waiting message, the node lifecycle controller's
grace period before a silent node turns Unknown, and the taint eviction controller's
tolerationSeconds (concepts/workloads/pods/pod-lifecycle/#restart-policy,
concepts/architecture/nodes/#node-controller, concepts/scheduling-eviction/taint-and-toleration/
#taint-based-evictions).

The table and the back-off ladder are checked directly; the real durations a test can wait for
(the first 10 s back-off, the 50 s grace period) are waited for through the clients."""

import sys
import time

import pytest

from sim_helpers import PACKAGE_ROOT, pod_manifest, wait_for, wait_until

sys.path.insert(0, PACKAGE_ROOT)
from simcluster import cluster as sim_cluster  # noqa: E402  pylint: disable=wrong-import-position
from simcluster import controllers as sim_controllers  # noqa: E402  pylint: disable=wrong-import-position

UNREACHABLE = "node.kubernetes.io/unreachable"


# ------------------------------------------------------------------ the table
def test_the_compressed_profile_is_the_default_and_unchanged():
    timing = sim_cluster.resolve_timing(None, "1.37.0")
    assert timing == {"profile": "compressed", "tick": 0.05, "podStart": 0.3, "programRun": 0.2,
                      "pluginRegister": 1.0, "podShutdown": 0.2, "crashBackoff": 1.0, "crashBackoffMax": 8.0,
                      "nodeMonitorPeriod": 0.0, "nodeMonitorGracePeriod": 0.0, "defaultTolerationSeconds": 300,
                      "eventTTL": 3600}
    # Overrides as cluster files write them keep working; the back-off's cap follows its start.
    timing = sim_cluster.resolve_timing({"podStart": 0.05, "crashBackoff": 0.2}, "1.37.0")
    assert (timing["profile"], timing["podStart"], timing["crashBackoffMax"]) == ("compressed", 0.05, 1.6)
    assert sim_cluster.resolve_timing("compressed", "1.37.0") == sim_cluster.resolve_timing({}, "1.37.0")


def test_the_real_profile_has_upstream_defaults():
    timing = sim_cluster.resolve_timing("real", "1.37.0")
    assert timing["profile"] == "real"
    assert (timing["crashBackoff"], timing["crashBackoffMax"]) == (10.0, 300.0)
    assert (timing["nodeMonitorPeriod"], timing["nodeMonitorGracePeriod"]) == (5.0, 50.0)
    assert timing["defaultTolerationSeconds"] == 300 and timing["eventTTL"] == 3600
    # Representative figures where a real cluster varies.
    assert (timing["podStart"], timing["programRun"], timing["pluginRegister"], timing["podShutdown"]) == \
        (2.0, 1.0, 6.0, 1.0)


@pytest.mark.parametrize("version,grace", [("1.29.9", 40.0), ("1.31.4", 40.0), ("v1.32.0-alpha.2", 50.0),
                                           ("1.32.0", 50.0), ("1.35.1", 50.0)])
def test_the_grace_period_follows_the_version(version, grace):
    # --node-monitor-grace-period went from 40s to 50s in v1.32.0 (kubernetes/kubernetes#126287).
    assert sim_cluster.resolve_timing("real", version)["nodeMonitorGracePeriod"] == grace


def test_overrides_over_the_real_profile_and_bad_settings():
    timing = sim_cluster.resolve_timing({"profile": "real", "podStart": 5, "nodeMonitorGracePeriod": 20},
                                        "1.37.0")
    assert (timing["podStart"], timing["nodeMonitorGracePeriod"], timing["crashBackoff"]) == (5, 20, 10.0)
    with pytest.raises(ValueError, match="unknown profile 'slow'"):
        sim_cluster.resolve_timing("slow", "1.37.0")
    with pytest.raises(ValueError, match="unknown durations podstart"):
        sim_cluster.resolve_timing({"podstart": 1}, "1.37.0")
    with pytest.raises(ValueError, match="expected a profile"):
        sim_cluster.resolve_timing(5, "1.37.0")


def _ladder(backoff, runs):
    """The wait before each restart of a container that runs runs[i] seconds each time."""
    now, waits = 0.0, []
    for run in runs:
        exited = now
        wait = backoff.waiting(exited, now)
        waits.append(wait)
        now += wait
        backoff.restart(exited, now)
        now += run
    return waits


def test_the_kubelet_back_off_ladder():
    real = sim_cluster.resolve_timing("real", "1.37.0")
    backoff = sim_controllers.CrashLoopBackOff(real["crashBackoff"], real["crashBackoffMax"])
    # The first restart comes at once, then 10 s doubling up to 5 minutes.
    assert _ladder(backoff, [1] * 9) == [0, 10, 20, 40, 80, 160, 300, 300, 300]
    # Ten minutes (twice the maximum) without a crash start it over; a little less does not.
    assert _ladder(backoff, [599, 1]) == [300, 300]
    assert _ladder(backoff, [601, 1, 1]) == [300, 0, 10]
    compressed = sim_cluster.resolve_timing(None, "1.37.0")
    backoff = sim_controllers.CrashLoopBackOff(compressed["crashBackoff"], compressed["crashBackoffMax"])
    assert _ladder(backoff, [0.2] * 6) == [0, 1, 2, 4, 8, 8]


@pytest.mark.parametrize("seconds,text", [(10, "10s"), (20, "20s"), (80, "1m20s"), (300, "5m0s"), (0.2, "200ms"),
                                          (1.6, "1.6s"), (3600, "1h0m0s")])
def test_back_off_durations_read_as_go_prints_them(seconds, text):
    assert sim_controllers._go_duration(seconds) == text  # pylint: disable=protected-access


# -------------------------------------------------------- real durations, waited
def _real_cluster(make_simulator, **extra):
    return make_simulator(dict({"kubernetesVersion": "1.37.0", "timing": "real", "nodes": [{"name": "node-a"}]},
                               **extra))


def _waiting(sim, name, restarts):
    def check():
        pod = sim.pod(name)
        status = (pod.status.container_statuses or [None])[0]
        return status and status.restart_count == restarts and status.state.waiting \
            and status.state.waiting.reason == "CrashLoopBackOff" and pod
    return check


def test_real_crash_loop_back_off_waits_10s_then_20s(make_simulator):
    sim = _real_cluster(make_simulator)
    created = time.monotonic()
    sim.core.create_namespaced_pod("default", pod_manifest("crasher", ["sh", "-c", "exit 1"]))
    # The pod takes its 2 s to start.
    time.sleep(1.0)
    status = (sim.pod("crasher").status.container_statuses or [None])[0]
    assert status is None or (status.state.waiting and status.state.waiting.reason == "ContainerCreating")
    # The first exit is restarted at once; the second waits the first back-off, 10 s.
    pod = wait_for(_waiting(sim, "crasher", 1), timeout=15, what="the first back-off")
    seen = time.monotonic()
    assert seen - created >= 3.9  # start (2 s) and two runs of a second each
    assert pod.status.container_statuses[0].state.waiting.message == (
        f"back-off 10s restarting failed container=main pod=crasher_default({pod.metadata.uid})")
    assert pod.status.container_statuses[0].last_state.terminated.exit_code == 1
    wait_until(lambda: sim.pod("crasher"),
               lambda p: p.status.container_statuses[0].restart_count == 2, timeout=15,
               what="the restart after 10 s")
    assert 9.5 <= time.monotonic() - seen <= 11.5
    pod = wait_for(_waiting(sim, "crasher", 2), timeout=5, what="the second back-off")
    assert pod.status.container_statuses[0].state.waiting.message == (
        f"back-off 20s restarting failed container=main pod=crasher_default({pod.metadata.uid})")
    row = sim.kubectl("get", "pod", "crasher", "--no-headers").stdout.split()
    assert row[2] == "CrashLoopBackOff" and row[3] == "2"
    backoff = [e for e in sim.events_for("crasher") if e.reason == "BackOff"]
    assert backoff and backoff[0].type == "Warning"


def _ready(node):
    return next(c for c in node.status.conditions if c.type == "Ready")


def _unreachable(node):
    return sorted(t.effect for t in node.spec.taints or [] if t.key == UNREACHABLE)


def test_real_node_grace_period_before_unknown(make_simulator):
    sim = _real_cluster(make_simulator)
    wait_until(lambda: sim.node("node-a"), lambda n: n.status.conditions and _ready(n).status == "True",
               what="node-a Ready")
    sim.fault("node-not-ready", node="node-a")
    stopped = time.monotonic()
    # Ready for the whole grace period (50 s since v1.32; the old 40 s passes too).
    while time.monotonic() - stopped < 45:
        node = sim.node("node-a")
        assert _ready(node).status == "True" and not _unreachable(node), time.monotonic() - stopped
        time.sleep(1.0)
    node = wait_until(lambda: sim.node("node-a"), lambda n: _ready(n).status == "Unknown", timeout=15,
                      what="Ready Unknown after the grace period")
    # Past the grace period (counted from the kubelet's last heartbeat, which came before the fault),
    # at the controller's next pass (every 5 s); a loaded machine adds a little.
    assert 45 <= time.monotonic() - stopped <= 62
    assert _ready(node).reason == "NodeStatusUnknown"
    assert _ready(node).message == "Kubelet stopped posting node status."
    assert _ready(node).last_heartbeat_time < _ready(node).last_transition_time
    assert _unreachable(node) == ["NoExecute", "NoSchedule"]
    assert sim.kubectl("get", "node", "node-a", "--no-headers").stdout.split()[1] == "NotReady"
    # The kubelet back: Ready at once; the controller drops the NoExecute taint on its next pass.
    sim.clear_faults()
    wait_until(lambda: sim.node("node-a"), lambda n: _ready(n).status == "True", timeout=3,
               what="Ready again")
    wait_until(lambda: sim.node("node-a"), lambda n: not _unreachable(n), timeout=6.5,
               what="the unreachable taints gone")


# ------------------------------------------------------- taint-based eviction
def test_taint_eviction_after_toleration_seconds(make_simulator):
    sim = make_simulator({
        "kubernetesVersion": "1.37.0",
        "timing": {"tick": 0.02, "podStart": 0.05, "programRun": 0.05, "podShutdown": 0.05,
                   "defaultTolerationSeconds": 2},
        "nodes": [{"name": "node-a"}, {"name": "node-b"}]})
    on_a = {"nodeSelector": {"kubernetes.io/hostname": "node-a"}}

    def tolerating(seconds):
        toleration = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}
        if seconds is not None:
            toleration["tolerationSeconds"] = seconds
        return dict(on_a, tolerations=[toleration])
    sim.core.create_namespaced_pod("default", pod_manifest("defaulted", ["sleep", "infinity"], **on_a))
    sim.core.create_namespaced_pod("default", pod_manifest("at-once", ["sleep", "infinity"], **tolerating(0)))
    sim.core.create_namespaced_pod("default", pod_manifest("an-hour", ["sleep", "infinity"], **tolerating(3600)))
    sim.core.create_namespaced_pod("default", pod_manifest("for-good", ["sleep", "infinity"], **tolerating(None)))
    # DefaultTolerationSeconds admission, with the duration the cluster file set.
    defaulted = sim.pod("defaulted").spec.tolerations
    assert sorted((t.key, t.effect, t.toleration_seconds) for t in defaulted) == [
        ("node.kubernetes.io/not-ready", "NoExecute", 2), (UNREACHABLE, "NoExecute", 2)]
    for name in ("defaulted", "at-once", "an-hour", "for-good"):
        sim.wait_pod_phase(name, "Running")
    sim.fault("node-not-ready", node="node-a")
    wait_until(lambda: sim.node("node-a"), lambda n: "NoExecute" in _unreachable(n),
               what="the unreachable NoExecute taint")
    since = time.monotonic()
    pod = wait_until(lambda: sim.pod("at-once"), lambda p: p.metadata.deletion_timestamp is not None,
                     timeout=2, what="at-once marked for deletion")
    condition = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
    assert (condition.status, condition.reason, condition.message) == (
        "True", "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")
    events = [e for e in sim.events_for("at-once") if e.reason == "TaintManagerEviction"]
    assert events and events[0].message == "Marking for deletion Pod default/at-once"
    assert events[0].source.component == "taint-eviction-controller" and events[0].type == "Normal"
    assert sim.pod("defaulted").metadata.deletion_timestamp is None
    wait_until(lambda: sim.pod("defaulted"), lambda p: p.metadata.deletion_timestamp is not None, timeout=5,
               what="defaulted marked for deletion after its 2 s")
    assert time.monotonic() - since >= 1.8
    # The kubelet is away: the pods stay, terminating, until it is back.
    assert sim.pod("at-once").status.phase == "Running"
    for name in ("an-hour", "for-good"):
        assert sim.pod(name).metadata.deletion_timestamp is None
    sim.clear_faults()
    wait_for(lambda: not [p for p in sim.core.list_namespaced_pod("default").items
                          if p.metadata.name in ("at-once", "defaulted")],
             timeout=10, what="the evicted pods gone once the kubelet is back")
    cancelled = wait_for(lambda: [e for e in sim.events_for("an-hour") if e.reason == "TaintManagerEviction"],
                         timeout=5, what="the cancelled eviction")
    assert cancelled[0].message == "Cancelling deletion of Pod default/an-hour"
    assert not [e for e in sim.events_for("for-good") if e.reason == "TaintManagerEviction"]
    for name in ("an-hour", "for-good"):
        assert sim.pod(name).metadata.deletion_timestamp is None and sim.pod(name).status.phase == "Running"
