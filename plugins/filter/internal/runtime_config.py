# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters behind gpu_container_toolkit: the nvidia runtime's entry for containerd, CRI-O, Docker.

The role reads the runtimes' own view of their configuration (``containerd
config dump``, ``daemon.json``) on the host; these pure functions, run on the
controller, decide what the drop-in files hold and check the result.

containerd 1.x merges an imported file into the main configuration section by
section: a ``[plugins."io.containerd.grpc.v1.cri"]`` table in an import
REPLACES the whole CRI section of config.toml (and of earlier imports). A
drop-in that only named the nvidia runtime would silently drop the user's
sandbox image, registry mirrors and runc options. So the drop-in carries the
effective CRI section as containerd computes it without the drop-in, plus the
nvidia runtime, and the check afterwards compares every setting.
"""

from __future__ import annotations

import copy
import fnmatch
import math
import re

from ansible.errors import AnsibleFilterError

try:
    import tomllib
except ImportError:  # pragma: no cover - the controller runs Python >= 3.12
    tomllib = None

# The CRI plugin section that holds the runtimes, by containerd config schema.
# Version 4 (containerd 2.3) keeps version 3's plugin names.
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime", 4: "io.containerd.cri.v1.runtime"}
RUNC_TYPE = "io.containerd.runc.v2"
DEFAULT_CDI_SPEC_DIRS = ["/etc/cdi", "/var/run/cdi"]
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_VERSION = re.compile(r"(?:^|\s)v?([0-9]+)\.([0-9]+)\.([0-9]+)")


def _loads(text, what):
    if tomllib is None:  # pragma: no cover
        raise AnsibleFilterError("reading TOML needs Python >= 3.11 on the controller")
    try:
        return tomllib.loads(text or "")
    except tomllib.TOMLDecodeError as err:
        raise AnsibleFilterError("%s is not valid TOML: %s" % (what, err)) from err


# ---------------------------------------------------------------- TOML out

def _key(name):
    name = str(name)
    return name if _BARE_KEY.match(name) else _string(name)


def _string(value):
    out = ['"']
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append("\\u%04x" % ord(char))
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _value(value, path):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(item, path) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s = %s" % (_key(k), _value(v, path + [k])) for k, v in value.items()) + "}"
    raise AnsibleFilterError("to_toml: %s has a value of type %s, which TOML cannot hold"
                             % (".".join(str(p) for p in path) or "the document", type(value).__name__))


def _emit_table(data, path, lines):
    scalars = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    # A table holding only tables needs no header of its own; an empty one keeps it.
    if path and (scalars or not tables):
        if lines:
            lines.append("")
        lines.append("[" + ".".join(_key(part) for part in path) + "]")
    for key, value in scalars:
        lines.append("%s%s = %s" % ("  " if path else "", _key(key), _value(value, path + [key])))
    for key, value in tables:
        _emit_table(value, path + [key], lines)


def to_toml(data):
    """A dict as a TOML document: scalars first, then one [table] per nested dict, in order."""
    if not isinstance(data, dict):
        raise AnsibleFilterError("to_toml expects a dict, got %s" % type(data).__name__)
    lines = []
    _emit_table(data, [], lines)
    return "\n".join(lines) + "\n"


def from_toml(text):
    """Parse a TOML document into a dict (errors name the parser's line and column)."""
    return _loads(text, "The document")


# ---------------------------------------------------------------- containerd

def containerd_schema(version_text):
    """The config version a containerd dumps, from ``containerd --version``: 1.x -> 2, 2.0 to 2.2 -> 3, 2.3 and later 2.x -> 4."""
    match = _VERSION.search(str(version_text or ""))
    if not match:
        raise AnsibleFilterError("cannot read a containerd version from %r" % (version_text,))
    major, minor = int(match.group(1)), int(match.group(2))
    if major == 1:
        return 2
    if major == 2:
        return 4 if minor >= 3 else 3
    raise AnsibleFilterError("containerd %s.%s.%s is not supported (1.x and 2.x are)" % match.groups())


def containerd_config_schema(text, version_text, imports=None):
    """The version containerd reads config.toml in, and why no drop-in can go beside it.

    Returns ``{"schema": N, "problem": ""}``, or ``{"schema": 0, "problem": "..."}`` for a file the
    role must not write a drop-in for. ``imports``: the files config.toml imports, {path: text},
    the role's drop-in left out. A missing or empty file takes the version of the containerd binary
    (``version_text``). A file without a ``version`` key is version 1 to containerd: containerd
    1.x migrates it, and containerd 2.0 to 2.2 bump it to version 3 unmigrated, which loses the
    settings of a ``plugins`` table in it. containerd 2.0 to 2.2 take the version of the last file
    that names one for the whole configuration, so imports of another version than config.toml's
    are refused there too (2.3 migrates each file on its own).
    """
    native = containerd_schema(version_text)
    if not (text or "").strip():
        return {"schema": native, "problem": ""}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        return {"schema": 0, "problem": "it is not valid TOML: %s" % err}
    version = data.get("version")
    if version is None:
        if native == 2 or "plugins" not in data:
            return {"schema": 2 if native == 2 else native, "problem": ""}
        return {"schema": 0, "problem": (
            "it has no version key, which containerd reads as config version 1, and containerd 2.x does not migrate "
            "the plugins settings of a version 1 file; add version = 2 if its plugins tables use version 2's full "
            "plugin IDs (\"io.containerd.grpc.v1.cri\")")}
    if isinstance(version, bool) or not isinstance(version, int) or version not in CRI_PLUGIN:
        return {"schema": 0, "problem": "its version is %r; gpu_container_toolkit writes drop-ins for versions 2 to 4" % (version,)}
    if version > native:
        return {"schema": 0, "problem": (
            "it says version %d, which this containerd (config version %d at most) refuses; "
            "upgrade containerd, or write the file in version %d" % (version, native, native))}
    if native == 3:
        for path in sorted(imports or {}):
            try:
                theirs = tomllib.loads(imports[path] or "").get("version")
            except tomllib.TOMLDecodeError as err:
                return {"schema": 0, "problem": "it imports %s, which is not valid TOML: %s" % (path, err)}
            if theirs not in (None, 0, version):
                return {"schema": 0, "problem": (
                    "it is version %d and imports %s, which is version %r; containerd 2.0 to 2.2 read the whole "
                    "configuration in the version of the last file that names one, so a drop-in of either version "
                    "leaves the other file's settings unmigrated; write both in one version" % (version, path, theirs))}
    return {"schema": version, "problem": ""}


def toml_imports(text):
    """The top-level ``imports`` list of a containerd config.toml (empty when it has none)."""
    imports = _loads(text, "config.toml").get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(item, str) for item in imports):
        raise AnsibleFilterError("config.toml: imports must be a list of paths, found %r" % (imports,))
    return imports


