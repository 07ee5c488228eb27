# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every manifest the cluster roles render, over every option that changes it.

The roles' own templates are rendered by Ansible's templating engine with the
roles' defaults and vars, then validated offline and strictly against the
upstream schemas of each supported Kubernetes minor (kubernetes-validate), and
checked for what the roles promise (no privileged pod, no hostPath in smoke
pods, SYS_ADMIN only where the plugin needs it, ...).
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import os

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml

from ansible_collections.gpufleet.nvidia.plugins.filter.internal import device_plugin as dp
from ansible_collections.gpufleet.nvidia.tests.unit.templating import DataLoader, Templar, load_yaml, trust_as_template

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLES = os.path.join(COLLECTION, "roles")
KUBERNETES = ["1.32.0", "1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0"]


# ansible-test runs each unit test in a child process forked from the one that imported this
# module (its ansible_forked plugin): what a test reads or renders is gone when it ends. What the
# tests share is therefore made here, at import, in the process they are forked from (the end of
# this module): each template rendered once per set of variables, and each schema file that
# kubernetes-validate reads (a schema and the release's definitions, per validate() call) parsed
# once. The documents and schemas are the same ones; a render that fails fails the test that asks
# for it, as before.
kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)
_RENDERED = {}


def render(role, template, **overrides):
    """The role's template rendered with its defaults, vars and the overrides (a copy of its
    documents for each caller)."""
    key = (role, template, json.dumps(overrides, sort_keys=True))
    if key not in _RENDERED:
        try:
            _RENDERED[key] = (_render(role, template, overrides), None)
        except Exception as error:  # pylint: disable=broad-exception-caught  # raised again to the test
            _RENDERED[key] = (None, error)
    docs, error = _RENDERED[key]
    if error is not None:
        raise error
    return copy.deepcopy(docs)


def _render(role, template, overrides):
    loader = DataLoader()
    variables = {"groups": {}}
    for part in ("defaults", "vars"):
        variables.update(load_yaml(loader, os.path.join(ROLES, role, part, "main.yml")))
    variables.update(overrides)
    with open(os.path.join(ROLES, role, "templates", template)) as handle:
        text = Templar(loader=loader, variables=variables).template(trust_as_template(handle.read()))
    # YAML documents, or one JSON list of objects (gpu_smoke_test's pods), which ansible-core 2.16 and 2.17
    # may already have turned into a list.
    docs = []
    for doc in ([text] if isinstance(text, list) else yaml.safe_load_all(text)):
        docs.extend(doc if isinstance(doc, list) else [doc] if doc else [])
    return docs


