# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cluster_results_store: read, merge and write of the results ConfigMap against a stand-in of the API's
ConfigMap semantics (create answers 409 AlreadyExists when the name is taken, a replace naming an older
resourceVersion answers 409 Conflict, a namespace that does not exist answers 404), so that the merge under
concurrent writers, the compression of a large fleet's results and every refusal are pinned here; the module's
requests against the real kube-apiserver run in molecule gpu_cluster (site.yml, then report.yml from another
folder)."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpufleet.nvidia.plugins.module_utils import cluster_results as cr
from ansible_collections.gpufleet.nvidia.plugins.module_utils import k8s_client
from ansible_collections.gpufleet.nvidia.plugins.modules.internal import cluster_results_store as store
from ansible_collections.gpufleet.nvidia.tests.unit.plugins.modules.module_runner import run_module

TIME = "2026-12-07T10:00:00Z"
LATER = "2026-12-07T11:00:00Z"
PATH = "/api/v1/namespaces/kube-system/configmaps"
PARAMS = {"namespace": "kube-system", "name": "gpufleet-cluster-results", "device_plugin": None, "smoke_test": None,
          "dra": None, "time": TIME, "conflict_retries": 2}


def status(code, reason, message=""):
    return k8s_client.ApiAnswer(code, reason, json.dumps({"kind": "Status", "status": "Failure", "reason": reason,
                                                          "message": message, "code": code}), {})