def _top_level_span(lines):
    """Index of the first table header (end of the top-level key/value part)."""
    for index, line in enumerate(lines):
        if re.match(r"^\s*\[", line):
            return index
    return len(lines)


def _imports_lines(lines, end):
    """(first, last) line indexes of the top-level ``imports = [...]`` assignment, or None."""
    for index in range(end):
        if re.match(r"^\s*imports\s*=", lines[index]):
            for last in range(index, end):
                try:
                    tomllib.loads("\n".join(lines[index:last + 1]) + "\n")
                    return index, last
                except tomllib.TOMLDecodeError:
                    continue
            raise AnsibleFilterError("config.toml: cannot find the end of the imports list")
    return None


def containerd_set_imports(text, imports, schema=2):
    """config.toml's text with its top-level ``imports`` set to the given list, every other line as it was.

    Inserted after a top-level ``version`` line (else at the top) when there was none;
    removed when the list is empty. A missing or empty file becomes ``version = N`` + imports.
    """
    _loads(text, "config.toml")
    imports = list(imports or [])
    assignment = "imports = [" + ", ".join(_string(path) for path in imports) + "]"
    if not (text or "").strip():
        return "version = %d\n" % int(schema) + (assignment + "\n" if imports else "")
    # Split at \n only, as containerd's parser ends lines: str.splitlines would also split at
    # \x85, \u2028 (allowed in comments and strings) and drop a \r before \n (CRLF files).
    lines = text.split("\n")
    if "\r" in lines[0][-1:]:
        assignment += "\r"
    end = _top_level_span(lines)
    span = _imports_lines(lines, end)
    if span:
        first, last = span
        lines[first:last + 1] = [assignment] if imports else []
    elif imports:
        at = 0
        for index in range(end):
            if re.match(r"^\s*version\s*=", lines[index]):
                at = index + 1
                break
        lines.insert(at, assignment)
    text = "\n".join(lines)
    return text if text.endswith("\n") else text + "\n"