DEVICE_PLUGIN_CASES = {
    "defaults": {},
    "mig-single": {"gpu_device_plugin_mig_strategy": "single"},
    "mig-mixed-volume-mounts": {"gpu_device_plugin_mig_strategy": "mixed",
                                "gpu_device_plugin_device_list_strategy": ["volume-mounts"]},
    "cdi": {"gpu_device_plugin_device_list_strategy": ["cdi-cri", "envvar"], "gpu_device_plugin_device_id_strategy": "index"},
    "time-slicing": {"gpu_device_plugin_time_slicing_replicas": 4, "gpu_device_plugin_time_slicing_rename": True,
                     "gpu_device_plugin_fail_requests_greater_than_one": True,
                     "gpu_device_plugin_fail_on_init_error": False},
    "per-node-configs": {"gpu_device_plugin_node_configs": {
        "shared": {"time_slicing_replicas": 4}, "mig-mixed": {"mig_strategy": "mixed"}}},
    "bare": {"gpu_device_plugin_create_namespace": False, "gpu_device_plugin_runtime_class": "",
             "gpu_device_plugin_pod_runtime_class": "", "gpu_device_plugin_priority_class": "",
             "gpu_device_plugin_node_selector": {}, "gpu_device_plugin_tolerations": [],
             "gpu_device_plugin_dra_node_label": ""},
    "air-gapped": {"gpu_device_plugin_registry": "registry.example.internal:5000/nvidia",
                   "gpu_device_plugin_image_digest": "sha256:" + "0123456789abcdef" * 4,
                   "gpu_device_plugin_image_pull_secrets": ["mirror-pull", "backup-pull"],
                   "gpu_device_plugin_resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                                   "limits": {"memory": "128Mi"}}},
    "cdi-envvar-ignored": {"gpu_device_plugin_device_list_strategy": ["cdi-cri"],
                           "gpu_device_plugin_runtime_visible_devices_envvar": "ignore"},
    "per-node-cdi-secrets": {"gpu_device_plugin_node_configs": {"cdi": {"device_list_strategy": ["cdi-cri"]}},
                             "gpu_device_plugin_image_pull_secrets": ["mirror-pull"],
                             "gpu_device_plugin_namespace": "gpu-operator-resources"},
}


def by_kind(docs):
    return dict((doc["kind"], doc) for doc in docs)


def containers(pod_spec):
    return pod_spec.get("initContainers", []) + pod_spec["containers"]


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("case", sorted(DEVICE_PLUGIN_CASES))
def test_device_plugin_manifests_validate(case, version):
    docs = render("gpu_device_plugin", "manifests.yaml.j2", **DEVICE_PLUGIN_CASES[case])
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("case", sorted(DEVICE_PLUGIN_CASES))
def test_device_plugin_manifests_do_what_the_role_promises(case):
    overrides = DEVICE_PLUGIN_CASES[case]
    settings = dict((key[len("gpu_device_plugin_"):], value) for key, value in overrides.items()
                    if key[len("gpu_device_plugin_"):] in dp.SETTING_KEYS)
    configs = dp.device_plugin_configs(settings, overrides.get("gpu_device_plugin_node_configs", {}))
    docs = render("gpu_device_plugin", "manifests.yaml.j2", **overrides)
    kinds = by_kind(docs)
    ds = kinds["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert ("Namespace" in kinds) is overrides.get("gpu_device_plugin_create_namespace", True)
    assert ("RuntimeClass" in kinds) is (overrides.get("gpu_device_plugin_runtime_class", "nvidia") != "")
    if "RuntimeClass" in kinds:
        assert kinds["RuntimeClass"]["handler"] == "nvidia"
        assert "scheduling" not in kinds["RuntimeClass"]  # opt-in: the RuntimeClass may be shared
    assert spec["nodeSelector"] == overrides.get("gpu_device_plugin_node_selector", {"nvidia.com/gpu.present": "true"})
    # One path per node: never on a node labelled for the DRA driver.
    label = overrides.get("gpu_device_plugin_dra_node_label", "nvidia.com/dra-kubelet-plugin")
    terms = (spec.get("affinity") or {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms")
    assert terms == ([{"matchExpressions": [{"key": label, "operator": "NotIn", "values": ["true"]}]}] if label else None)
    # The health gating's taint is tolerated by default: a gated node keeps its plugin.
    assert spec["tolerations"] == overrides.get("gpu_device_plugin_tolerations", [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "gpufleet.nvidia.com/gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"}])
    assert spec.get("priorityClassName", "") == overrides.get("gpu_device_plugin_priority_class",
                                                              "system-node-critical")
    assert spec.get("runtimeClassName", "") == overrides.get("gpu_device_plugin_pod_runtime_class", "nvidia")
    image = spec["containers"][0]["image"]
    assert image.startswith(overrides.get("gpu_device_plugin_registry", "nvcr.io/nvidia") + "/k8s-device-plugin:v")
    if "gpu_device_plugin_image_digest" in overrides:
        assert image.endswith(":v0.20.1@" + overrides["gpu_device_plugin_image_digest"])
    assert [s["name"] for s in spec.get("imagePullSecrets", [])] == overrides.get(
        "gpu_device_plugin_image_pull_secrets", [])
    # Never privileged; SYS_ADMIN exactly when MIG, volume-mounts or a runtime that ignores the envvar need it;
    # every capability dropped.
    sys_admin = dp.device_plugin_needs_sys_admin(
        configs, overrides.get("gpu_device_plugin_runtime_visible_devices_envvar", "accept"))
    assert sys_admin is (case in ("mig-single", "mig-mixed-volume-mounts", "per-node-configs", "cdi-envvar-ignored"))
    for container in containers(spec):
        security = container["securityContext"]
        assert "privileged" not in security and security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert security["capabilities"].get("add", []) == (["SYS_ADMIN"] if sys_admin else [])
        assert container["image"] == image
    # The only host path is the kubelet's device-plugin socket dir (and the CDI spec dir for CDI).
    host_paths = sorted(v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v)
    cdi = any(s.startswith("cdi-") for c in configs.values() for s in c.get("device_list_strategy", []))
    assert host_paths == sorted(["/var/lib/kubelet/device-plugins"] + (["/var/run/cdi", "/"] if cdi else []))
    if cdi:
        (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "driver-root"]
        assert mount["readOnly"] is True
    assert ds["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "nvidia-device-plugin",
                                                     "app.kubernetes.io/managed-by": "gpufleet.nvidia"}
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    if "Namespace" in kinds:
        assert kinds["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # The ConfigMap holds exactly the configs, in NVIDIA's v1 format.
    data = kinds["ConfigMap"]["data"]
    per_node = len(configs) > 1
    if per_node:
        assert sorted(data) == sorted(configs)
        for name, text in data.items():
            assert yaml.safe_load(text) == dp.device_plugin_config(configs[name])
        assert [c["name"] for c in spec["initContainers"]] == ["config-manager-init"]
        assert [c["name"] for c in spec["containers"]] == ["nvidia-device-plugin", "config-manager"]
        assert spec["serviceAccountName"] == kinds["ServiceAccount"]["metadata"]["name"]
        assert spec["shareProcessNamespace"] is True
        assert kinds["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                                                  "verbs": ["get", "list", "watch"]}]
        assert kinds["ClusterRoleBinding"]["subjects"][0]["namespace"] == ds["metadata"]["namespace"]
    else:
        assert list(data) == ["config.yaml"]
        assert yaml.safe_load(data["config.yaml"]) == dp.device_plugin_config(configs["default"])
        assert "ServiceAccount" not in kinds and "ClusterRole" not in kinds
        assert spec["automountServiceAccountToken"] is False
    env = dict((e["name"], e.get("value")) for e in spec["containers"][0]["env"])
    assert env["CONFIG_FILE"] == "/config/config.yaml"
    assert ("NVIDIA_MIG_MONITOR_DEVICES" in env) is any(c.get("mig_strategy", "none") != "none"
                                                        for c in configs.values())


def test_a_config_change_rolls_the_daemonset():
    def checksum(**overrides):
        ds = by_kind(render("gpu_device_plugin", "manifests.yaml.j2", **overrides))["DaemonSet"]
        return ds["spec"]["template"]["metadata"]["annotations"]["gpufleet.nvidia/config-sha1"]
    assert checksum() == checksum(gpu_device_plugin_priority_class="")
    assert checksum() != checksum(gpu_device_plugin_time_slicing_replicas=2)
    assert checksum() != checksum(gpu_device_plugin_node_configs={"shared": {"time_slicing_replicas": 2}})


PLAN = [
    {"host": "gpu-01.example", "node": "gpu-01", "request": 1,
     "pods": {"nvidia-smi": "gpufleet-smoke-nvidia-smi-gpu-01", "vector-add": "gpufleet-smoke-vector-add-gpu-01"}},
    {"host": "gpu-02.example", "node": "gpu-02", "request": 4,
     "pods": {"nvidia-smi": "gpufleet-smoke-nvidia-smi-gpu-02", "vector-add": "gpufleet-smoke-vector-add-gpu-02"}},
]
SMOKE_CASES = {
    "nvidia-smi": {"__gpu_smoke_test_stage_name": "nvidia-smi"},
    "vector-add": {"__gpu_smoke_test_stage_name": "vector-add", "gpu_smoke_test_vector_add": True},
    "bare-mig-secrets": {"__gpu_smoke_test_stage_name": "nvidia-smi", "gpu_smoke_test_runtime_class": "",
                         "gpu_smoke_test_resource": "nvidia.com/mig-1g.10gb", "gpu_smoke_test_tolerations": [],
                         "gpu_smoke_test_image_pull_secrets": ["mirror-pull"],
                         "gpu_smoke_test_image": "registry.example.internal/cuda:12.2.2-base-ubuntu22.04"},
}


def smoke_pods(case):
    return render("gpu_smoke_test", "pods.json.j2", __gpu_smoke_test_stage_plan=copy.deepcopy(PLAN),
                  __gpu_smoke_test_run="20261121070000-42", **SMOKE_CASES[case])


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("case", sorted(SMOKE_CASES))
def test_smoke_pods_validate(case, version):
    for doc in smoke_pods(case):
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("case", sorted(SMOKE_CASES))
def test_smoke_pods_do_what_the_role_promises(case):
    overrides = SMOKE_CASES[case]
    stage = overrides["__gpu_smoke_test_stage_name"]
    pods = smoke_pods(case)
    assert [p["metadata"]["name"] for p in pods] == [entry["pods"][stage] for entry in PLAN]
    resource = overrides.get("gpu_smoke_test_resource", "nvidia.com/gpu")
    for entry, pod in zip(PLAN, pods):
        spec = pod["spec"]
        assert pod["metadata"]["labels"]["gpufleet.nvidia/run"] == "20261121070000-42"
        assert pod["metadata"]["labels"]["gpufleet.nvidia/stage"] == stage
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [entry["node"]]}]}]
        assert spec.get("runtimeClassName", "") == overrides.get("gpu_smoke_test_runtime_class", "nvidia")
        assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 300
        assert spec["automountServiceAccountToken"] is False
        # No privileged mode, no hostPath, no volumes at all: the runtime brings the GPU.
        assert "volumes" not in spec and "hostNetwork" not in spec and "hostPID" not in spec
        (container,) = spec["containers"]
        assert "privileged" not in container["securityContext"]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["limits"] == {resource: entry["request"]}
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
        # The rolling upgrade tests a cordoned node.
        assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                "effect": "NoSchedule"} in spec["tolerations"]
        if stage == "nvidia-smi":
            assert "nvidia-smi -L >/dev/termination-log" in container["command"][-1]
        else:
            assert "command" not in container
            assert container["image"] == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"


