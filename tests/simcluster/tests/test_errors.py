"""Errors are metav1.Status objects with the code and reason the API conventions give
(api-conventions.md "HTTP Status codes" and "Response Status Kind"): 422 Invalid with field
causes, 400 BadRequest for undecodable bodies and unknown fields under fieldValidation=Strict."""

import json

import pytest
import yaml
from kubernetes.client.rest import ApiException

from sim_helpers import status_of

CLUSTER = "basic.yml"


def _invalid(call, *args):
    with pytest.raises(ApiException) as err:
        call(*args)
    assert err.value.status == 422
    status = status_of(err.value)
    assert status["kind"] == "Status" and status["reason"] == "Invalid" and status["code"] == 422
    return status


def test_pod_without_containers_is_invalid(simulator):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty"}, "spec": {"containers": []}}
    status = _invalid(simulator.core.create_namespaced_pod, "default", pod)
    assert status["message"] == 'Pod "empty" is invalid: spec.containers: Required value'
    assert status["details"]["name"] == "empty" and status["details"]["kind"] == "Pod"
    assert status["details"]["causes"] == [{"reason": "FieldValueRequired", "message": "Required value",
                                            "field": "spec.containers"}]
    result = simulator.kubectl("create", "-f", "-", stdin=yaml.safe_dump(pod), check=False)
    assert result.returncode == 1
    assert 'The Pod "empty" is invalid: spec.containers: Required value' in result.stderr


def test_container_without_a_name_is_invalid(simulator):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "noname"},
           "spec": {"containers": [{"image": "registry.example/x:1"}]}}
    status = _invalid(simulator.create_raw, pod)
    assert status["message"] == 'Pod "noname" is invalid: spec.containers[0].name: Required value'


def test_bad_label_value_is_invalid(simulator):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "badlabel", "labels": {"app": "no spaces!"}}}
    status = _invalid(simulator.core.create_namespaced_config_map, "default", cm)
    assert status["message"].startswith('ConfigMap "badlabel" is invalid: metadata.labels: Invalid value: '
                                        '"no spaces!": a valid label must be an empty string or consist of '
                                        "alphanumeric characters, '-', '_' or '.'")
    assert status["details"]["causes"][0]["field"] == "metadata.labels"
    assert status["details"]["causes"][0]["reason"] == "FieldValueInvalid"


def test_unsupported_restart_policy_is_invalid(simulator):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sometimes"},
           "spec": {"restartPolicy": "Sometimes", "containers": [{"name": "c", "image": "registry.example/x:1"}]}}
    status = _invalid(simulator.core.create_namespaced_pod, "default", pod)
    assert status["message"] == ('Pod "sometimes" is invalid: spec.restartPolicy: Unsupported value: "Sometimes": '
                                 'supported values: "Always", "OnFailure", "Never"')
    assert status["details"]["causes"][0]["reason"] == "FieldValueNotSupported"


def test_daemonset_selector_must_match_its_template(simulator):
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "mismatch"},
          "spec": {"selector": {"matchLabels": {"app": "a"}},
                   "template": {"metadata": {"labels": {"app": "b"}},
                                "spec": {"containers": [{"name": "c", "image": "registry.example/x:1"}]}}}}
    status = _invalid(simulator.apps.create_namespaced_daemon_set, "default", ds)
    assert status["details"]["kind"] == "DaemonSet" and status["details"]["group"] == "apps"
    causes = status["details"]["causes"]
    assert {"reason": "FieldValueInvalid", "field": "spec.template.metadata.labels",
            "message": 'Invalid value: {"app":"b"}: `selector` does not match template `labels`'} in causes
    assert status["message"].startswith('DaemonSet.apps "mismatch" is invalid: ')
    result = simulator.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(ds), check=False)
    assert result.returncode == 1 and "`selector` does not match template `labels`" in result.stderr


def test_selector_is_immutable(simulator):
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "immutable"},
          "spec": {"selector": {"matchLabels": {"app": "a"}},
                   "template": {"metadata": {"labels": {"app": "a", "other": "x"}},
                                "spec": {"containers": [{"name": "c", "image": "registry.example/x:1"}]}}}}
    simulator.apps.create_namespaced_daemon_set("default", ds)
    patch = {"spec": {"selector": {"matchLabels": {"app": "a", "other": "x"}}}}
    status = _invalid(simulator.apps.patch_namespaced_daemon_set, "immutable", "default", patch)
    assert any(c["field"] == "spec.selector" and "field is immutable" in c["message"]
               for c in status["details"]["causes"])
    simulator.apps.delete_namespaced_daemon_set("immutable", "default")