def _glob_covers(pattern, path):
    """Whether Go's filepath.Match(pattern, path) holds: wildcards never match a ``/``."""
    if pattern == path:
        return True
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(fnmatch.fnmatchcase(name, part) for part, name in zip(parts, names))


def containerd_add_import(text, path, schema=2):
    """config.toml's text with ``path`` added to ``imports``, unless an entry (or glob) already covers it."""
    imports = toml_imports(text) if (text or "").strip() else []
    if any(_glob_covers(entry, path) for entry in imports):
        return text if (text or "").strip() else containerd_set_imports(text, imports, schema)
    return containerd_set_imports(text, imports + [path], schema)


def _schema_of(dump):
    version = dump.get("version", 1)
    if version not in CRI_PLUGIN:
        raise AnsibleFilterError("containerd's configuration has version %r; gpu_container_toolkit supports 2 to 4" % (version,))
    return version


def _runtimes(section):
    return section.setdefault("containerd", {}).setdefault("runtimes", {})


def containerd_systemd_cgroup(dump_text, cgroup_driver="auto"):
    """Whether the nvidia runtime uses systemd cgroups: as asked, or (auto) as runc does in the dump."""
    if cgroup_driver in ("systemd", "cgroupfs"):
        return cgroup_driver == "systemd"
    if cgroup_driver != "auto":
        raise AnsibleFilterError("gpu_container_toolkit_cgroup_driver must be auto, systemd or cgroupfs, got %r" % (cgroup_driver,))
    dump = _loads(dump_text, "containerd config dump")
    section = dump.get("plugins", {}).get(CRI_PLUGIN[_schema_of(dump)], {})
    runc = section.get("containerd", {}).get("runtimes", {}).get("runc", {})
    return bool(runc.get("options", {}).get("SystemdCgroup", False))


def _deep_merge(base, other):
    merged = dict(base)
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _written_section(files, plugin):
    """The CRI section as config.toml and its imports write it, later files over earlier ones."""
    section = {}
    for index, text in enumerate(files or []):
        data = _loads(text, "config.toml" if index == 0 else "an imported file")
        section = _deep_merge(section, data.get("plugins", {}).get(plugin) or {})
    return section


def _low_level_runtime(section):
    """The runtime a new nvidia runtime starts as a copy of, as NVIDIA's nvidia-ctk makes it
    (v1.17.8, pkg/config/engine: GetLowLevelRuntimes, containerd's AddRuntime): the default
    runtime unless its name starts with nvidia, else runc, else crun; here only one whose shim is
    runc's (a copy of another shim's options, kata's say, means nothing to runc). {} if none."""
    containerd = section.get("containerd") or {}
    runtimes = containerd.get("runtimes") or {}
    default = containerd.get("default_runtime_name") or ""
    names = ([default] if default and not default.startswith("nvidia") else []) + ["runc", "crun"]
    for candidate in names:
        runtime = runtimes.get(candidate)
        if isinstance(runtime, dict) and runtime.get("runtime_type", RUNC_TYPE) in (RUNC_TYPE, ""):
            return runtime
    return {}


