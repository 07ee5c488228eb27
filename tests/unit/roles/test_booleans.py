# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every boolean setting means what the user wrote, however it arrives.

`-e name=false` hands the roles the text "false": true in a Jinja `if` (a non-empty string) and an
error in a `when:` on ansible-core 2.19 and newer. Every use of a boolean setting (a role's
argument spec option of type bool, a playbook's documented boolean) in a condition, an expression
or a template must go through `| bool`; values that are not booleans are refused before any change
(gpufleet.nvidia.internal.boolean_errors, checked first by each role and by the playbooks).
"""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# The playbooks' own boolean settings (their headers document them).
PLAYBOOK_BOOLEANS = ("gpufleet_health_labels", "gpufleet_health_taint")
# Keys whose value is a bare Jinja expression.
CONDITION_KEYS = ("when", "that", "changed_when", "failed_when", "until")
# Filters that take settings to check them, strictly, and name the ones that are not booleans.
CHECKING_FILTERS = ("gpufleet.nvidia.internal.boolean_errors", "gpufleet.nvidia.internal.node_health_settings")
# Settings handed whole to a filter that reads them strictly (node_health_plan reads the gating's settings
# through node_health_settings, which takes the texts -e gives).
READ_BY_FILTER = {"playbooks/tasks/node_health.yml": ("gpufleet_health_labels", "gpufleet_health_taint")}


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that reads Ansible's tags (!unsafe, !vault) as plain values."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


def role_booleans():
    names = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))):
        with open(path) as handle:
            specs = yaml.safe_load(handle)["argument_specs"]
        for spec in specs.values():
            for name, option in (spec.get("options") or {}).items():
                if option.get("type") == "bool":
                    names[name] = path
    return names


BOOLEANS = sorted(set(role_booleans()) | set(PLAYBOOK_BOOLEANS))


def checked_files():
    patterns = ("roles/*/tasks/*.yml", "roles/*/vars/*.yml", "roles/*/handlers/*.yml", "roles/*/templates/*",
                "playbooks/*.yml", "playbooks/tasks/*.yml", "playbooks/templates/*")
    return sorted(path for pattern in patterns for path in glob.glob(os.path.join(ROOT, pattern)))


JINJA = re.compile(r"{{(.*?)}}|{%-?(.*?)-?%}", re.S)
STRING = re.compile(r"'[^']*'|\"[^\"]*\"")


def expressions(text):
    """The Jinja expressions of a templated string."""
    return [first or second for first, second in JINJA.findall(text)]


def yaml_expressions(value, key=None):
    """(expression) for every Jinja expression in a YAML document: a condition key's whole value,
    and whatever is between {{ }} or {% %} anywhere else."""
    if isinstance(value, dict):
        for child_key, child in value.items():
            yield from yaml_expressions(child, child_key)
    elif isinstance(value, list):
        for child in value:
            yield from yaml_expressions(child, key)
    elif isinstance(value, str):
        if key in CONDITION_KEYS and "{{" not in value:
            yield value
        else:
            yield from expressions(value)


def _subscript_to_attribute(match):
    return "." + match.group(1)


# What may follow a boolean setting: defaults, then `| bool`; or a test that reads no truth.
CONVERTED = re.compile(r"""\s*\)?(\s*\|\s*default\((?:[^()]|\([^()]*\))*\)\s*\)?)*\s*\|\s*bool\b""")
TESTED = re.compile(r"\s+is\s+(not\s+)?(defined|undefined|none)\b")


def unconverted(expression, name):
    """The places where a boolean setting is read for its truth without `| bool`."""
    if any(check in expression for check in CHECKING_FILTERS):
        return []
    # hostvars[host]['name'] and map(attribute='name') | map('bool') read the setting too.
    text = re.sub(r"\[\s*['\"](\w+)['\"]\s*\]", _subscript_to_attribute, expression)
    text = re.sub(r"map\(attribute=['\"](\w+)['\"](?:,[^)]*)?\)\s*\|\s*map\(['\"]bool['\"]\)", "", text)
    text = re.sub(r"(select|reject)attr\(['\"](\w+)['\"]\s*,\s*['\"](defined|undefined|none)['\"]\)", "", text)
    text = re.sub(r"(select|reject)attr\(['\"](\w+)['\"]", r"\1attr(\2", text)
    text = re.sub(r"attribute=['\"](\w+)['\"]", r"attribute=\1", text)
    text = STRING.sub("''", text)
    found = []
    for match in re.finditer(r"(?<![\w])%s(?![\w])" % re.escape(name), text):
        rest = text[match.end():]
        if CONVERTED.match(rest) or TESTED.match(rest):
            continue
        found.append(text[max(0, match.start() - 40):match.end() + 40].strip())
    return found


def uses_without_bool(path):
    with open(path) as handle:
        text = handle.read()
    if path.endswith(".yml"):
        found = list(yaml_expressions(yaml.load(text, Loader=_Loader)))
    else:
        found = expressions(text)
    allowed = READ_BY_FILTER.get(os.path.relpath(path, ROOT), ())
    return [(name, place) for expression in found for name in BOOLEANS if name not in allowed
            for place in unconverted(expression, name)]


def test_the_walk_finds_the_booleans():
    assert "gpu_kubelet_skip_when_converged" in BOOLEANS and "gpu_smoke_test_skip_busy" in BOOLEANS
    assert len(checked_files()) > 40


@pytest.mark.parametrize("expression, name, bad", [
    ("gpu_x_flag", "gpu_x_flag", True),
    ("not gpu_x_flag or y", "gpu_x_flag", True),
    ("gpu_x_flag | bool", "gpu_x_flag", False),
    ("not (gpu_x_flag | default(false) | bool)", "gpu_x_flag", False),
    ("gpu_x_flag | default(omit, true) | bool", "gpu_x_flag", False),
    ("hostvars[h]['gpu_x_flag'] | default(true)", "gpu_x_flag", True),
    ("hostvars[h]['gpu_x_flag'] | default(true) | bool", "gpu_x_flag", False),
    ("hosts | rejectattr('gpu_x_flag')", "gpu_x_flag", True),
    ("hosts | rejectattr('gpu_x_flag', 'defined')", "gpu_x_flag", False),
    ("hosts | map(attribute='gpu_x_flag', default=false) | map('bool')", "gpu_x_flag", False),
    ("'set gpu_x_flag to true'", "gpu_x_flag", False),
    ("gpu_x_flag is defined", "gpu_x_flag", False),
    ("gpu_x_flag_other", "gpu_x_flag", False),
])
def test_the_check_tells_a_converted_use(expression, name, bad):
    assert bool(unconverted(expression, name)) is bad


@pytest.mark.parametrize("path", checked_files(), ids=lambda path: os.path.relpath(path, ROOT))
def test_every_boolean_setting_is_read_through_bool(path):
    assert uses_without_bool(path) == []


# ---- The checks before any change, and the four cases of issue 47, templated by this ansible-core ----

from ansible_collections.gpufleet.nvidia.tests.unit.templating import (  # noqa: E402 pylint: disable=wrong-import-position
    DataLoader, Templar, evaluate_conditional, load_yaml, trust_as_template)

LOADER = DataLoader()
ROLES_WITH_BOOLEANS = sorted({os.path.basename(os.path.dirname(os.path.dirname(path))) for path in role_booleans().values()})


def role_variables(role):
    variables = {}
    for part in ("defaults", "vars"):
        path = os.path.join(ROOT, "roles", role, part, "main.yml")
        if os.path.exists(path):
            variables.update(load_yaml(LOADER, path) or {})
    return variables


def all_tasks(tasks):
    for entry in tasks or []:
        yield entry
        for part in ("block", "rescue", "always"):
            yield from all_tasks(entry.get(part))


def find_task(path, name):
    found = [t for t in all_tasks(load_yaml(LOADER, os.path.join(ROOT, path))) if t.get("name") == name]
    assert len(found) == 1, "no single task named %r in %s" % (name, path)
    return found[0]


def check_outcome(check, variables):
    """(passes, message) of a boolean check task, templated with these variables."""
    templar = Templar(loader=LOADER, variables=dict(variables, **check["vars"]))
    passes = evaluate_conditional(templar, check["ansible.builtin.assert"]["that"])
    return passes, templar.template(check["ansible.builtin.assert"]["fail_msg"])


@pytest.mark.parametrize("role", ROLES_WITH_BOOLEANS)
def test_each_role_checks_its_booleans_first(role):
    tasks = load_yaml(LOADER, os.path.join(ROOT, "roles", role, "tasks", "main.yml"))
    check = tasks[0]
    assert check["name"] == "Check the boolean settings before any change"
    assert check.get("tags", ["always"])[-1] == "always" if role != "gpu_mig" else "tags" not in check
    names = [name for name, path in role_booleans().items() if "/roles/%s/" % role in path]
    variables = role_variables(role)
    assert check_outcome(check, variables)[0]
    # The texts -e gives are booleans.
    assert check_outcome(check, dict(variables, **{name: "false" for name in names}))[0]
    assert check_outcome(check, dict(variables, **{name: "True" for name in names}))[0]
    for name in names:
        for value, shown in (("maybe", '"maybe"'), ("y", '"y"'), (None, "null")):
            passes, message = check_outcome(check, dict(variables, **{name: value}))
            assert not passes
            assert message == ("Nothing was changed: %s is %s, not a boolean; give true or false (yes/no, on/off, 1/0)"
                               % (name, shown))


PLAYBOOK_ROLES = {
    "site.yml": ["gpu_driver", "gpu_mig", "gpu_container_toolkit", "gpu_kubelet", "gpu_dra_driver", "gpu_device_plugin",
                 "gpu_smoke_test"],
    "upgrade_driver.yml": ["gpu_driver", "gpu_smoke_test"],
    "mig.yml": ["gpu_mig", "gpu_device_plugin", "gpu_smoke_test"],
    "gpu_path.yml": ["gpu_container_toolkit", "gpu_dra_driver", "gpu_smoke_test"],
}


def roles_run_by(playbook):
    """The roles a playbook includes, itself or through its task files."""
    texts = [open(os.path.join(ROOT, "playbooks", playbook)).read()]
    texts += [open(path).read() for path in glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml"))
              if os.path.basename(path) in texts[0]]
    return sorted({name for text in texts for name in re.findall(r"name: gpufleet\.nvidia\.(gpu_[a-z_]+)", text)})


@pytest.mark.parametrize("playbook", sorted(PLAYBOOK_ROLES))
def test_playbooks_check_the_roles_booleans_before_any_change(playbook):
    plays = load_yaml(LOADER, os.path.join(ROOT, "playbooks", playbook))
    first = plays[0]["tasks"]
    (index,) = [i for i, t in enumerate(first) if t.get("ansible.builtin.import_tasks") == "tasks/boolean_checks.yml"]
    # Only the rolling playbooks' read-only checks come before it.
    assert [t.get("ansible.builtin.import_tasks") for t in first[:index]] in ([], ["tasks/rolling_checks.yml"])
    roles = first[index]["vars"]["__gpufleet_boolean_roles"]
    assert roles == PLAYBOOK_ROLES[playbook]
    assert set(roles_run_by(playbook)) <= set(roles)
    # What the check makes of what -e gives, on this ansible-core; a setting not given is left to its role.
    (check,) = load_yaml(LOADER, os.path.join(ROOT, "playbooks", "tasks", "boolean_checks.yml"))
    given = {"__gpufleet_boolean_roles": roles, "gpu_smoke_test_skip_busy": "false", "gpu_driver_require_gpu": "yes"}
    assert check_outcome(check, given)[0]
    passes, message = check_outcome(check, dict(given, gpu_smoke_test_skip_busy="maybe"))
    assert not passes and message == ('Nothing was changed: gpu_smoke_test_skip_busy is "maybe", not a boolean; '
                                      'give true or false (yes/no, on/off, 1/0)')


def template_with(role, task, variables, expression):
    templar = Templar(loader=LOADER, variables=dict(role_variables(role), **dict(task.get("vars", {}), **variables)))
    return templar.template(trust_as_template(expression))


@pytest.mark.parametrize("given, recorded, compared", [
    ("false", False, False), ("true", True, True), (False, False, False), (True, True, True)])
def test_gpu_kubelet_skip_when_converged_given_as_text(given, recorded, compared):
    # -e gpu_kubelet_skip_when_converged=false: a string in a condition is an error on 2.19 and newer, raised
    # after the drop-in was written and kubelet restarted.
    record = find_task("roles/gpu_kubelet/tasks/converge.yml", "Record the converged state for the next run")
    variables = {"gpu_kubelet_skip_when_converged": given, "__gpu_kubelet_converged": {"changed": False},
                 "ansible_skip_tags": []}
    templar = Templar(loader=LOADER, variables=variables)
    assert all(evaluate_conditional(templar, c) for c in record["when"]) is recorded
    compare = find_task("roles/gpu_kubelet/tasks/main.yml", "Compare the node with what the role's last complete run left")
    assert templar.template(compare["gpufleet.nvidia.internal.converged"]["compare"]) is compared


@pytest.mark.parametrize("given, passes", [("true", True), ("false", False), (True, True), ("no", False)])
def test_gpu_driver_allow_branch_change_given_as_text(given, passes):
    # The role's own refusal says: set gpu_driver_allow_branch_change=true.
    check = find_task("roles/gpu_driver/tasks/preflight.yml", "Check no branch change happens unasked")
    templar = Templar(loader=LOADER, variables={"gpu_driver_allow_branch_change": given,
                                                "__gpu_driver_installed_branches": ["535"], "__gpu_driver_branch": "550"})
    assert evaluate_conditional(templar, check["ansible.builtin.assert"]["that"]) is passes


@pytest.mark.parametrize("given, forced", [("false", False), ("true", True), (False, False), ("0", False)])
def test_gpu_device_plugin_force_conflicts_given_as_text(given, forced):
    # "false" is a non-empty text: read as is, it forced.
    conflict = {"object": "DaemonSet nvidia-device-plugin/x", "message": "conflict with helm", "item": {"kind": "DaemonSet"}}
    writes = {"failed": [], "conflicts": [conflict], "done": [], "forced": []}
    variables = {"gpu_device_plugin_force_conflicts": given, "__gpu_device_plugin_writes": writes,
                 "__gpu_device_plugin_answered": {"conflicts": [conflict]}}
    apply = find_task("roles/gpu_device_plugin/tasks/apply.yml", "Apply the DaemonSet")
    templar = Templar(loader=LOADER, variables=variables)
    assert evaluate_conditional(templar, apply["when"]) is forced
    fail = find_task("roles/gpu_device_plugin/tasks/apply.yml", "Fail naming what could not be applied, and what was")
    kept = template_with("gpu_device_plugin", fail, variables, "{{ __gpu_device_plugin_conflicts }}")
    assert kept == ([] if forced else [conflict])
    take = find_task("roles/gpu_device_plugin/tasks/write_object.yml",
                     "Take over the fields another manager holds, as gpu_device_plugin_force_conflicts asks")
    assert evaluate_conditional(templar, take["when"]) is forced
    dra = find_task("roles/gpu_dra_driver/tasks/apply.yml", "Fail naming what could not be applied, and what was")
    dra_variables = {"gpu_dra_driver_force_conflicts": given, "__gpu_device_plugin_writes": writes}
    assert template_with("gpu_dra_driver", dra, dra_variables, "{{ __conflicts }}") == ([] if forced else [conflict])


@pytest.mark.parametrize("given, fails", [("false", True), ("true", False), (False, True), ("off", True)])
def test_gpu_smoke_test_skip_busy_given_as_text(given, fails):
    # The README: with gpu_smoke_test_skip_busy false, a node whose GPUs are all in use fails.
    task = find_task("roles/gpu_smoke_test/tasks/report.yml", "Fail on the nodes that did not pass")
    busy = {"node": "gpu-a", "ok": True, "tested": False, "why": "busy", "detail": ["every GPU is in use"]}
    variables = {"gpu_smoke_test_skip_busy": given, "gpu_smoke_test_report": [busy]}
    failed = template_with("gpu_smoke_test", task, variables, "{{ __gpu_smoke_test_failed }}")
    assert (failed == [busy]) is fails