def test_pod_spec_is_immutable_but_image_is_not(simulator):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "immutable-pod"},
           "spec": {"containers": [{"name": "c", "image": "registry.example/x:1", "command": ["sleep", "infinity"]}]}}
    simulator.core.create_namespaced_pod("default", pod)
    patched = simulator.core.patch_namespaced_pod("immutable-pod", "default", {"spec": {"containers": [
        {"name": "c", "image": "registry.example/x:2"}]}})
    assert patched.spec.containers[0].image == "registry.example/x:2"
    status = _invalid(simulator.core.patch_namespaced_pod, "immutable-pod", "default",
                      {"spec": {"containers": [{"name": "c", "command": ["sleep", "1"]}]}})
    assert status["details"]["causes"][0]["reason"] == "FieldValueForbidden"
    assert "pod updates may not change fields other than" in status["message"]


def test_wrong_type_is_a_bad_request(simulator):
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "wrongtype"},
              "spec": {"replicas": "two", "selector": {"matchLabels": {"app": "a"}},
                       "template": {"metadata": {"labels": {"app": "a"}},
                                    "spec": {"containers": [{"name": "c", "image": "registry.example/x:1"}]}}}}
    with pytest.raises(ApiException) as err:
        simulator.create_raw(deploy)
    assert err.value.status == 400
    status = status_of(err.value)
    assert status["reason"] == "BadRequest"
    assert status["message"].startswith('Deployment in version "v1" cannot be handled as a Deployment: json: '
                                        "cannot unmarshal string into Go struct field")
    assert status["message"].endswith("of type int32")


def test_unknown_fields_with_strict_validation(simulator):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unknown-field"},
           "spec": {"containers": [{"name": "c", "image": "registry.example/x:1", "imagePullPolcy": "Always"}],
                    "nodeSelectr": {"a": "b"}}}
    # kubectl validates on the server by default: fieldValidation=Strict.
    result = simulator.kubectl("create", "-f", "-", stdin=yaml.safe_dump(pod), check=False)
    assert result.returncode == 1
    assert "Error from server (BadRequest)" in result.stderr
    assert 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: ' \
        'unknown field "spec.containers[0].imagePullPolcy", unknown field ' \
        '"spec.nodeSelectr"' in result.stderr
    assert simulator.kubectl("get", "pod", "unknown-field", check=False).returncode == 1
    # Warn: created without the fields, with a warning per field.
    warned = simulator.kubectl("create", "-f", "-", "--validate=warn", stdin=yaml.safe_dump(pod))
    assert 'Warning: unknown field "spec.nodeSelectr"' in warned.stderr
    created = simulator.kubectl_json("get", "pod", "unknown-field")
    assert "nodeSelectr" not in created["spec"]
    # Ignore: no warning.
    pod["metadata"]["name"] = "unknown-ignored"
    ignored = simulator.kubectl("create", "-f", "-", "--validate=false", stdin=yaml.safe_dump(pod))
    assert "Warning" not in ignored.stderr


def test_strict_validation_from_the_dynamic_client(simulator):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "strict-py"}, "data": {}, "extra": 1}
    with pytest.raises(ApiException) as err:
        simulator.create_raw(cm, query_params=[("fieldValidation", "Strict")])
    assert err.value.status == 400
    assert 'unknown field "extra"' in status_of(err.value)["message"]


def test_name_mismatch_and_kind_mismatch_are_bad_requests(simulator):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one"}, "data": {}}
    simulator.core.create_namespaced_config_map("default", cm)
    cm["metadata"]["name"] = "two"
    with pytest.raises(ApiException) as err:
        simulator.core.replace_namespaced_config_map("one", "default", cm)
    assert err.value.status == 400
    with pytest.raises(ApiException) as err:
        simulator.dynamic.request("post", "/api/v1/namespaces/default/configmaps", body={
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wrong-kind"}})
    assert err.value.status == 400
    body = json.loads(err.value.body)
    assert body["kind"] == "Status" and body["reason"] == "BadRequest"


def test_a_pod_update_may_not_take_away_a_toleration(simulator):
    """validateOnlyAddedTolerations: the tolerations DefaultTolerationSeconds admission added stay; a patch
    that replaces the list without them is refused with 422, one that only changes tolerationSeconds is not."""
    from sim_helpers import pod_manifest
    simulator.core.create_namespaced_pod("default", pod_manifest("tolerant", ["sleep", "infinity"]))
    made = simulator.core.read_namespaced_pod("tolerant", "default")
    added = [t.to_dict() for t in made.spec.tolerations]
    assert sorted(t["key"] for t in added) == ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]
    with pytest.raises(ApiException) as err:
        simulator.core.patch_namespaced_pod("tolerant", "default", {"spec": {"tolerations": []}})
    assert err.value.status == 422
    assert "existing toleration can not be modified except its tolerationSeconds" in status_of(err.value)["message"]
    longer = [{"key": t["key"], "operator": t["operator"], "effect": t["effect"], "tolerationSeconds": 600}
              for t in added]
    simulator.core.patch_namespaced_pod("tolerant", "default", {"spec": {"tolerations": longer}})
    assert sorted(t.toleration_seconds for t in simulator.core.read_namespaced_pod("tolerant", "default").spec.tolerations) \
        == [600, 600]