def containerd_nvidia_dropin(baseline_dump, settings, schema=None, files=None, low_level=True):
    """The drop-in as a dict: the effective CRI section from ``baseline_dump`` plus the nvidia runtime.

    settings: name, binary, cgroup_driver (auto|systemd|cgroupfs), default (bool), cdi (bool),
    cdi_spec_dirs (list). The baseline is ``containerd config dump`` without this drop-in.

    A runtime of that name in the baseline (the user's) keeps its settings; otherwise the runtime
    starts as a copy of the low-level runtime's, as NVIDIA's nvidia-ctk makes it (runc's, or the
    default runtime's), so that its pods run with every setting the node gives runc's. Then its
    shim is runc's, its BinaryName the NVIDIA runtime and SystemdCgroup as ``cgroup_driver`` says (auto: the
    copied runtime's own, as nvidia-ctk keeps it, else runc's in the dump).
    ``low_level=False`` makes no copy: what a version 2 drop-in written from ``files`` must show in
    containerd 2's version 3 dump (its copy of runc's settings as written, which containerd
    migrates), where the dump's own runc has containerd's defaults besides.

    ``schema`` is config.toml's own version (default: the dump's). containerd 2.x dumps its own
    version (3, or 4 from 2.3) whatever the file says; for a version-2 config.toml (a node upgraded
    from containerd 1.7) the drop-in must be version 2 too, or containerd 2.0 to 2.2 stop migrating
    config.toml (containerd pull request 12891). Its CRI section then comes from ``files`` (the texts
    of config.toml and its imports, in containerd's order, the drop-in left out), as they write it.
    """
    dump = _loads(baseline_dump, "containerd config dump")
    dumped = _schema_of(dump)
    schema = dumped if schema is None else int(schema)
    if schema not in CRI_PLUGIN or schema > dumped:
        raise AnsibleFilterError("containerd dumps config version %d; a drop-in of version %r cannot go with it" % (dumped, schema))
    plugin = CRI_PLUGIN[schema]
    if schema == dumped:
        section = dump.get("plugins", {}).get(plugin)
        if section is None:
            raise AnsibleFilterError("containerd config dump has no [plugins.%s] section: is the CRI plugin disabled?" % _string(plugin))
    else:
        if not files:
            raise AnsibleFilterError("a version %d drop-in for a containerd that dumps version %d needs the texts of config.toml "
                                     "and its imports" % (schema, dumped))
        section = _written_section(files, plugin)
    name = settings.get("name", "nvidia")
    runtimes = _runtimes(section)
    source = runtimes.get(name) or (_low_level_runtime(section) if low_level else {})
    runtime = copy.deepcopy(source)
    runtime["runtime_type"] = RUNC_TYPE
    options = dict(runtime.get("options") or {})
    options["BinaryName"] = settings["binary"]
    cgroup_driver = settings.get("cgroup_driver", "auto")
    own = (source.get("options") or {}).get("SystemdCgroup") if isinstance(source, dict) else None
    if cgroup_driver == "auto" and isinstance(own, bool):
        # nvidia-ctk leaves the copied runtime's own SystemdCgroup as it is (a default runtime other than runc,
        # crun through runc's shim say, can use systemd cgroups where runc keeps containerd's default).
        options["SystemdCgroup"] = own
    else:
        # From the dump: what runc really gets, config.toml's defaults included.
        options["SystemdCgroup"] = containerd_systemd_cgroup(baseline_dump, cgroup_driver)
    runtime["options"] = options
    runtimes[name] = runtime
    if settings.get("default"):
        section["containerd"]["default_runtime_name"] = name
    if settings.get("cdi"):
        section["enable_cdi"] = True
        section["cdi_spec_dirs"] = list(settings.get("cdi_spec_dirs") or DEFAULT_CDI_SPEC_DIRS)
    return {"version": schema, "plugins": {plugin: section}}


def _leaves(data, prefix=()):
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, prefix + (key,))
    else:
        yield prefix, data


def containerd_dump_problems(dump_text, baseline_dump, dropin):
    """What is wrong with the live ``containerd config dump`` after the drop-in: [] when nothing.

    Every setting of the drop-in must be in effect, and every other setting of the
    baseline (the user's configuration) must still have its value.
    """
    dump = dict(_leaves(_loads(dump_text, "containerd config dump")))
    ours = dict(_leaves(dropin))
    theirs = dict(_leaves(_loads(baseline_dump, "containerd config dump")))
    # Tables the drop-in sets something in: an empty table of the baseline (registry.mirrors, say)
    # that the drop-in fills is checked through the drop-in's own settings.
    set_by_dropin = {path[:end] for path in ours for end in range(1, len(path) + 1)}
    problems = []
    for path, value in ours.items():
        if path != ("version",) and dump.get(path, "<absent>") != value:
            problems.append("%s is %r, the drop-in sets %r" % (".".join(path), dump.get(path, "<absent>"), value))
    for path, value in theirs.items():
        if path in set_by_dropin or path[0] == "imports":
            continue
        if dump.get(path, "<absent>") != value:
            problems.append("%s changed from %r to %r" % (".".join(path), value, dump.get(path, "<absent>")))
    return problems