# Top-level flags of NVIDIA's chart that become environment variables of the
# plugin and would override the config files (and so every per-node config).
CHART_FLAG_VALUES = ("migStrategy", "failOnInitError", "deviceListStrategy", "deviceIDStrategy",
                     "compatWithCPUManager")


@pytest.mark.parametrize("case", sorted(DEVICE_PLUGIN_CASES))
def test_helm_values_carry_the_same_settings_as_the_manifests(case):
    overrides = DEVICE_PLUGIN_CASES[case]
    values = render("gpu_device_plugin", "helm-values.yaml.j2", gpu_device_plugin_method="helm", **overrides)
    (values,) = values
    ds = by_kind(render("gpu_device_plugin", "manifests.yaml.j2", **overrides))["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    configs = by_kind(render("gpu_device_plugin", "manifests.yaml.j2", **overrides))["ConfigMap"]["data"]
    assert not set(CHART_FLAG_VALUES) & set(values)
    # The same config files; a single config is the chart's "default" entry.
    assert values["config"]["default"] == "default"
    chart_configs = dict((name, yaml.safe_load(text)) for name, text in values["config"]["map"].items())
    ours = dict((("default" if name == "config.yaml" else name), yaml.safe_load(text)) for name, text in configs.items())
    assert chart_configs == ours
    assert values["securityContext"] == spec["containers"][0]["securityContext"]
    assert "%s:%s" % (values["image"]["repository"], values["image"]["tag"]) == spec["containers"][0]["image"]
    assert values["nodeSelector"] == spec["nodeSelector"]
    assert values["tolerations"] == spec["tolerations"]
    # Present: Helm merges a map into the chart's default, so it is null (which removes the chart's) or the
    # one term that keeps the plugin off the nodes on the DRA path (the list replaces the chart's).
    assert "affinity" in values and values["affinity"] == spec.get("affinity")
    assert values["priorityClassName"] == spec.get("priorityClassName")
    assert values["runtimeClassName"] == spec.get("runtimeClassName")
    assert values["imagePullSecrets"] == spec.get("imagePullSecrets", [])
    assert values["resources"] == spec["containers"][0].get("resources", {})
    driver_root = [v["hostPath"]["path"] for v in spec["volumes"] if v["name"] == "driver-root"]
    assert values.get("nvidiaDriverRoot") == (driver_root[0] if driver_root else None)


# The defaults of NVIDIA's chart that reach the plugin's pod spec (deployments/helm/nvidia-device-plugin/
# values.yaml, v0.17 to v0.20): a node affinity on NFD's PCI vendor label, NFD's CPU vendor label for Tegra,
# or nvidia.com/gpu.present; and a CriticalAddonsOnly toleration.
CHART_DEFAULTS = {
    "config": {"name": "", "map": {}, "default": "", "fallbackStrategies": ["named", "single"]},
    "image": {"repository": "nvcr.io/nvidia/k8s-device-plugin", "pullPolicy": "IfNotPresent", "tag": ""},
    "imagePullSecrets": [],
    "securityContext": {},
    "resources": {},
    "nodeSelector": {},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
                               "values": ["true"]}]},
        {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id", "operator": "In",
                               "values": ["NVIDIA"]}]},
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}},
    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "priorityClassName": "system-node-critical",
    "runtimeClassName": None,
    "nvidiaDriverRoot": None,
}


