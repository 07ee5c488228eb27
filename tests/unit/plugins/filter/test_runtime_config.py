# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_container_toolkit's runtime files, on real containerd captures (fixtures/containerd/SOURCES.md)."""

from __future__ import annotations

import copy
import datetime
import math
import os
import tomllib

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.nvidia.plugins.filter import runtime_config as public
from ansible_collections.gpufleet.nvidia.plugins.filter.internal import runtime_config as rc

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "containerd")
FILTERS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "filter")
INTERNAL_FILTERS = os.path.join(FILTERS, "internal")
CRI = "io.containerd.grpc.v1.cri"
BINARY = "/usr/bin/nvidia-container-runtime"
RUNC_TYPE = "io.containerd.runc.v2"
DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def settings(**more):
    """The role's __gpu_container_toolkit_settings with its defaults."""
    values = {"name": "nvidia", "binary": BINARY, "cgroup_driver": "auto", "default": False, "cdi": False,
              "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]}
    values.update(more)
    return values


# What the role ran with for each capture: Debian 13 with default runtime and CDI.
CAPTURES = {"debian12": settings(), "debian13": settings(default=True, cdi=True)}
VERSION_LINES = fixture("versions.txt").splitlines()


def baseline(release):
    return fixture(release + "-dump-baseline.toml")


def with_dropin(release):
    return fixture(release + "-dump-with-dropin.toml")


def cri_of(document):
    return document["plugins"][CRI]


def edited(text, change):
    """A dump with one change, written back with to_toml (a tampered capture)."""
    document = tomllib.loads(text)
    change(document)
    return rc.to_toml(document)


def lines_added(before, after):
    """(lines only in after, every line of before kept in order): after is before plus some lines."""
    old, new = before.split("\n"), after.split("\n")
    kept = [line for line in new if line in old]
    return [line for line in new if line not in old], kept == old


# --------------------------------------------------------------------------
# to_toml / from_toml
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(name for name in os.listdir(FIXTURES) if name.endswith(".toml")))
def test_real_documents_round_trip(name):
    text = fixture(name)
    written = rc.to_toml(rc.from_toml(text))
    assert tomllib.loads(written) == tomllib.loads(text)
    assert rc.to_toml(tomllib.loads(written)) == written  # stable


def test_keys_with_dots_stay_one_key():
    written = rc.to_toml({"plugins": {CRI: {"sandbox_image": "registry.example/pause:3.9"}}})
    assert written == '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.example/pause:3.9"\n'
    assert list(tomllib.loads(written)["plugins"]) == [CRI]


def test_the_real_timeouts_table_keeps_quoted_keys():
    written = rc.to_toml(rc.from_toml(baseline("debian12")))
    assert '  "io.containerd.timeout.shim.load" = "5s"\n' in written
    assert tomllib.loads(written)["timeouts"]["io.containerd.timeout.shim.load"] == "5s"


@pytest.mark.parametrize("key,written", [
    ("SystemdCgroup", "SystemdCgroup"),
    ("max_conf_num", "max_conf_num"),
    ("cni-conf", "cni-conf"),
    ("a b", '"a b"'),
    ("", '""'),
    ("ключ", '"ключ"'),
    ('say "x"', '"say \\"x\\""'),
    ("1.5", '"1.5"'),
])
def test_keys(key, written):
    text = rc.to_toml({key: 1})
    assert text == "%s = 1\n" % written
    assert tomllib.loads(text) == {key: 1}


@pytest.mark.parametrize("value,written", [
    ('say "hi"', '"say \\"hi\\""'),
    ("C:\\Program Files\\x", '"C:\\\\Program Files\\\\x"'),
    ("line\nbreak", '"line\\u000abreak"'),
    ("tab\tcr\r", '"tab\\u0009cr\\u000d"'),
    ("\x00\x1b\x1f\x7f", '"\\u0000\\u001b\\u001f\\u007f"'),
    ("naïve – 日本 🚀", '"naïve – 日本 🚀"'),
    ("a\u2028b\x85", '"a\u2028b\x85"'),
    ("", '""'),
    ("'single'", '"\'single\'"'),
])
def test_string_escaping(value, written):
    text = rc.to_toml({"s": value})
    assert text == "s = %s\n" % written
    assert tomllib.loads(text) == {"s": value}


@pytest.mark.parametrize("value,written", [
    (True, "true"),
    (False, "false"),
    (0, "0"),
    (-3, "-3"),
    (16777216, "16777216"),
    (0.02, "0.02"),
    (-1e-05, "-1e-05"),
    (1e+20, "1e+20"),
    (float("inf"), "inf"),
    (float("-inf"), "-inf"),
    ([], "[]"),
    (["linux/amd64"], '["linux/amd64"]'),
    (("a", 1, True), '["a", 1, true]'),
    ([[1, 2], ["x"]], '[[1, 2], ["x"]]'),
    ([{"differ": "", "platform": "linux/amd64"}], '[{differ = "", platform = "linux/amd64"}]'),
    ([{"a": {"b.c": [1]}}], '[{a = {"b.c" = [1]}}]'),
])
def test_values(value, written):
    text = rc.to_toml({"v": value})
    assert text == "v = %s\n" % written
    expected = list(value) if isinstance(value, tuple) else value
    assert tomllib.loads(text) == {"v": expected}


def test_nan():
    assert math.isnan(tomllib.loads(rc.to_toml({"v": float("nan")}))["v"])


def test_plain_values_come_before_tables():
    data = {"table": {"x": 1}, "late": 2, "nested": {"inner": {"y": "z"}, "after": False}}
    text = rc.to_toml(data)
    assert text == 'late = 2\n\n[table]\n  x = 1\n\n[nested]\n  after = false\n\n[nested.inner]\n  y = "z"\n'
    assert tomllib.loads(text) == data


def test_tables_of_tables_need_no_header_and_empty_tables_keep_theirs():
    data = {"plugins": {"a": {"x": 1}, "empty": {}}, "proxy_plugins": {}}
    text = rc.to_toml(data)
    assert "[plugins]" not in text.split("\n")
    assert "[plugins.empty]" in text.split("\n")
    assert "[proxy_plugins]" in text.split("\n")
    assert tomllib.loads(text) == data


def test_empty_document():
    assert rc.to_toml({}) == "\n"
    assert tomllib.loads(rc.to_toml({})) == {}


@pytest.mark.parametrize("data,path,type_name", [
    ({"plugins": {CRI: {"sandbox_image": None}}}, "plugins.io.containerd.grpc.v1.cri.sandbox_image", "NoneType"),
    ({"runtimes": {"nvidia": {"args": {"--debug"}}}}, "runtimes.nvidia.args", "set"),
    ({"when": datetime.date(2026, 1, 2)}, "when", "date"),
    ({"t": {"x": [1, None]}}, "t.x", "NoneType"),
    ({"t": {"x": [{"inline": object()}]}}, "t.x.inline", "object"),
])
def test_unsupported_values_name_their_path(data, path, type_name):
    with pytest.raises(AnsibleFilterError) as caught:
        rc.to_toml(data)
    assert "to_toml: %s has a value of type %s" % (path, type_name) in str(caught.value)


@pytest.mark.parametrize("data", [None, [], "version = 2"])
def test_to_toml_wants_a_dict(data):
    with pytest.raises(AnsibleFilterError) as caught:
        rc.to_toml(data)
    assert "expects a dict" in str(caught.value)