# ---------------------------------------------------------------- CRI-O

def crio_nvidia_dropin(settings):
    """CRI-O's drop-in for crio.conf.d: the nvidia runtime (and default runtime, CDI dirs when asked)."""
    name = settings.get("name", "nvidia")
    runtime = {"runtime_path": settings["binary"], "runtime_type": "oci"}
    crio_runtime = {}
    if settings.get("default"):
        crio_runtime["default_runtime"] = name
    crio_runtime["runtimes"] = {name: runtime}
    data = {"crio": {"runtime": crio_runtime}}
    if settings.get("cdi"):
        data["crio"]["runtime"] = dict({"cdi_spec_dirs": list(settings.get("cdi_spec_dirs") or DEFAULT_CDI_SPEC_DIRS)}, **crio_runtime)
    return data


# ---------------------------------------------------------------- Docker

def docker_daemon_config(current, settings):
    """daemon.json's settings with the nvidia runtime merged in, key by key; every user key kept.

    ``default-runtime`` is set to the runtime when asked; when not asked and it names
    the runtime, it is removed (docker falls back to runc). CDI sets features.cdi.
    """
    if current is None:
        current = {}
    if not isinstance(current, dict):
        raise AnsibleFilterError("daemon.json must hold a JSON object, found %s" % type(current).__name__)
    name = settings.get("name", "nvidia")
    merged = dict(current)
    runtimes = dict(merged.get("runtimes") or {})
    runtime = dict(runtimes.get(name) or {})
    runtime["path"] = settings["binary"]
    runtime.setdefault("args", [])
    runtimes[name] = runtime
    merged["runtimes"] = runtimes
    if settings.get("default"):
        merged["default-runtime"] = name
    elif merged.get("default-runtime") == name:
        del merged["default-runtime"]
    if settings.get("cdi"):
        merged["features"] = dict(merged.get("features") or {}, cdi=True)
    return merged


# ---------------------------------------------------------------- the NVIDIA runtime's config.toml

# Top-level keys of the NVIDIA runtime's /etc/nvidia-container-runtime/config.toml and the value
# the toolkit takes when a key is absent (internal/config in NVIDIA/nvidia-container-toolkit).
NVIDIA_RUNTIME_DEFAULTS = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": True,
    "accept-nvidia-visible-devices-as-volume-mounts": False,
}


def _same(one, other):
    return type(one) is type(other) and one == other


def nvidia_runtime_config_set(text, settings):
    """The NVIDIA runtime's config.toml text with top-level keys set, every other line as it was.

    ``settings`` maps top-level keys to plain values. A key that already has the
    value (or is absent and the toolkit's default is that value) is left alone,
    so a file that already says so comes back unchanged. Otherwise its top-level
    line is replaced in place, or a line is added below the toolkit's commented
    default (``#key = ...``), else before the first table. A missing or empty
    file becomes just the settings. The result is parsed back and compared.
    """
    if not isinstance(settings, dict) or not all(
            isinstance(key, str) and isinstance(value, (bool, int, float, str)) for key, value in settings.items()):
        raise AnsibleFilterError("nvidia_runtime_config_set sets top-level keys to plain values, got %r" % (settings,))
    before = _loads(text, "config.toml")
    wanted = dict((key, value) for key, value in settings.items()
                  if not _same(before.get(key, NVIDIA_RUNTIME_DEFAULTS.get(key)), value))
    if not wanted:
        return text
    if not (text or "").strip():
        return "".join("%s = %s\n" % (_key(key), _value(value, [key])) for key, value in wanted.items())
    # Split at \n only and keep a \r before it, as containerd_set_imports does.
    lines = text.split("\n")
    eol = "\r" if lines[0].endswith("\r") else ""
    for key, value in wanted.items():
        end = _top_level_span(lines)
        if end == len(lines) and lines[-1] == "":
            end -= 1  # a file without tables: before its final line end
        assignment = "%s = %s%s" % (_key(key), _value(value, [key]), eol)
        names = "(?:%s)" % "|".join(re.escape(form) for form in (key, _string(key), "'%s'" % key))
        setting = [index for index in range(end) if re.match(r"^\s*%s\s*=" % names, lines[index])]
        if setting:
            lines[setting[0]] = assignment
            continue
        comment = [index for index in range(end) if re.match(r"^\s*#\s*%s\s*=" % names, lines[index])]
        lines.insert(comment[0] + 1 if comment else end, assignment)
    result = "\n".join(lines)
    after = _loads(result, "config.toml as rewritten")
    if (any(not _same(after.get(key), value) for key, value in settings.items() if key in wanted)
            or dict((k, v) for k, v in after.items() if k not in wanted) != dict(
                (k, v) for k, v in before.items() if k not in wanted)):
        raise AnsibleFilterError("config.toml: could not set %s in place without changing anything else; set %s"
                                 % (", ".join(sorted(wanted)), "it" if len(wanted) == 1 else "them") + " by hand")
    return result