def helm_coalesce(user, defaults):
    """User values over a chart's defaults as Helm merges them (pkg/chartutil/coalesce.go): maps merge
    key by key, a null removes the chart's key, any other value replaces the chart's."""
    merged = copy.deepcopy(user)
    for key, default in defaults.items():
        if key not in merged:
            merged[key] = copy.deepcopy(default)
        elif merged[key] is None:
            del merged[key]
        elif isinstance(merged[key], dict) and isinstance(default, dict):
            merged[key] = helm_coalesce(merged[key], default)
    return merged


def chart_pod_placement(values):
    """What the chart's plugin DaemonSet template puts in the pod spec from these values: each field
    only when its value is not empty (the template's ``with``/``if``)."""
    fields = ("nodeSelector", "affinity", "tolerations", "priorityClassName", "runtimeClassName", "imagePullSecrets")
    return dict((field, values[field]) for field in fields if values.get(field))


@pytest.mark.parametrize("case", sorted(DEVICE_PLUGIN_CASES))
def test_helm_values_merged_over_the_chart_defaults_place_pods_as_the_manifests_do(case):
    overrides = DEVICE_PLUGIN_CASES[case]
    (values,) = render("gpu_device_plugin", "helm-values.yaml.j2", gpu_device_plugin_method="helm", **overrides)
    merged = helm_coalesce(values, CHART_DEFAULTS)
    spec = by_kind(render("gpu_device_plugin", "manifests.yaml.j2", **overrides))["DaemonSet"]["spec"]["template"]["spec"]
    fields = ("nodeSelector", "affinity", "tolerations", "priorityClassName", "runtimeClassName", "imagePullSecrets")
    ours = dict((field, spec[field]) for field in fields if spec.get(field))
    # The chart's NFD affinity is gone: the node selector decides, as in the manifests, with the DRA rule.
    assert merged.get("affinity") == spec.get("affinity")
    assert chart_pod_placement(merged) == ours
    assert merged["securityContext"] == spec["containers"][0]["securityContext"]
    assert merged["resources"] == spec["containers"][0].get("resources", {})