def test_from_toml():
    assert rc.from_toml(fixture("debian12-user.toml")) == {
        "version": 2,
        "plugins": {CRI: {"sandbox_image": "registry.example/pause:3.9",
                          "containerd": {"runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                                               "options": {"SystemdCgroup": True}}}}}}}
    assert rc.from_toml("") == {}
    assert rc.from_toml(None) == {}


def test_from_toml_errors_say_where():
    with pytest.raises(AnsibleFilterError) as caught:
        rc.from_toml("version = 2\n[plugins\n")
    assert "not valid TOML" in str(caught.value)
    assert "line 2" in str(caught.value)


# --------------------------------------------------------------------------
# containerd --version
# --------------------------------------------------------------------------

@pytest.mark.parametrize("text,schema", [
    (VERSION_LINES[0], 2),                                                    # Debian 12, 1.6.20
    (VERSION_LINES[1], 2),                                                    # Debian 13, 1.7.24
    (VERSION_LINES[1] + "\n", 2),
    ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", 2),
    ("containerd github.com/containerd/containerd v1.6.36 88c3d9bc5b5a193f40b7c14fa996d23532d6f956", 2),
    ("containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376", 3),
    ("containerd containerd.io v2.0.5 fb4c30d4ede3531652d86197bf3fc9515e5276d9", 3),
    ("containerd github.com/containerd/containerd/v2 v2.2.7 0123456789abcdef", 3),
    # containerd 2.3 dumps config version 4 (version/version.go ConfigVersion), same plugin names.
    ("containerd github.com/containerd/containerd/v2 v2.3.0 0123456789abcdef", 4),
])
def test_containerd_schema(text, schema):
    assert rc.containerd_schema(text) == schema


@pytest.mark.parametrize("text,words", [
    ("", "cannot read a containerd version"),
    (None, "cannot read a containerd version"),
    ("bash: containerd: command not found", "cannot read a containerd version"),
    ("containerd github.com/containerd/containerd/v2", "cannot read a containerd version"),
    ("containerd version 1.7", "cannot read a containerd version"),
    ("containerd github.com/containerd/containerd v3.0.0 abcdef", "containerd 3.0.0 is not supported"),
    ("containerd github.com/containerd/containerd 0.2.9", "containerd 0.2.9 is not supported"),
])
def test_containerd_schema_refuses_garbage(text, words):
    with pytest.raises(AnsibleFilterError) as caught:
        rc.containerd_schema(text)
    assert words in str(caught.value)


# --------------------------------------------------------------------------
# config.toml imports
# --------------------------------------------------------------------------

MULTI_LINE = """\
# site configuration
version = 2
imports = [
  "/etc/containerd/user.toml",  # the user's
  "/etc/containerd/site/*.toml",
]
oom_score = -999

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"
"""


@pytest.mark.parametrize("text,imports", [
    (fixture("debian12-config.toml"), ["/etc/containerd/user.toml"]),
    (fixture("debian13-config.toml"), []),
    (baseline("debian12"), ["/tmp/base.toml", "/etc/containerd/user.toml"]),
    (with_dropin("debian13"), ["/etc/containerd/config.toml", DROPIN]),
    (MULTI_LINE, ["/etc/containerd/user.toml", "/etc/containerd/site/*.toml"]),
    ("", []),
    (None, []),
])
def test_toml_imports(text, imports):
    assert rc.toml_imports(text) == imports


@pytest.mark.parametrize("text,words", [
    ('imports = "/etc/containerd/user.toml"\n', "imports must be a list of paths"),
    ("imports = [1]\n", "imports must be a list of paths"),
    ("version = 2\nimports = [\n", "config.toml is not valid TOML"),
])
def test_toml_imports_errors(text, words):
    with pytest.raises(AnsibleFilterError) as caught:
        rc.toml_imports(text)
    assert words in str(caught.value)


def test_import_added_after_the_version_line_of_debian13():
    text = fixture("debian13-config.toml")
    result = rc.containerd_add_import(text, DROPIN, 2)
    lines = text.split("\n")
    assert result.split("\n") == lines[:1] + ['imports = ["%s"]' % DROPIN] + lines[1:]
    assert tomllib.loads(result) == dict(tomllib.loads(text), imports=[DROPIN])


def test_import_appended_to_the_imports_of_debian12():
    text = fixture("debian12-config.toml")
    result = rc.containerd_add_import(text, DROPIN, 2)
    added, kept = lines_added(text, result)
    assert added == ['imports = ["/etc/containerd/user.toml", "%s"]' % DROPIN]
    assert [line for line in text.split("\n") if not line.startswith("imports")] == \
           [line for line in result.split("\n") if not line.startswith("imports")]
    assert result.split("\n")[1] == added[0]  # in place of the old assignment
    assert tomllib.loads(result)["imports"] == ["/etc/containerd/user.toml", DROPIN]


@pytest.mark.parametrize("release", ["debian12", "debian13"])
def test_adding_twice_changes_nothing(release):
    once = rc.containerd_add_import(fixture(release + "-config.toml"), DROPIN, 2)
    assert rc.containerd_add_import(once, DROPIN, 2) == once


@pytest.mark.parametrize("entry", [
    DROPIN,
    "/etc/containerd/conf.d/*.toml",
    "/etc/containerd/conf.d/99-*",
    "/etc/containerd/conf.d/??-nvidia.toml",
    "/etc/containerd/*/99-nvidia.toml",
    "/etc/containerd/conf.d/[0-9]*.toml",
])
def test_an_entry_that_covers_the_drop_in_leaves_the_text_alone(entry):
    text = fixture("debian12-config.toml").replace('"/etc/containerd/user.toml"', '"/etc/containerd/user.toml", "%s"' % entry)
    assert rc.containerd_add_import(text, DROPIN, 2) == text


@pytest.mark.parametrize("entry", [
    "/etc/containerd/*.toml",        # containerd's filepath.Glob: * never crosses a /
    "/etc/containerd/*",
    "/etc/*/99-nvidia.toml",
    "/etc/containerd/conf.d/*.conf",
    "conf.d/99-nvidia.toml",         # relative entries are compared as written
])
def test_a_glob_that_does_not_cover_the_drop_in_gets_it_added(entry):
    text = 'version = 2\nimports = ["%s"]\n' % entry
    assert rc.toml_imports(rc.containerd_add_import(text, DROPIN, 2)) == [entry, DROPIN]


def test_multi_line_imports_become_one_line_the_rest_kept():
    result = rc.containerd_add_import(MULTI_LINE, DROPIN, 2)
    lines = MULTI_LINE.split("\n")
    assert result.split("\n") == lines[:2] + ['imports = ["/etc/containerd/user.toml", "/etc/containerd/site/*.toml", "%s"]' % DROPIN] + lines[6:]
    parsed = tomllib.loads(result)
    assert parsed["oom_score"] == -999
    assert cri_of(parsed)["sandbox_image"] == "registry.example/pause:3.9"


def test_multi_line_imports_removed():
    result = rc.containerd_set_imports(MULTI_LINE, [], 2)
    lines = MULTI_LINE.split("\n")
    assert result.split("\n") == lines[:2] + lines[6:]
    assert "imports" not in tomllib.loads(result)


@pytest.mark.parametrize("text,line", [
    ("# no version here\noom_score = 0\n", 0),
    ("# containerd\n\nversion = 2\nroot = \"/var/lib/containerd\"\n", 3),
    ('oom_score = 0\n[plugins."io.containerd.internal.v1.opt"]\n  version = 3\n', 0),  # a table's version is not it
    ("version = 2", 1),                                                                 # no final newline
])
def test_where_the_imports_go(text, line):
    result = rc.containerd_add_import(text, DROPIN, 2)
    assert result.split("\n")[line] == 'imports = ["%s"]' % DROPIN
    added, kept = lines_added(text.rstrip("\n"), result.rstrip("\n"))
    assert (added, kept) == (['imports = ["%s"]' % DROPIN], True)
    assert result.endswith("\n")


@pytest.mark.parametrize("text", ["", None, "\n", "   \n"])
@pytest.mark.parametrize("schema", [2, 3])
def test_no_config_toml(text, schema):
    assert rc.containerd_add_import(text, DROPIN, schema) == 'version = %d\nimports = ["%s"]\n' % (schema, DROPIN)
    assert rc.containerd_set_imports(text, [], schema) == "version = %d\n" % schema
    assert rc.containerd_set_imports(text, ["/a.toml"], schema) == 'version = %d\nimports = ["/a.toml"]\n' % schema


def test_set_imports_for_the_baseline_scratch_file():
    text = fixture("debian12-config.toml")
    assert rc.containerd_set_imports(text, ["/etc/containerd/user.toml"], 2) == text
    with_ours = rc.containerd_add_import(text, DROPIN, 2)
    assert rc.containerd_set_imports(with_ours, ["/etc/containerd/user.toml"], 2) == text


def test_set_imports_empty_removes_the_line():
    text = fixture("debian12-config.toml")
    result = rc.containerd_set_imports(text, [], 2)
    assert result.split("\n") == [line for line in text.split("\n") if not line.startswith("imports")]
    assert rc.containerd_set_imports(fixture("debian13-config.toml"), [], 2) == fixture("debian13-config.toml")


def test_set_imports_quotes_paths():
    result = rc.containerd_set_imports("version = 2\n", ['/etc/containerd/we"ird\\name.toml'], 2)
    assert rc.toml_imports(result) == ['/etc/containerd/we"ird\\name.toml']


def test_crlf_lines_are_kept_byte_for_byte():
    text = fixture("debian13-config.toml").replace("\n", "\r\n")
    result = rc.containerd_add_import(text, DROPIN, 2)
    assert result == text.replace("version = 2\r\n", 'version = 2\r\nimports = ["%s"]\r\n' % DROPIN, 1)
    assert tomllib.loads(result)["imports"] == [DROPIN]
    assert rc.containerd_set_imports(result, [], 2) == text


def test_line_separators_other_than_newline_are_not_line_ends():
    # U+2028 and NEL are allowed in TOML comments and strings; they do not end a line.
    text = 'version = 2\n# owner\u2028team\x85gpu\nroot = "/var/lib/\u2028containerd"\n'
    result = rc.containerd_add_import(text, DROPIN, 2)
    assert result == text.replace("version = 2\n", 'version = 2\nimports = ["%s"]\n' % DROPIN)
    assert tomllib.loads(result)["root"] == "/var/lib/\u2028containerd"


@pytest.mark.parametrize("call", [
    lambda text: rc.containerd_add_import(text, DROPIN, 2),
    lambda text: rc.containerd_set_imports(text, [DROPIN], 2),
    lambda text: rc.containerd_set_imports(text, [], 2),
])
def test_invalid_config_toml_is_refused(call):
    with pytest.raises(AnsibleFilterError) as caught:
        call('version = 2\n[plugins."io.containerd.grpc.v1.cri"\n')
    assert "config.toml is not valid TOML" in str(caught.value)


# --------------------------------------------------------------------------
# SystemdCgroup
# --------------------------------------------------------------------------

V3_DUMP = """\
version = 3

[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


@pytest.mark.parametrize("dump,driver,systemd", [
    (baseline("debian12"), "auto", True),        # the user's import sets runc's SystemdCgroup
    (with_dropin("debian12"), "auto", True),
    (baseline("debian13"), "auto", False),       # Debian's default
    (baseline("debian13"), "systemd", True),
    (baseline("debian12"), "cgroupfs", False),
    (V3_DUMP, "auto", True),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n', "auto", False),  # no runc at all
    ("", "systemd", True),                                                    # not read when asked
])
def test_containerd_systemd_cgroup(dump, driver, systemd):
    assert rc.containerd_systemd_cgroup(dump, driver) is systemd


def test_auto_is_the_default():
    assert rc.containerd_systemd_cgroup(baseline("debian12")) is True


@pytest.mark.parametrize("driver", ["Systemd", "", None, "cgroupfs2", True])
def test_bad_cgroup_driver_names_the_variable(driver):
    with pytest.raises(AnsibleFilterError) as caught:
        rc.containerd_systemd_cgroup(baseline("debian12"), driver)
    assert "gpu_container_toolkit_cgroup_driver" in str(caught.value)
    assert repr(driver) in str(caught.value)


@pytest.mark.parametrize("dump", ["version = 1\n", "root = '/var/lib/containerd'\n", "version = 5\n"])
def test_config_versions_other_than_2_to_4_are_refused(dump):
    with pytest.raises(AnsibleFilterError) as caught:
        rc.containerd_systemd_cgroup(dump, "auto")
    assert "supports 2 to 4" in str(caught.value)


# --------------------------------------------------------------------------
# the containerd drop-in
# --------------------------------------------------------------------------

@pytest.mark.parametrize("release", ["debian12", "debian13"])
def test_dropin_is_the_baseline_section_plus_the_runtime(release):
    values = CAPTURES[release]
    base = cri_of(tomllib.loads(baseline(release)))
    dropin = rc.containerd_nvidia_dropin(baseline(release), values)
    assert set(dropin) == {"version", "plugins"}
    assert dropin["version"] == 2
    assert list(dropin["plugins"]) == [CRI]
    section = cri_of(dropin)
    # runc's table, as nvidia-ctk copies it, with the NVIDIA runtime as its binary
    nvidia = copy.deepcopy(base["containerd"]["runtimes"]["runc"])
    nvidia["options"]["BinaryName"] = BINARY
    assert section["containerd"]["runtimes"]["nvidia"] == nvidia
    assert section["containerd"]["runtimes"]["runc"] == base["containerd"]["runtimes"]["runc"]
    expected = copy.deepcopy(base)
    expected["containerd"]["runtimes"]["nvidia"] = section["containerd"]["runtimes"]["nvidia"]
    if values["default"]:
        expected["containerd"]["default_runtime_name"] = "nvidia"
    if values["cdi"]:
        expected["enable_cdi"] = True
        expected["cdi_spec_dirs"] = ["/etc/cdi", "/var/run/cdi"]
    assert section == expected


@pytest.mark.parametrize("release", ["debian12", "debian13"])
def test_dropin_is_what_the_role_wrote(release):
    dropin = rc.containerd_nvidia_dropin(baseline(release), CAPTURES[release])
    assert tomllib.loads(rc.to_toml(dropin)) == tomllib.loads(fixture(release + "-dropin.toml"))


@pytest.mark.parametrize("release,sandbox_image,systemd,default_runtime,cdi", [
    ("debian12", "registry.example/pause:3.9", True, "runc", None),
    ("debian13", "registry.k8s.io/pause:3.8", False, "nvidia", True),
])
def test_dropin_keeps_the_users_settings(release, sandbox_image, systemd, default_runtime, cdi):
    section = cri_of(rc.containerd_nvidia_dropin(baseline(release), CAPTURES[release]))
    assert section["sandbox_image"] == sandbox_image
    assert section["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is systemd
    assert section["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is systemd
    assert section["containerd"]["default_runtime_name"] == default_runtime
    assert section.get("enable_cdi") == cdi


def test_default_runtime_and_cdi_only_when_asked():
    plain = cri_of(rc.containerd_nvidia_dropin(baseline("debian13"), settings()))
    assert plain["containerd"]["default_runtime_name"] == "runc"
    assert plain["enable_cdi"] is False
    asked = cri_of(rc.containerd_nvidia_dropin(baseline("debian13"), settings(default=True, cdi=True, cdi_spec_dirs=["/opt/cdi"])))
    assert asked["containerd"]["default_runtime_name"] == "nvidia"
    assert (asked["enable_cdi"], asked["cdi_spec_dirs"]) == (True, ["/opt/cdi"])
    no_dirs = cri_of(rc.containerd_nvidia_dropin(baseline("debian13"), settings(cdi=True, cdi_spec_dirs=[])))
    assert no_dirs["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]


def test_dropin_on_debian12_sets_no_cdi_keys():
    section = cri_of(rc.containerd_nvidia_dropin(baseline("debian12"), settings()))
    assert "enable_cdi" not in section and "cdi_spec_dirs" not in section


@pytest.mark.parametrize("driver,nvidia", [("systemd", True), ("cgroupfs", False), ("auto", False)])
def test_dropin_cgroup_driver(driver, nvidia):
    runtimes = cri_of(rc.containerd_nvidia_dropin(baseline("debian13"), settings(cgroup_driver=driver)))["containerd"]["runtimes"]
    assert runtimes["nvidia"]["options"]["SystemdCgroup"] is nvidia
    assert runtimes["runc"]["options"]["SystemdCgroup"] is False


def test_a_runtime_of_that_name_in_the_baseline_keeps_its_other_settings():
    def user_nvidia(dump):
        cri_of(dump)["containerd"]["runtimes"]["nvidia"] = {
            "runtime_type": "io.containerd.runtime.v1.linux", "privileged_without_host_devices": True,
            "options": {"BinaryName": "/opt/old/nvidia-container-runtime", "Root": "/run/nvidia-runc"}}
    dropin = rc.containerd_nvidia_dropin(edited(baseline("debian12"), user_nvidia), settings())
    assert cri_of(dropin)["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": True,
        "options": {"BinaryName": BINARY, "Root": "/run/nvidia-runc", "SystemdCgroup": True}}


# NVIDIA's nvidia-ctk (v1.17.8, pkg/config/engine/containerd AddRuntime) makes the nvidia runtime a
# copy of the low-level runtime's table (the default runtime unless it is an nvidia one, else runc,
# else crun), then sets BinaryName: a GPU pod under RuntimeClass nvidia runs with every setting the
# node gives runc pods. molecule gpu_container_toolkit compares the role's result with nvidia-ctk's.
def runc_with_settings(dump):
    runc = cri_of(dump)["containerd"]["runtimes"]["runc"]
    runc.update(privileged_without_host_devices=True, base_runtime_spec="/etc/containerd/base-spec.json",
                pod_annotations=["example.com/*"])
    runc["options"].update(NoPivotRoot=True, Root="/run/containerd/runc-root", ShimCgroup="/runc-shims")


def test_the_nvidia_runtime_takes_runcs_settings_as_nvidia_ctk_does():
    base = edited(baseline("debian12"), runc_with_settings)
    runtimes = cri_of(rc.containerd_nvidia_dropin(base, settings()))["containerd"]["runtimes"]
    expected = copy.deepcopy(cri_of(tomllib.loads(base))["containerd"]["runtimes"]["runc"])
    expected["options"]["BinaryName"] = BINARY
    assert runtimes["nvidia"] == expected
    assert runtimes["runc"] == cri_of(tomllib.loads(base))["containerd"]["runtimes"]["runc"]


@pytest.mark.parametrize("default,source", [("crun", "crun"), ("nvidia-legacy", "runc"), ("kata", "runc")])
def test_the_nvidia_runtime_copies_the_default_low_level_runtime(default, source):
    def runtimes_of_the_user(dump):
        section = cri_of(dump)["containerd"]
        section["default_runtime_name"] = default
        section["runtimes"]["crun"] = {"runtime_type": RUNC_TYPE, "options": {"BinaryName": "/usr/bin/crun", "Root": "/run/crun"}}
        section["runtimes"]["nvidia-legacy"] = {"runtime_type": RUNC_TYPE, "options": {"BinaryName": "/opt/nvidia-runc"}}
        # a runtime of another shim is no base for a runc.v2 one
        section["runtimes"]["kata"] = {"runtime_type": "io.containerd.kata.v2", "options": {"ConfigPath": "/etc/kata.toml"}}
    base = edited(baseline("debian12"), runtimes_of_the_user)
    runtimes = cri_of(rc.containerd_nvidia_dropin(base, settings()))["containerd"]["runtimes"]
    expected = copy.deepcopy(cri_of(tomllib.loads(base))["containerd"]["runtimes"][source])
    expected["runtime_type"] = RUNC_TYPE
    # auto: runc's cgroup driver (the user's import sets SystemdCgroup for runc), whatever the copy's
    expected["options"].update(BinaryName=BINARY, SystemdCgroup=True)
    assert runtimes["nvidia"] == expected


@pytest.mark.parametrize("copied,runc,expected", [(False, True, False), (True, False, True), (None, True, True)])
def test_auto_keeps_the_copied_runtimes_own_cgroup_driver_as_nvidia_ctk_does(copied, runc, expected):
    # nvidia-ctk v1.17.8 copies the default runtime's table and never writes SystemdCgroup: a default runtime
    # (crun through runc's shim) that sets its own keeps it in the copy, whatever runc's; one that sets none
    # gets runc's, as the node gives runc pods.
    def crun_default(dump):
        section = cri_of(dump)["containerd"]
        section["default_runtime_name"] = "crun"
        section["runtimes"]["crun"] = {"runtime_type": RUNC_TYPE, "options": {"BinaryName": "/usr/bin/crun"}}
        if copied is not None:
            section["runtimes"]["crun"]["options"]["SystemdCgroup"] = copied
        section["runtimes"]["runc"].setdefault("options", {})["SystemdCgroup"] = runc
    base = edited(baseline("debian12"), crun_default)
    nvidia = cri_of(rc.containerd_nvidia_dropin(base, settings()))["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["SystemdCgroup"] is expected
    # a driver asked for wins over the copy's
    asked = cri_of(rc.containerd_nvidia_dropin(base, settings(cgroup_driver="systemd")))["containerd"]["runtimes"]["nvidia"]
    assert asked["options"]["SystemdCgroup"] is True


def test_the_cgroup_driver_asked_for_wins_over_runcs():
    base = edited(baseline("debian12"), runc_with_settings)
    nvidia = cri_of(rc.containerd_nvidia_dropin(base, settings(cgroup_driver="cgroupfs")))["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["SystemdCgroup"] is False
    assert nvidia["options"]["NoPivotRoot"] is True


def test_no_copy_of_the_low_level_runtime_when_asked():
    base = edited(baseline("debian12"), runc_with_settings)
    nvidia = cri_of(rc.containerd_nvidia_dropin(base, settings(), low_level=False))["containerd"]["runtimes"]["nvidia"]
    assert nvidia == {"runtime_type": RUNC_TYPE, "options": {"BinaryName": BINARY, "SystemdCgroup": True}}


def test_another_runtime_name():
    runtimes = cri_of(rc.containerd_nvidia_dropin(baseline("debian12"), settings(name="nvidia-cdi", default=True)))["containerd"]
    assert runtimes["default_runtime_name"] == "nvidia-cdi"
    assert set(runtimes["runtimes"]) == {"runc", "nvidia-cdi"}


def test_schema_3_dump():
    dropin = rc.containerd_nvidia_dropin(V3_DUMP, settings(default=True))
    assert dropin["version"] == 3
    assert list(dropin["plugins"]) == ["io.containerd.cri.v1.runtime"]
    section = dropin["plugins"]["io.containerd.cri.v1.runtime"]
    assert section["containerd"]["default_runtime_name"] == "nvidia"
    assert section["containerd"]["runtimes"]["nvidia"]["options"] == {"BinaryName": BINARY, "SystemdCgroup": True}
    assert section["enable_cdi"] is True


def test_a_dump_without_the_cri_section_is_refused():
    def no_cri(dump):
        del dump["plugins"][CRI]
    with pytest.raises(AnsibleFilterError) as caught:
        rc.containerd_nvidia_dropin(edited(baseline("debian12"), no_cri), settings())
    assert '[plugins."io.containerd.grpc.v1.cri"]' in str(caught.value)
    assert "disabled" in str(caught.value)


def test_a_cri_section_without_runtimes_gets_one():
    dropin = rc.containerd_nvidia_dropin('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n', settings())
    assert cri_of(dropin) == {"sandbox_image": "p", "containerd": {"runtimes": {"nvidia": {
        "runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": BINARY, "SystemdCgroup": False}}}}}


# --------------------------------------------------------------------------
# checking the live dump
# --------------------------------------------------------------------------

def role_dropin(release):
    return rc.containerd_nvidia_dropin(baseline(release), CAPTURES[release])


@pytest.mark.parametrize("release", ["debian12", "debian13"])
def test_the_real_dumps_with_the_dropin_are_fine(release):
    assert rc.containerd_dump_problems(with_dropin(release), baseline(release), role_dropin(release)) == []
    written = rc.from_toml(fixture(release + "-dropin.toml"))
    assert rc.containerd_dump_problems(with_dropin(release), baseline(release), written) == []


@pytest.mark.parametrize("release", ["debian12", "debian13"])
def test_the_dropin_not_imported_is_found(release):
    problems = rc.containerd_dump_problems(baseline(release), baseline(release), role_dropin(release))
    assert "plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia.runtime_type is '<absent>', " \
           "the drop-in sets 'io.containerd.runc.v2'" in problems
    assert any(".runtimes.nvidia.options.BinaryName is '<absent>'" in problem for problem in problems)


def drop(*path):
    def change(dump):
        table = dump
        for key in path[:-1]:
            table = table[key]
        del table[path[-1]]
    return change


def assign(value, *path):
    def change(dump):
        table = dump
        for key in path[:-1]:
            table = table.setdefault(key, {})
        table[path[-1]] = value
    return change


RUNTIMES = ("plugins", CRI, "containerd", "runtimes")


@pytest.mark.parametrize("release,change,words", [
    ("debian12", drop(*RUNTIMES, "nvidia"),
     "plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia.options.BinaryName is '<absent>', "
     "the drop-in sets '/usr/bin/nvidia-container-runtime'"),
    ("debian12", assign("registry.k8s.io/pause:3.6", "plugins", CRI, "sandbox_image"),
     "plugins.io.containerd.grpc.v1.cri.sandbox_image is 'registry.k8s.io/pause:3.6', the drop-in sets 'registry.example/pause:3.9'"),
    ("debian12", drop(*RUNTIMES, "runc"),
     "plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.options.SystemdCgroup is '<absent>', the drop-in sets True"),
    ("debian13", drop(*RUNTIMES, "runc"),
     "plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.runtime_type is '<absent>', the drop-in sets 'io.containerd.runc.v2'"),
    ("debian12", assign(False, *RUNTIMES, "nvidia", "options", "SystemdCgroup"),
     "plugins.io.containerd.grpc.v1.cri.containerd.runtimes.nvidia.options.SystemdCgroup is False, the drop-in sets True"),
    ("debian13", assign("runc", "plugins", CRI, "containerd", "default_runtime_name"),
     "plugins.io.containerd.grpc.v1.cri.containerd.default_runtime_name is 'runc', the drop-in sets 'nvidia'"),
    ("debian13", assign(False, "plugins", CRI, "enable_cdi"),
     "plugins.io.containerd.grpc.v1.cri.enable_cdi is False, the drop-in sets True"),
    # outside the drop-in: the rest of the user's configuration
    ("debian12", assign("/run/other.sock", "grpc", "address"),
     "grpc.address changed from '/run/containerd/containerd.sock' to '/run/other.sock'"),
    ("debian13", drop("plugins", "io.containerd.internal.v1.opt"),
     "plugins.io.containerd.internal.v1.opt.path changed from '/var/lib/containerd/opt' to '<absent>'"),
    ("debian13", assign([], "plugins", "io.containerd.transfer.v1.local", "unpack_config"),
     "plugins.io.containerd.transfer.v1.local.unpack_config changed from "),
])
def test_tampered_dumps(release, change, words):
    problems = rc.containerd_dump_problems(edited(with_dropin(release), change), baseline(release), role_dropin(release))
    assert any(words in problem for problem in problems), problems


def test_a_setting_of_the_user_lost_to_the_dropin_is_found():
    # A user setting the drop-in does not carry (say the baseline changed after it was written).
    dropin = role_dropin("debian12")
    newer = edited(baseline("debian12"), assign(["https://mirror.example"], "plugins", CRI, "registry", "mirrors", "docker.io", "endpoint"))
    problems = rc.containerd_dump_problems(with_dropin("debian12"), newer, dropin)
    assert problems == ["plugins.io.containerd.grpc.v1.cri.registry.mirrors.docker.io.endpoint changed from ['https://mirror.example'] to '<absent>'"]


MIRROR = {"plugins": {CRI: {"registry": {"mirrors": {"docker.io": {"endpoint": ["https://mirror.example"]}}}}}}


def combined(dropin, extra):
    """Ansible's combine(recursive=True), as the role applies gpu_container_toolkit_containerd_dropin_extra."""
    result = copy.deepcopy(dropin)
    for key, value in extra.items():
        result[key] = combined(result[key], value) if isinstance(value, dict) and isinstance(result.get(key), dict) else value
    return result


def test_dropin_extra_filling_an_empty_table_of_the_baseline():
    dropin = combined(role_dropin("debian12"), MIRROR)
    live = edited(with_dropin("debian12"), assign(["https://mirror.example"], "plugins", CRI, "registry", "mirrors", "docker.io", "endpoint"))
    assert rc.containerd_dump_problems(live, baseline("debian12"), dropin) == []
    problems = rc.containerd_dump_problems(with_dropin("debian12"), baseline("debian12"), dropin)
    assert problems == ["plugins.io.containerd.grpc.v1.cri.registry.mirrors.docker.io.endpoint is '<absent>', "
                        "the drop-in sets ['https://mirror.example']"]


def test_dump_problems_wants_valid_toml():
    with pytest.raises(AnsibleFilterError) as caught:
        rc.containerd_dump_problems("[plugins", baseline("debian12"), role_dropin("debian12"))
    assert "containerd config dump is not valid TOML" in str(caught.value)


# --------------------------------------------------------------------------
# CRI-O
# --------------------------------------------------------------------------

NVIDIA_OCI = {"runtime_path": BINARY, "runtime_type": "oci"}


@pytest.mark.parametrize("values,runtime", [
    (settings(), {"runtimes": {"nvidia": NVIDIA_OCI}}),
    (settings(default=True), {"default_runtime": "nvidia", "runtimes": {"nvidia": NVIDIA_OCI}}),
    (settings(cdi=True), {"cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"], "runtimes": {"nvidia": NVIDIA_OCI}}),
    (settings(cdi=True, cdi_spec_dirs=["/opt/cdi"], default=True),
     {"cdi_spec_dirs": ["/opt/cdi"], "default_runtime": "nvidia", "runtimes": {"nvidia": NVIDIA_OCI}}),
    ({"binary": "/opt/nct/nvidia-container-runtime", "name": "nv"},
     {"runtimes": {"nv": {"runtime_path": "/opt/nct/nvidia-container-runtime", "runtime_type": "oci"}}}),
])
def test_crio_dropin_holds_only_what_is_asked(values, runtime):
    assert rc.crio_nvidia_dropin(values) == {"crio": {"runtime": runtime}}


def test_crio_dropin_as_toml():
    text = rc.to_toml(rc.crio_nvidia_dropin(settings(default=True, cdi=True)))
    assert text == ('[crio.runtime]\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n  default_runtime = "nvidia"\n\n'
                    '[crio.runtime.runtimes.nvidia]\n  runtime_path = "/usr/bin/nvidia-container-runtime"\n  runtime_type = "oci"\n')


def test_crio_dropin_leaves_the_users_runtimes_to_crio_conf():
    # CRI-O merges crio.conf.d key by key: the drop-in names no runtime but its own.
    dropin = rc.crio_nvidia_dropin(settings())
    assert list(dropin) == ["crio"]
    assert list(dropin["crio"]) == ["runtime"]
    assert list(dropin["crio"]["runtime"]["runtimes"]) == ["nvidia"]


# --------------------------------------------------------------------------
# Docker
# --------------------------------------------------------------------------

USER_DAEMON_JSON = {
    "log-driver": "journald",
    "exec-opts": ["native.cgroupdriver=systemd"],
    "registry-mirrors": ["https://mirror.example"],
    "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"path": "/opt/old/nvidia-container-runtime", "args": ["--debug"]}},
    "default-runtime": "crun",
    "features": {"buildkit": True, "containerd-snapshotter": False},
}


def test_docker_keeps_every_user_key():
    current = copy.deepcopy(USER_DAEMON_JSON)
    merged = rc.docker_daemon_config(current, settings())
    assert current == USER_DAEMON_JSON  # not changed in place: the role compares both
    expected = copy.deepcopy(USER_DAEMON_JSON)
    expected["runtimes"]["nvidia"] = {"path": BINARY, "args": ["--debug"]}
    assert merged == expected


@pytest.mark.parametrize("current,values,default_runtime", [
    ({}, settings(), None),
    ({}, settings(default=True), "nvidia"),
    ({"default-runtime": "crun"}, settings(), "crun"),
    ({"default-runtime": "crun"}, settings(default=True), "nvidia"),
    ({"default-runtime": "nvidia"}, settings(), None),               # removed: docker falls back to runc
    ({"default-runtime": "nvidia"}, settings(name="nv"), "nvidia"),  # not ours
])
def test_docker_default_runtime(current, values, default_runtime):
    assert rc.docker_daemon_config(current, values).get("default-runtime") == default_runtime


@pytest.mark.parametrize("current,values,features", [
    ({"features": {"buildkit": True}}, settings(cdi=True), {"buildkit": True, "cdi": True}),
    ({"features": {"cdi": False}}, settings(cdi=True), {"cdi": True}),
    ({}, settings(cdi=True), {"cdi": True}),
    ({"features": None}, settings(cdi=True), {"cdi": True}),
    ({"features": {"buildkit": True}}, settings(), {"buildkit": True}),
    ({}, settings(), None),
])
def test_docker_cdi(current, values, features):
    assert rc.docker_daemon_config(current, values).get("features") == features


@pytest.mark.parametrize("current", [None, {}])
def test_docker_without_daemon_json(current):
    assert rc.docker_daemon_config(current, settings()) == {"runtimes": {"nvidia": {"path": BINARY, "args": []}}}


def test_docker_merge_is_stable():
    once = rc.docker_daemon_config(USER_DAEMON_JSON, settings(default=True, cdi=True))
    assert rc.docker_daemon_config(once, settings(default=True, cdi=True)) == once


@pytest.mark.parametrize("current,type_name", [([], "list"), ("{}", "str"), (3, "int")])
def test_docker_wants_an_object(current, type_name):
    with pytest.raises(AnsibleFilterError) as caught:
        rc.docker_daemon_config(current, settings())
    assert "daemon.json must hold a JSON object, found %s" % type_name in str(caught.value)


# --------------------------------------------------------------------------
# the plugin
# --------------------------------------------------------------------------

@pytest.mark.parametrize("folder,prefix,name,function",
                         [(FILTERS, "gpufleet.nvidia.", name, function)
                          for name, function in sorted(public.FilterModule().filters().items())]
                         + [(INTERNAL_FILTERS, "gpufleet.nvidia.internal.", name, function)
                            for name, function in sorted(rc.FilterModule().filters().items())])
def test_every_filter_has_its_documentation(folder, prefix, name, function):
    with open(os.path.join(folder, name + ".yml"), encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    assert doc["DOCUMENTATION"]["name"] == name
    assert function is getattr(rc, name)
    assert prefix + name in doc["EXAMPLES"]


def test_the_public_filters_are_to_toml_and_from_toml():
    assert sorted(public.FilterModule().filters()) == ["from_toml", "to_toml"]
    assert not set(public.FilterModule().filters()) & set(rc.FilterModule().filters())


# ---------------------------------------------------------------- the NVIDIA runtime's config.toml

ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
# Laid out as the toolkit's packages install it (nvidia-ctk config default, 1.17): the defaults of the
# top-level keys as comments, then one table per tool.
PACKAGED = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
#no-cgroups = false

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]
"""


def changed_lines(before, after):
    old, new = before.split("\n"), after.split("\n")
    return [line for line in new if line not in old], [line for line in old if line not in new]


def test_ignoring_the_envvar_adds_one_line_under_the_packaged_comment():
    text = rc.nvidia_runtime_config_set(PACKAGED, {ENVVAR_KEY: False})
    assert changed_lines(PACKAGED, text) == (["%s = false" % ENVVAR_KEY], [])
    lines = text.split("\n")
    assert lines.index("%s = false" % ENVVAR_KEY) == lines.index("#%s = true" % ENVVAR_KEY) + 1
    parsed = tomllib.loads(text)
    assert parsed[ENVVAR_KEY] is False
    assert dict((k, v) for k, v in parsed.items() if k != ENVVAR_KEY) == tomllib.loads(PACKAGED)


def test_a_value_set_by_hand_is_replaced_in_place():
    by_hand = PACKAGED.replace("disable-require = false\n", "disable-require = false\n%s = true  # site policy\n" % ENVVAR_KEY)
    text = rc.nvidia_runtime_config_set(by_hand, {ENVVAR_KEY: False})
    assert changed_lines(by_hand, text) == (["%s = false" % ENVVAR_KEY], ["%s = true  # site policy" % ENVVAR_KEY])
    assert text.count(ENVVAR_KEY) == 2  # the packaged comment and the setting


@pytest.mark.parametrize("text, value", [
    (PACKAGED, True),                                   # absent: NVIDIA's default, true
    (PACKAGED.replace("#%s = true\n" % ENVVAR_KEY, ""), True),
    ("%s = false\n[nvidia-container-cli]\nload-kmods = true\n" % ENVVAR_KEY, False),
    ('"%s" = true\n' % ENVVAR_KEY, True),
], ids=["packaged", "no-comment", "set-false", "quoted-key"])
def test_a_file_that_already_says_so_is_left_alone(text, value):
    assert rc.nvidia_runtime_config_set(text, {ENVVAR_KEY: value}) == text


def test_the_same_key_in_a_table_is_not_the_top_level_one():
    text = '[nvidia-container-cli]\n%s = false\nload-kmods = true\n' % ENVVAR_KEY
    result = rc.nvidia_runtime_config_set(text, {ENVVAR_KEY: False})
    assert result == '%s = false\n[nvidia-container-cli]\n%s = false\nload-kmods = true\n' % (ENVVAR_KEY, ENVVAR_KEY)
    assert tomllib.loads(result)[ENVVAR_KEY] is False


@pytest.mark.parametrize("text", ["", "\n"])
def test_a_missing_file_gets_the_one_setting(text):
    assert rc.nvidia_runtime_config_set(text, {ENVVAR_KEY: False}) == "%s = false\n" % ENVVAR_KEY


def test_crlf_files_keep_their_line_ends():
    text = PACKAGED.replace("\n", "\r\n")
    result = rc.nvidia_runtime_config_set(text, {ENVVAR_KEY: False})
    assert "%s = false\r\n" % ENVVAR_KEY in result
    assert result.replace("%s = false\r\n" % ENVVAR_KEY, "") == text


def test_a_broken_config_toml_is_refused_not_rewritten():
    with pytest.raises(AnsibleFilterError, match="config.toml is not valid TOML"):
        rc.nvidia_runtime_config_set("disable-require = \n", {ENVVAR_KEY: False})
    with pytest.raises(AnsibleFilterError, match="top-level keys"):
        rc.nvidia_runtime_config_set(PACKAGED, {"nvidia-container-runtime": {"mode": "cdi"}})


# --------------------------------------------------------------------------
# containerd 2.x: config.toml's own version decides the drop-in's
# --------------------------------------------------------------------------

V2_BINARY = VERSION_LINES[2]  # Debian forky's containerd 2.1.9


@pytest.mark.parametrize("text,version_text,schema", [
    ("", VERSION_LINES[1], 2),                                       # no config.toml: the binary's version
    ("", V2_BINARY, 3),
    ("  \n", V2_BINARY, 3),
    (fixture("forky-v2-config.toml"), V2_BINARY, 2),                 # Debian's containerd 2 package ships version 2
    (fixture("forky-v3-config.toml"), V2_BINARY, 3),                 # `containerd config default`
    (fixture("debian13-config.toml"), VERSION_LINES[1], 2),
    ('[plugins.cri]\n  sandbox_image = "p"\n', VERSION_LINES[0], 2),  # version 1 under 1.x: as before
    ("version = 2\n", V2_BINARY, 2),
    ("# only a comment\n", V2_BINARY, 3),                              # no plugins table: nothing to migrate
    ('imports = ["conf.d/*.toml"]\n', V2_BINARY, 3),
    ("version = 2\n", "containerd github.com/containerd/containerd/v2 v2.3.0 abc", 2),
    ("version = 3\n", "containerd github.com/containerd/containerd/v2 v2.3.0 abc", 3),
    ("version = 4\n", "containerd github.com/containerd/containerd/v2 v2.3.0 abc", 4),
])
def test_containerd_config_schema(text, version_text, schema):
    assert rc.containerd_config_schema(text, version_text) == {"schema": schema, "problem": ""}


def test_imports_of_the_same_version_or_none_are_fine():
    imports = {"/etc/containerd/user.toml": fixture("forky-v2-user.toml"), "/etc/containerd/plain.toml": "root = '/x'\n"}
    assert rc.containerd_config_schema(fixture("forky-v2-config.toml"), V2_BINARY, imports) == {"schema": 2, "problem": ""}


def test_an_import_of_another_version_is_refused_on_containerd_2_0_to_2_2():
    imports = {"/etc/containerd/user.toml": fixture("forky-v2-user.toml")}
    result = rc.containerd_config_schema(fixture("forky-v3-config.toml"), V2_BINARY, imports)
    assert result["schema"] == 0
    assert "is version 3 and imports /etc/containerd/user.toml, which is version 2" in result["problem"]
    # containerd 2.3 migrates each file on its own.
    assert rc.containerd_config_schema(fixture("forky-v3-config.toml"), "containerd x v2.3.1 abc", imports) == \
        {"schema": 3, "problem": ""}


@pytest.mark.parametrize("text,version_text,words", [
    ('[plugins.cri]\n  sandbox_image = "p"\n', V2_BINARY, "no version key, which containerd reads as config version 1"),
    ('[plugins."io.containerd.grpc.v1.cri"]\n', V2_BINARY, "add version = 2 if its plugins tables use version 2's full"),
    ("version = 4\n", V2_BINARY, "says version 4, which this containerd (config version 3 at most) refuses"),
    ("version = 3\n", VERSION_LINES[1], "says version 3, which this containerd (config version 2 at most) refuses"),
    ("version = 1\n", V2_BINARY, "its version is 1"),
    ("version = 5\n", V2_BINARY, "its version is 5"),
    ('version = "2"\n', V2_BINARY, "its version is '2'"),
    ("version = true\n", V2_BINARY, "its version is True"),
    ("version = [\n", V2_BINARY, "not valid TOML"),
])
def test_containerd_config_schema_refusals(text, version_text, words):
    result = rc.containerd_config_schema(text, version_text)
    assert result["schema"] == 0
    assert words in result["problem"]


def forky_files(name):
    return [fixture(name + "-config.toml"), fixture(name + "-user.toml")]


def test_version_2_config_on_containerd_2_gets_a_version_2_dropin():
    """The real case: Debian's containerd 2.1.9 with its version 2 config.toml and a user import."""
    dropin = rc.containerd_nvidia_dropin(fixture("forky-v2-dump-baseline.toml"), settings(cdi=True), 2, forky_files("forky-v2"))
    assert dropin["version"] == 2
    assert list(dropin["plugins"]) == [CRI]
    section = dropin["plugins"][CRI]
    # What config.toml and the import write, as written (no defaults of the dump), plus the runtime.
    assert section["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}
    assert section["sandbox_image"] == "registry.example/pause:3.9"
    assert section["containerd"]["runtimes"]["runc"] == {"runtime_type": rc.RUNC_TYPE, "options": {"SystemdCgroup": True}}
    assert section["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": rc.RUNC_TYPE, "options": {"BinaryName": BINARY, "SystemdCgroup": True}}
    assert section["enable_cdi"] is True and section["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert "default_runtime_name" not in section["containerd"]
    assert dropin == rc.from_toml(fixture("forky-v2-dropin.toml"))


def test_the_version_3_dropin_the_role_wrote_before_would_lose_the_users_sandbox_image():
    """containerd 2.1.9, config.toml version 2 and a version 3 drop-in: the dump shows the loss."""
    dump = fixture("forky-v2-dump-v3-dropin.toml")
    problems = rc.containerd_dump_problems(dump, fixture("forky-v2-dump-baseline.toml"),
                                           rc.containerd_nvidia_dropin(fixture("forky-v2-dump-baseline.toml"), settings(cdi=True)))
    assert any("pinned_images.sandbox changed from 'registry.example/pause:3.9'" in problem for problem in problems), problems


# forky-v2's drop-in is version 2 (from the files as written): the role expects only what it sets of the
# nvidia runtime there (low_level false), its copy of runc being of runc as written.
@pytest.mark.parametrize("name,extra,low_level", [("forky-v2", {}, False), ("forky-v3", {"default": True}, True)])
def test_the_real_containerd_2_dumps_with_the_dropin_are_fine(name, extra, low_level):
    expected = rc.containerd_nvidia_dropin(fixture(name + "-dump-baseline.toml"), settings(cdi=True, **extra), low_level=low_level)
    assert expected["version"] == 3
    assert rc.containerd_dump_problems(fixture(name + "-dump-with-dropin.toml"), fixture(name + "-dump-baseline.toml"), expected) == []


def test_version_3_config_on_containerd_2_gets_the_dumped_section():
    dropin = rc.containerd_nvidia_dropin(fixture("forky-v3-dump-baseline.toml"), settings(cdi=True, default=True), 3, forky_files("forky-v3"))
    assert dropin["version"] == 3
    assert dropin == rc.from_toml(fixture("forky-v3-dropin.toml"))
    section = dropin["plugins"]["io.containerd.cri.v1.runtime"]
    assert section["containerd"]["default_runtime_name"] == "nvidia"
    assert section["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True


def test_later_files_win_key_by_key():
    files = ['version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "a"\n  [plugins."io.containerd.grpc.v1.cri".cni]\n    bin_dir = "/x"\n',
             'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "b"\n',
             'version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\n  conf_dir = "/y"\n']
    section = rc.containerd_nvidia_dropin(V3_DUMP, settings(), 2, files)["plugins"][CRI]
    assert section["sandbox_image"] == "b"
    assert section["cni"] == {"bin_dir": "/x", "conf_dir": "/y"}


@pytest.mark.parametrize("schema,files,words", [
    (3, None, "a drop-in of version 3 cannot go with it"),
    (2, None, "needs the texts of config.toml"),
    (2, [], "needs the texts of config.toml"),
    (2, ["version = ["], "config.toml is not valid TOML"),
])
def test_version_mismatches_refused(schema, files, words):
    dump = V3_DUMP if schema == 2 else baseline("debian13")
    with pytest.raises(AnsibleFilterError) as caught:
        rc.containerd_nvidia_dropin(dump, settings(), schema, files)
    assert words in str(caught.value)


# ---------------------------------------------------------------- a lost connection or a refusal

# What ansible-core 2.21 registered for `systemd_service: state=restarted` (ignore_unreachable) when
# the unit's start killed the node's sshd, the connection of the run (molecule verify's cut).
CUT_DURING_RESTART = {
    "changed": False, "exception": "(traceback unavailable)", "failed": False, "unreachable": True,
    "msg": 'Task failed: Data could not be sent to remote host "ctk-debian12". Make sure this host can be reached over ssh:'}
# containerd refusing its configuration, as the role's tasks report it.
REFUSED_RESTART = {
    "changed": False, "failed": True,
    "msg": "Unable to restart service containerd: Job for containerd.service failed because the control process exited "
           "with error code.\nSee \"systemctl status containerd.service\" and \"journalctl -xeu containerd.service\" "
           "for details.\n"}
NOT_SETTLED = {"changed": False, "failed": True, "msg": "containerd did not stay up: it is failed (failed, result exit-code)",
               "state": {"ActiveState": "failed"}, "journal": ["... level=fatal msg=\"not a valid logrus Level\""]}
# containerd down, not the node: ctr's "connection refused" is the runtime's socket.
CTR_DOWN = {"changed": False, "failed": True, "rc": 1, "cmd": ["ctr", "plugins", "ls"], "msg": "non-zero return code",
            "stdout": "", "stderr": 'ctr: failed to dial "/run/containerd/containerd.sock": connection error: desc = '
                                    '"transport: error while dialing: dial unix /run/containerd/containerd.sock: connect: '
                                    'connection refused"'}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False", "false_condition": "x"}


@pytest.mark.parametrize("results,words", [
    (CUT_DURING_RESTART, "the node could not be reached: Task failed: Data could not be sent to remote host"),
    ([SKIPPED, {}, CUT_DURING_RESTART], "the node could not be reached"),
    ({"failed": True, "msg": "Failed to connect to the host via ssh: ssh: connect to host gpu1 port 22: Connection refused",
      "unreachable": False}, "the connection to the node broke: Failed to connect to the host via"),
    ({"failed": True, "msg": "MODULE FAILURE: No start of json char found\nSee stdout/stderr for the exact error",
      "module_stderr": "Shared connection to gpu1 closed.\r\n", "rc": 255}, "the connection to the node broke: Shared connection to gpu1 closed"),
    ({"failed": True, "msg": "MODULE FAILURE\nSee stdout/stderr for the exact error", "module_stderr": "", "rc": 255},
     "the connection to the node broke (ssh exited 255)"),
])
def test_a_lost_connection_is_told(results, words):
    assert rc.runtime_connection_lost(results).startswith(words)


@pytest.mark.parametrize("results", [
    REFUSED_RESTART, NOT_SETTLED, CTR_DOWN, [SKIPPED, NOT_SETTLED], [], None, [None, "text"],
    # a module's own failure, not the connection's
    {"failed": True, "msg": "MODULE FAILURE\nSee stdout/stderr for the exact error", "module_stderr": "Traceback ...", "rc": 1},
])
def test_a_refused_configuration_is_no_lost_connection(results):
    assert rc.runtime_connection_lost(results) == ""
    assert rc.runtime_connection_lost(results, {"changed": False, "rc": 0, "stdout": "running"}) == ""
    assert rc.runtime_connection_lost(results, "degraded") == ""
    assert rc.runtime_connection_lost(results, {"rc": 0, "stdout": 's "running"'}) == ""


@pytest.mark.parametrize("state,words", [
    ({"rc": 1, "stdout": "stopping\n"}, "the node is shutting down"),
    ({"rc": 0, "stdout": 's "stopping"\n'}, "the node is shutting down"),
    ("stopping", "the node is shutting down"),
    ({"unreachable": True, "msg": "Failed to connect to the host via ssh: Connection timed out"}, "the node could not be reached"),
])
def test_a_node_going_down_is_a_lost_connection(state, words):
    # containerd stopped because the node shuts down: the check saw it before the connection went.
    assert rc.runtime_connection_lost(NOT_SETTLED, state).startswith(words)