def merge_patch(before, patch):
    """RFC 7386, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(before) if isinstance(before, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class ConfigMaps:
    """The API's answers for the ConfigMaps of the namespaces it has; ``before_write`` runs before each write is
    judged (another writer's change between this one's read and write)."""

    def __init__(self, namespaces=("kube-system",), refuse=None):
        self.namespaces = set(namespaces)
        self.objects = {}
        self.version = 100
        self.sent = []
        self.before_write = []
        self.refuse = refuse

    def put_other(self, namespace, name, data=None, binary=None):
        self.version += 1
        self.objects[(namespace, name)] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(self.version)},
            **({"data": data} if data is not None else {}), **({"binaryData": binary} if binary is not None else {})}

    def __call__(self, method, path, query, body, _timeout):
        self.sent.append((method, path, query, copy.deepcopy(body)))
        if self.refuse:
            raise self.refuse
        parts = path.strip("/").split("/")
        namespace = parts[3]
        if namespace not in self.namespaces:
            raise status(404, "NotFound", 'namespaces "%s" not found' % namespace)
        if method == "GET":
            found = self.objects.get((namespace, parts[5]))
            if found is None:
                raise status(404, "NotFound", 'configmaps "%s" not found' % parts[5])
            return copy.deepcopy(found)
        pending, self.before_write = self.before_write, []
        for change in pending:
            change(self)
        name = parts[5] if method == "PATCH" else body["metadata"]["name"]
        current = self.objects.get((namespace, name))
        if method == "POST" and current is not None:
            raise status(409, "AlreadyExists", 'configmaps "%s" already exists' % name)
        if method == "PATCH":
            if current is None:
                raise status(404, "NotFound", 'configmaps "%s" not found' % name)
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise status(409, "Conflict", "the object has been modified; please apply your changes to the latest "
                                              "version and try again")
            if current.get("immutable"):
                raise status(422, "Invalid", 'ConfigMap "%s" is invalid: data: Forbidden: field is immutable when '
                                             '`immutable` is set' % name)
            written = merge_patch(current, body)
        else:
            written = copy.deepcopy(body)
        if query == {"dryRun": "All"}:
            return written
        self.version += 1
        written["metadata"]["resourceVersion"] = str(self.version)
        self.objects[(namespace, name)] = written
        return copy.deepcopy(written)

    def kept(self, name="gpufleet-cluster-results"):
        text, problem = cr.configmap_text(self.objects[("kube-system", name)])
        assert problem is None
        return json.loads(text)


def smoke(host, ok=True, node=None):
    return {"host": host, "node": node or host, "ok": ok, "tested": True,
            "verdict": "passed nvidia-smi" if ok else "failed nvidia-smi", "detail": ["nvidia-smi: saw GPU-%s" % host]}


def run(api, check_mode=False, **params):
    calls = k8s_client.Requests(api, retries=1, delay=0)
    return store.store(calls, dict(PARAMS, **params), check_mode)


def test_the_first_run_creates_the_configmap_and_a_later_one_merges_into_it():
    api = ConfigMaps()
    first = run(api, smoke_test=[smoke("gpu-a"), smoke("gpu-b", ok=False)])
    assert first["changed"] and first["created"] and not first["compressed"]
    assert [sent[0] for sent in api.sent] == ["GET", "POST"]
    created = api.objects[("kube-system", "gpufleet-cluster-results")]
    assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpufleet.nvidia"}
    assert list(created["data"]) == ["results.json"]
    assert api.kept()["hosts"]["gpu-b"]["smoke_test"]["ok"] is False
    # A later run under --limit: gpu-b passes now, gpu-a keeps its earlier row and time.
    api.sent.clear()
    later = run(api, smoke_test=[smoke("gpu-b")], time=LATER)
    assert later["changed"] and not later["created"]
    assert [sent[0] for sent in api.sent] == ["GET", "PATCH"]
    assert api.sent[1][3]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    kept = api.kept()["hosts"]
    assert (kept["gpu-a"]["smoke_test"]["time"], kept["gpu-b"]["smoke_test"]["time"]) == (TIME, LATER)
    assert kept["gpu-b"]["smoke_test"]["ok"] is True
    assert later["diff"]["before"] == {"gpu-b": first["results"]["hosts"]["gpu-b"]}
    assert list(later["diff"]["after"]) == ["gpu-b"]


def test_rows_already_kept_write_nothing():
    api = ConfigMaps()
    run(api, smoke_test=[smoke("gpu-a")])
    api.sent.clear()
    again = run(api, smoke_test=[smoke("gpu-a")])
    assert not again["changed"] and [sent[0] for sent in api.sent] == ["GET"]
    # No verdict (check mode's "not run") changes nothing either.
    assert not run(api, smoke_test=[{"host": "gpu-a", "ok": None, "tested": None, "verdict": "not run"}],
                   time=LATER)["changed"]


def test_another_writer_between_read_and_write_is_read_and_merged_again():
    api = ConfigMaps()
    run(api, smoke_test=[smoke("gpu-a")])

    def other_run(server):
        # A job slice writing gpu-z's verdict between this run's read and its write.
        kept = server.kept()
        kept["hosts"]["gpu-z"] = {"node": "gpu-z", "smoke_test": dict(smoke("gpu-z"), time=TIME)}
        del kept["hosts"]["gpu-z"]["smoke_test"]["host"]
        server.put_other("kube-system", "gpufleet-cluster-results", data={"results.json": json.dumps(kept)})

    api.before_write.append(other_run)
    api.sent.clear()
    result = run(api, smoke_test=[smoke("gpu-b")], time=LATER)
    assert result["changed"] and result["conflicts"] == 1
    assert [sent[0] for sent in api.sent] == ["GET", "PATCH", "GET", "PATCH"]
    assert sorted(api.kept()["hosts"]) == ["gpu-a", "gpu-b", "gpu-z"]


def test_two_first_runs_at_once_both_land():
    api = ConfigMaps()
    api.before_write.append(lambda server: server.put_other(
        "kube-system", "gpufleet-cluster-results", data={"results.json": json.dumps(cr.merged_results(
            None, smoke_test=[smoke("gpu-z")], time=TIME))}))
    result = run(api, smoke_test=[smoke("gpu-a")])
    assert result["conflicts"] == 1 and not result["created"]
    assert [sent[0] for sent in api.sent] == ["GET", "POST", "GET", "PATCH"]
    assert sorted(api.kept()["hosts"]) == ["gpu-a", "gpu-z"]


def test_conflicts_past_the_retries_fail_naming_them():
    api = ConfigMaps()
    run(api, smoke_test=[smoke("gpu-a")])

    def bump(server):
        server.put_other("kube-system", "gpufleet-cluster-results", data=server.objects[
            ("kube-system", "gpufleet-cluster-results")]["data"])
        server.before_write.append(bump)

    api.before_write.append(bump)
    with pytest.raises(store.StoreFailed, match=r"writing ConfigMap kube-system/gpufleet-cluster-results: HTTP 409 "
                                                r"Conflict: .* after 2 conflicting writes"):
        run(api, smoke_test=[smoke("gpu-b")], time=LATER)


def test_check_mode_sends_the_write_as_a_dry_run():
    api = ConfigMaps()
    result = run(api, check_mode=True, smoke_test=[smoke("gpu-a")])
    assert result["changed"] and result["created"]
    assert api.sent[-1][:3] == ("POST", PATH, {"dryRun": "All"})
    assert api.objects == {}


def test_refusals_name_the_configmap_and_what_to_do():
    with pytest.raises(store.StoreFailed, match="namespace gpufleet does not exist .*gpufleet_results_namespace"):
        run(ConfigMaps(), smoke_test=[smoke("gpu-a")], namespace="gpufleet")
    forbidden = status(403, "Forbidden", 'configmaps "gpufleet-cluster-results" is forbidden: User "ci" cannot get')
    with pytest.raises(store.StoreFailed, match=r"reading ConfigMap kube-system/gpufleet-cluster-results: HTTP 403 "
                                                r"Forbidden: .*cannot get \(tried 1 time\)"):
        run(ConfigMaps(refuse=forbidden), smoke_test=[smoke("gpu-a")])


def test_results_it_cannot_read_are_never_replaced():
    # A newer collection's format, or not JSON: another writer's, which an older run must not wipe.
    for data in ({"results.json": json.dumps({"format": 2, "written_by": "gpufleet.nvidia.site", "hosts": {}})},
                 {"results.json": "not json"}):
        api = ConfigMaps()
        api.put_other("kube-system", "gpufleet-cluster-results", data=data)
        with pytest.raises(store.StoreFailed, match=r"ConfigMap kube-system/gpufleet-cluster-results holds what this "
                                                    r"collection cannot read: .*kubectl -n kube-system delete configmap "
                                                    r"gpufleet-cluster-results"):
            run(api, smoke_test=[smoke("gpu-a")])
        assert [sent[0] for sent in api.sent] == ["GET"]


def test_the_configmaps_other_keys_labels_and_owners_are_kept():
    api = ConfigMaps()
    api.put_other("kube-system", "gpufleet-cluster-results", data={"notes": "ours", "results.json": json.dumps(
        cr.merged_results(None, smoke_test=[smoke("gpu-z")], time=TIME))})
    kept = api.objects[("kube-system", "gpufleet-cluster-results")]
    kept["metadata"].update(labels={"team": "gpu"}, ownerReferences=[{"kind": "Thing", "name": "x"}])
    run(api, smoke_test=[smoke("gpu-a")], time=LATER)
    now = api.objects[("kube-system", "gpufleet-cluster-results")]
    assert now["data"]["notes"] == "ours" and now["metadata"]["ownerReferences"] == [{"kind": "Thing", "name": "x"}]
    assert now["metadata"]["labels"] == {"team": "gpu", "app.kubernetes.io/managed-by": "gpufleet.nvidia"}
    assert sorted(api.kept()["hosts"]) == ["gpu-a", "gpu-z"]


def test_a_configmap_deleted_between_read_and_write_is_created_again():
    api = ConfigMaps()
    run(api, smoke_test=[smoke("gpu-a")])
    api.before_write.append(lambda server: server.objects.clear())
    api.sent.clear()
    result = run(api, smoke_test=[smoke("gpu-b")], time=LATER)
    assert [sent[0] for sent in api.sent] == ["GET", "PATCH", "GET", "POST"]
    assert result["created"] and list(api.kept()["hosts"]) == ["gpu-b"]


def test_an_immutable_configmap_is_named_with_what_to_do():
    api = ConfigMaps()
    run(api, smoke_test=[smoke("gpu-a")])
    api.objects[("kube-system", "gpufleet-cluster-results")]["immutable"] = True
    with pytest.raises(store.StoreFailed, match=r"HTTP 422 Invalid: .*immutable.* \(an immutable ConfigMap cannot be "
                                                r"written: delete it, and the next run creates it\)"):
        run(api, smoke_test=[smoke("gpu-b")], time=LATER)


def test_results_grown_past_the_text_limit_move_to_binary_data():
    api = ConfigMaps()
    run(api, smoke_test=fleet_rows(100))
    assert list(api.objects[("kube-system", "gpufleet-cluster-results")]["data"]) == ["results.json"]
    run(api, smoke_test=fleet_rows(3000), time=LATER)
    now = api.objects[("kube-system", "gpufleet-cluster-results")]
    assert now.get("data", {}) == {} and list(now["binaryData"]) == ["results.json.gz"]
    assert len(api.kept()["hosts"]) == 3000


def fleet_rows(count):
    """A smoke row per host of a large fleet, as alike as a real fleet's are."""
    return [dict(smoke("gpu-%04d.fleet.example.internal" % index, node="gpu-%04d" % index),
                 gpus="8 x NVIDIA H100 80GB HBM3", driver="580.95.05", cuda="13.0", allocatable=8,
                 detail=["nvidia-smi: saw GPU-%08x-1111-2222-3333-444455556666" % index])
            for index in range(count)]