def role_value(role, expression, **overrides):
    """An expression templated with the role's defaults and vars, as the role's tasks see it."""
    loader = DataLoader()
    variables = {"groups": {}}
    for part in ("defaults", "vars"):
        variables.update(load_yaml(loader, os.path.join(ROLES, role, part, "main.yml")))
    variables.update(overrides)
    return Templar(loader=loader, variables=variables).template(trust_as_template(expression))


def role_tasks(role, name):
    with open(os.path.join(ROLES, role, "tasks", name)) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("create", [True, False])
def test_helm_gets_a_namespace_labelled_for_pod_security_from_the_manifests(create):
    overrides = {"gpu_device_plugin_method": "helm", "gpu_device_plugin_create_namespace": create}
    kinds = role_value("gpu_device_plugin", "{{ __gpu_device_plugin_manifest_kinds }}", **overrides)
    applied = [doc for doc in render("gpu_device_plugin", "manifests.yaml.j2", **overrides) if doc["kind"] in kinds]
    # The chart brings the rest; the Namespace (with the Pod Security label) and the RuntimeClass come from here.
    assert sorted(doc["kind"] for doc in applied) == sorted(["RuntimeClass"] + (["Namespace"] if create else []))
    if create:
        (namespace,) = [doc for doc in applied if doc["kind"] == "Namespace"]
        assert namespace["metadata"]["name"] == "nvidia-device-plugin"
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    manifests = role_value("gpu_device_plugin", "{{ __gpu_device_plugin_manifest_kinds }}",
                           gpu_device_plugin_method="manifests")
    assert sorted(manifests) == sorted(["Namespace", "RuntimeClass", "ConfigMap", "ServiceAccount", "ClusterRole",
                                        "ClusterRoleBinding", "DaemonSet"])


def test_helm_installs_into_the_namespace_applied_before_it_and_never_creates_one():
    tasks = role_tasks("gpu_device_plugin", "apply.yml")
    names = [task["name"] for task in tasks]
    (helm,) = [task for task in tasks if "kubernetes.core.helm" in task]
    # The manifests are applied through write.yml, the objects the DaemonSet needs first.
    writes = [task for task in tasks if task.get("ansible.builtin.include_tasks") == "write.yml"]
    assert [task["name"] for task in writes] == ["Apply the objects the DaemonSet needs", "Apply the DaemonSet"]
    # write.yml applies each object through write_object.yml, in a block that stops after one not applied.
    (apply,) = [task for block in role_tasks("gpu_device_plugin", "write_object.yml") for task in block.get("block", [block])
                if "kubernetes.core.k8s" in task and not task["kubernetes.core.k8s"]["server_side_apply"]["force_conflicts"]]
    assert apply["kubernetes.core.k8s"]["apply"] is True
    # Helm would create the namespace without the Pod Security label the plugin's hostPath volumes need.
    assert helm["kubernetes.core.helm"]["create_namespace"] is False
    assert names.index(writes[0]["name"]) < names.index(helm["name"])
    assert "when" not in writes[0] and "method" not in str(writes[1].get("when"))  # applied with either method
    assert "__gpu_device_plugin_manifest_kinds" in str(tasks[names.index("Render the manifests")])


@pytest.mark.parametrize("strategy, runtime, refused", [
    (["envvar"], "accept", False),
    (["cdi-cri"], "accept", True),
    (["cdi-cri"], "ignore", False),
    (["cdi-annotations", "envvar"], "accept", False),
    (["envvar"], "ignore", True),
])
def test_the_preflight_weighs_the_strategy_against_the_nodes_runtime(strategy, runtime, refused):
    (check,) = [task for task in role_tasks("gpu_device_plugin", "preflight.yml") if task["name"] == "Check the settings"]
    errors = role_value("gpu_device_plugin", check["vars"]["__gpu_device_plugin_errors"], hostvars={},
                        gpu_device_plugin_device_list_strategy=strategy,
                        gpu_device_plugin_runtime_visible_devices_envvar=runtime)
    assert bool(errors) is refused, errors
    if refused:
        assert "gpu_device_plugin_runtime_visible_devices_envvar is %s" % runtime in errors[0]