# ---------------------------------------------------------------- a lost connection or a refusal

# What Ansible's connection plugins say when the node stopped answering (ssh's own words, and
# ansible-core's for a send that failed), as opposed to what a runtime says when it refuses its
# configuration. Only a task's own message and a module's stderr are read: a command's stdout and
# stderr are the runtime's words (`ctr: ... connection refused` is containerd down, not the node).
_CONNECTION_LOST = re.compile(
    r"Failed to connect to the host via|Data could not be sent to remote host|Shared connection to \S+ closed"
    r"|Connection to \S+ closed by remote host|Connection (?:reset|timed out|closed) by|mux_client_\w+: read"
    r"|kex_exchange_identification|Broken pipe|Connection timed out during banner exchange")


def runtime_connection_lost(results, system_state=None):
    """Why the restart of a runtime cannot be judged (the connection to the node was lost), or ''.

    ``results``: the task results of the restart and its checks (one, or a list; undefined or
    skipped ones may be left as {}); ``system_state``: systemd's SystemState afterwards, as
    ``systemctl is-system-running`` or ``busctl get-property ... SystemState`` (``s "stopping"``) print
    it (``stopping``: the node is shutting down, and took the runtime down with it), or the registered
    result of that command. A refused configuration gives ''.
    """
    if isinstance(results, dict) or results is None:
        results = [results]
    for result in results:
        if not isinstance(result, dict):
            continue
        msg = str(result.get("msg") or "")
        if result.get("unreachable"):
            return "the node could not be reached: %s" % (msg.strip() or "no answer")
        if not result.get("failed"):
            continue
        for text in (msg, str(result.get("module_stderr") or "")):
            found = _CONNECTION_LOST.search(text)
            if found:
                return "the connection to the node broke: %s" % found.group(0)
        if msg.startswith("MODULE FAILURE") and result.get("rc") == 255:
            return "the connection to the node broke (ssh exited 255)"
    state = system_state
    if isinstance(state, dict):
        if state.get("unreachable"):
            return "the node could not be reached: %s" % (str(state.get("msg") or "").strip() or "no answer")
        state = state.get("stdout")
    # as systemctl is-system-running prints it, or as busctl get-property does (s "stopping")
    if isinstance(state, str) and re.sub(r'^s\s+"(.*)"$', r"\1", state.strip()) == "stopping":
        return "the node is shutting down"
    return ""


class FilterModule:
    """Runtime configuration for the NVIDIA container runtime."""

    def filters(self):
        return {
            "containerd_schema": containerd_schema,
            "containerd_config_schema": containerd_config_schema,
            "toml_imports": toml_imports,
            "containerd_set_imports": containerd_set_imports,
            "containerd_add_import": containerd_add_import,
            "containerd_systemd_cgroup": containerd_systemd_cgroup,
            "containerd_nvidia_dropin": containerd_nvidia_dropin,
            "containerd_dump_problems": containerd_dump_problems,
            "crio_nvidia_dropin": crio_nvidia_dropin,
            "docker_daemon_config": docker_daemon_config,
            "nvidia_runtime_config_set": nvidia_runtime_config_set,
            "runtime_connection_lost": runtime_connection_lost,
        }