def test_a_large_fleet_is_kept_compressed_and_read_back_by_the_report():
    api = ConfigMaps()
    result = run(api, smoke_test=fleet_rows(3000))
    assert result["compressed"] and result["size"] < cr.CONFIGMAP_LIMIT // 4
    kept = api.objects[("kube-system", "gpufleet-cluster-results")]
    assert "data" not in kept and list(kept["binaryData"]) == ["results.json.gz"]
    text, problem = cr.configmap_text(kept)
    assert problem is None and len(cr.results_hosts(text)[0]) == 3000
    # A fleet of 1,000 hosts stays readable text.
    small = ConfigMaps()
    assert not run(small, smoke_test=fleet_rows(1000))["compressed"]
    assert len(small.kept()["hosts"]) == 1000


def test_the_module_refuses_bad_rows_and_settings_before_any_request(capsys):
    result = run_module(store, {"namespace": "kube-system", "name": "gpufleet-cluster-results",
                                "smoke_test": [smoke("gpu-a")]}, capsys)
    assert result["failed"] and result["requests"] == 0
    assert "give the time of the rows" in result["msg"]
    result = run_module(store, {"namespace": "", "name": "x", "retries": -1}, capsys)
    assert result["failed"] and "retries is -1" in result["msg"] and "namespace is ''" in result["msg"]
    result = run_module(store, {"namespace": "kube-system", "name": "x", "smoke_test": [{"ok": True}],
                                "time": TIME}, capsys)
    assert result["failed"] and "must be a list of rows with a 'host' (gpu_smoke_test_report)" in result["msg"]