DRA_PLAN = [
    {"host": "gpu-03.example", "node": "gpu-03", "request": 1,
     "pods": {"nvidia-smi": "gpufleet-smoke-nvidia-smi-gpu-03"},
     "dra": {"template": "gpufleet-smoke-gpu-03", "class": "gpu.nvidia.com",
             "selector": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}},
    {"host": "gpu-04.example", "node": "gpu-04", "request": 1,
     "pods": {"nvidia-smi": "gpufleet-smoke-nvidia-smi-gpu-04"},
     "dra": {"template": "gpufleet-smoke-gpu-04", "class": "mig.nvidia.com",
             "selector": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}},
]


def dra_smoke_objects():
    """The claim templates and pods of a plan with two nodes on the DRA path and one on the device plugin's."""
    plan = copy.deepcopy(PLAN[:1] + DRA_PLAN)
    common = {"__gpu_smoke_test_run": "20261121070000-42", "__gpu_smoke_test_stage_name": "nvidia-smi"}
    templates = render("gpu_smoke_test", "claim-templates.json.j2", __gpu_smoke_test_plan=plan, **common)
    pods = render("gpu_smoke_test", "pods.json.j2", __gpu_smoke_test_stage_plan=plan, **common)
    return templates, pods


# resource.k8s.io/v1 is served from Kubernetes 1.34.
DRA_KUBERNETES = [version for version in KUBERNETES if tuple(int(p) for p in version.split(".")[:2]) >= (1, 34)]
DRA_CASES = {
    "defaults": {},
    "air-gapped-gates": {"gpu_dra_driver_registry": "registry.example.internal:5000/dra",
                         "gpu_dra_driver_image_digest": "sha256:" + "0123456789abcdef" * 4,
                         "gpu_dra_driver_image_pull_secrets": ["mirror-pull"],
                         "gpu_dra_driver_feature_gates": {"DynamicMIG": True, "MPSSupport": False},
                         "gpu_dra_driver_driver_root": "/run/nvidia/driver"},
    "bare": {"gpu_dra_driver_create_namespace": False, "gpu_dra_driver_priority_class": "",
             "gpu_dra_driver_tolerations": [], "gpu_dra_driver_node_label": "example.com/dra"},
}


@pytest.mark.parametrize("version", DRA_KUBERNETES)
@pytest.mark.parametrize("case", sorted(DRA_CASES))
def test_dra_driver_manifests_validate(case, version):
    docs = render("gpu_dra_driver", "manifests.yaml.j2", **DRA_CASES[case])
    assert {doc["kind"] for doc in docs} >= {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DeviceClass",
                                             "DaemonSet"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("case", sorted(DRA_CASES))
def test_dra_driver_manifests_do_what_the_role_promises(case):
    overrides = DRA_CASES[case]
    docs = render("gpu_dra_driver", "manifests.yaml.j2", **overrides)
    kinds = by_kind(docs)
    ds = kinds["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    label = overrides.get("gpu_dra_driver_node_label", "nvidia.com/dra-kubelet-plugin")
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert ("Namespace" in kinds) is overrides.get("gpu_dra_driver_create_namespace", True)
    # Only the nodes the role labels; the chart's own node affinity is not there to widen it.
    assert spec["nodeSelector"] == {label: "true"} and "affinity" not in spec
    # A node the health gating tainted keeps its kubelet plugin (unless the tolerations are the user's own).
    assert spec["tolerations"] == overrides.get("gpu_dra_driver_tolerations", [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "gpufleet.nvidia.com/gpu-unhealthy", "operator": "Exists", "effect": "NoSchedule"}])
    (plugin,) = spec["containers"]
    env = dict((e["name"], e.get("value", e.get("valueFrom"))) for e in plugin["env"])
    # gpu-kubelet-plugin's required flags, and where it finds the driver.
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["IMAGE_NAME"] == plugin["image"]
    assert env["NVIDIA_DRIVER_ROOT"] == overrides.get("gpu_dra_driver_driver_root", "/")
    # The chart's probes and metrics (v0.5.0, templates/kubeletplugin.yaml with its default values): the plugin
    # serves gRPC health (service "liveness") on HEALTHCHECK_PORT, and none at all without it (its flag's default is -1).
    assert env["HEALTHCHECK_PORT"] == "51516"
    assert plugin["startupProbe"] == {"grpc": {"port": 51516, "service": "liveness"}, "failureThreshold": 600,
                                      "periodSeconds": 1, "timeoutSeconds": 10}
    assert plugin["livenessProbe"] == {"grpc": {"port": 51516, "service": "liveness"}, "failureThreshold": 3,
                                       "periodSeconds": 30, "timeoutSeconds": 10}
    assert (env["HTTP_ENDPOINT"], env["METRICS_PATH"]) == (":8080", "/metrics")
    gates = overrides.get("gpu_dra_driver_feature_gates", {})
    assert env.get("FEATURE_GATES") == (",".join("%s=%s" % (k, str(v).lower()) for k, v in sorted(gates.items()))
                                        or None)
    mounts = dict((m["mountPath"], m["name"]) for m in plugin["volumeMounts"])
    volumes = dict((v["name"], v["hostPath"]["path"]) for v in spec["volumes"])
    assert volumes[mounts["/var/lib/kubelet/plugins_registry"]] == "/var/lib/kubelet/plugins_registry"
    assert volumes[mounts["/var/lib/kubelet/plugins"]] == "/var/lib/kubelet/plugins"
    root = overrides.get("gpu_dra_driver_driver_root", "/")
    assert volumes[mounts["/driver-root"]] == root
    # The init container waits for the driver under the root's parent; a driver another pod mounts there later
    # (the GPU Operator's) is seen only through HostToContainer.
    (init,) = spec["initContainers"]
    (parent,) = init["volumeMounts"]
    assert volumes[parent["name"]] == ("/" if root == "/" else os.path.dirname(root.rstrip("/")))
    assert parent.get("mountPropagation") == (None if root == "/" else "HostToContainer")
    digest = overrides.get("gpu_dra_driver_image_digest")
    # v0.5.0: the plugin hands its pull policy and secrets to the MPS daemons it starts, as the chart does.
    assert env["IMAGE_PULL_POLICY"] == plugin["imagePullPolicy"] == "IfNotPresent"
    assert env.get("IMAGE_PULL_SECRETS") == (",".join(overrides.get("gpu_dra_driver_image_pull_secrets", [])) or None)
    assert plugin["image"] == "%s/dra-driver-nvidia-gpu:v0.5.0%s" % (
        overrides.get("gpu_dra_driver_registry", "registry.k8s.io/dra-driver-nvidia"), "@" + digest if digest else "")
    assert spec.get("imagePullSecrets", []) == [{"name": n} for n in overrides.get("gpu_dra_driver_image_pull_secrets", [])]
    classes = [doc for doc in docs if doc["kind"] == "DeviceClass"]
    assert [c["metadata"]["name"] for c in classes] == ["gpu.nvidia.com", "mig.nvidia.com"]
    assert [c["spec"]["selectors"][0]["cel"]["expression"] for c in classes] == [
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '%s'" % kind
        for kind in ("gpu", "mig")]
    # nvidia.com/gpu stays the device plugin's resource (the chart maps it to gpu.nvidia.com; the template says why).
    assert not any("extendedResourceName" in c["spec"] for c in classes)
    account = [doc for doc in docs if doc["kind"] == "ServiceAccount"][0]["metadata"]["name"]
    assert spec["serviceAccountName"] == account
    rules = kinds["ClusterRole"]["rules"]
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"]} in rules
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update", "patch"]} in rules


@pytest.mark.parametrize("gates, method, refused", [
    ({"MPSSupport": True}, "manifests", True),
    ({"PassthroughSupport": True}, "manifests", True),
    # v0.5.0: the consumable shares come only from the chart's consumableShares value.
    ({"ConsumableShares": True}, "manifests", True),
    ({"ConsumableShares": True}, "helm", False),
    ({"ConsumableShares": False, "FabricManagerPartitioning": True}, "manifests", False),
    ({"MPSSupport": True}, "helm", False),
    ({"MPSSupport": False, "DynamicMIG": True}, "manifests", False),
    # what gpu-kubelet-plugin v0.5.0 refuses at its start (ValidateFeatureGates, SetFromMap), whatever the method
    ({"DeviceMetadata": True}, "manifests", True),
    ({"DeviceMetadata": True}, "helm", True),
    ({"DeviceMetadata": True, "PassthroughSupport": True}, "helm", False),
    ({"DynamicMIG": True, "NVMLDeviceHealthCheck": True}, "helm", True),
    ({"IMEXDaemonsWithDNSNames": False}, "helm", True),
    ({"IMEXDaemonsWithDNSNames": False, "ComputeDomainCliques": False}, "manifests", False),
    ({"DynamicMig": True}, "manifests", True),
])
def test_the_dra_preflight_refuses_gates_the_manifests_cannot_serve(gates, method, refused):
    (check,) = [task for task in role_tasks("gpu_dra_driver", "preflight.yml") if task["name"] == "Check the settings"]
    errors = role_value("gpu_dra_driver", check["vars"]["__gpu_dra_driver_errors"], hostvars={"a": {}},
                        gpu_dra_driver_hosts=["a"], gpu_dra_driver_feature_gates=gates, gpu_dra_driver_method=method,
                        __label_key=check["vars"]["__label_key"])
    assert bool(errors) is refused, errors
    if refused:
        # each error names a gate given
        assert all(error.startswith("gpu_dra_driver_feature_gates") and any(gate in error for gate in gates)
                   for error in errors), errors


@pytest.mark.parametrize("case", sorted(DRA_CASES))
def test_dra_helm_values_carry_the_same_settings_as_the_manifests(case):
    overrides = DRA_CASES[case]
    (values,) = render("gpu_dra_driver", "helm-values.yaml.j2", **overrides)
    spec = by_kind(render("gpu_dra_driver", "manifests.yaml.j2", **overrides))["DaemonSet"]["spec"]["template"]["spec"]
    assert values["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}
    assert values["kubeletPlugin"]["nodeSelector"] == spec["nodeSelector"]
    assert values["kubeletPlugin"]["tolerations"] == spec["tolerations"]
    # null removes the chart's default affinity; an empty map would be merged into it.
    assert values["kubeletPlugin"]["affinity"] is None
    assert values["featureGates"] == overrides.get("gpu_dra_driver_feature_gates", {})
    assert values["nvidiaDriverRoot"] == overrides.get("gpu_dra_driver_driver_root", "/")
    image = values["image"]
    assert "%s:%s" % (image["repository"], image["tag"]) == spec["containers"][0]["image"]
    assert values["imagePullSecrets"] == spec.get("imagePullSecrets", [])


@pytest.mark.parametrize("version", DRA_KUBERNETES)
def test_dra_smoke_templates_and_pods_validate(version):
    templates, pods = dra_smoke_objects()
    for doc in templates + pods:
        kubernetes_validate.validate(doc, version, strict=True)


def test_dra_smoke_pods_ask_for_the_nodes_gpu_through_their_own_claim():
    templates, pods = dra_smoke_objects()
    assert [t["metadata"]["name"] for t in templates] == ["gpufleet-smoke-gpu-03", "gpufleet-smoke-gpu-04"]
    for template, entry in zip(templates, DRA_PLAN):
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        assert request == {"name": "gpu", "exactly": {"deviceClassName": entry["dra"]["class"],
                                                      "selectors": [{"cel": {"expression": entry["dra"]["selector"]}}]}}
        assert template["metadata"]["labels"]["gpufleet.nvidia/run"] == "20261121070000-42"
        # The claims made from it carry the same labels: the busy count tells an earlier run's leftover by them.
        assert template["spec"]["metadata"] == {"labels": template["metadata"]["labels"]}
    plugin_pod, dra_pods = pods[0], pods[1:]
    assert plugin_pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert plugin_pod["spec"]["runtimeClassName"] == "nvidia" and "resourceClaims" not in plugin_pod["spec"]
    for pod, entry in zip(dra_pods, DRA_PLAN):
        spec = pod["spec"]
        assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": entry["dra"]["template"]}]
        assert spec["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
        # The claim's CDI device brings the GPU: no RuntimeClass.
        assert "runtimeClassName" not in spec
        assert spec["securityContext"]["runAsNonRoot"] is True
        # The CUDA image says NVIDIA_VISIBLE_DEVICES=all: where nvidia is the runtime's default handler it would
        # inject every GPU of the node; the pod sees only its claim's device.
        env = dict((e["name"], e["value"]) for e in spec["containers"][0]["env"])
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    # the device plugin's pod is given its GPUs by the plugin (envvar strategy): nothing set here
    assert "NVIDIA_VISIBLE_DEVICES" not in [e["name"] for e in plugin_pod["spec"]["containers"][0]["env"]]


def _read_what_the_tests_share():
    cases = [lambda case=case: render("gpu_device_plugin", "manifests.yaml.j2", **case)
             for case in DEVICE_PLUGIN_CASES.values()] + [lambda case=case: smoke_pods(case) for case in SMOKE_CASES] + [
        lambda case=case: render("gpu_dra_driver", "manifests.yaml.j2", **case) for case in DRA_CASES.values()]
    for docs_of in cases:
        try:
            docs = docs_of()
        except Exception:  # pylint: disable=broad-exception-caught  # kept by render(), each test that asks reports it
            continue
        for doc, version in itertools.product(docs, KUBERNETES):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except Exception:  # pylint: disable=broad-exception-caught  # test_*_validate reports it
                pass


_read_what_the_tests_share()
