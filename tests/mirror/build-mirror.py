#!/usr/bin/env python
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build a GPG-signed, flat local apt repository of STAND-IN packages.

The repository is laid out like NVIDIA's CUDA network repository, a flat
repository that apt reads with ``deb [signed-by=KEYRING] URL /``, and also
serves as a plain "newer candidate" mirror.  Every package carries
/usr/share/doc/<name>/STAND-IN, plus the few files a list gives it (an apt
preferences file, a systemd unit and the shell script it runs), each saying it
is a stand-in: they have NVIDIA's package names and version strings but are
NOT NVIDIA software.  The exceptions are the files a list takes from ``source``:
a real program built for the tests from its maker's source at a pinned version
(tests/nodetools: NVIDIA's nvidia-ctk, nvidia-container-runtime and nvidia-cdi-hook),
which the package's STAND-IN text names.

    build-mirror.py --packages packages-cuda.json --out DIR [--key-name NAME] [--sources DIR]
    build-mirror.py --self-check [--packages FILE] [--sources DIR]

Writes, replacing DIR when it is an earlier output of this script:

    DIR/repo/          *.deb Packages Packages.gz Release InRelease Release.gpg
    DIR/keyring.gpg    signing public key, binary keyring for signed-by=
    DIR/key.asc        the same key, ASCII armored
    DIR/fingerprint    its fingerprint, 40 uppercase hex digits
    DIR/wrong-key.asc  an unrelated public key, for negative tests
    DIR/wrong-fingerprint

Needs dpkg-deb, apt-ftparchive and gpg (gpg-agent, gpgconf).  GnuPG runs in
temporary home directories, never in ~/.gnupg; the secret keys are thrown away.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_KEY_NAME = "gpufleet.nvidia test mirror"
KEY_EMAIL = "test@gpufleet.invalid"
WRONG_KEY_NAME = "gpufleet.nvidia WRONG test key"
WRONG_KEY_EMAIL = "wrong@gpufleet.invalid"
MAINTAINER = "gpufleet.nvidia tests <test@gpufleet.invalid>"
DESCRIPTION_PREFIX = "STAND-IN for tests:"
ORIGIN = "gpufleet.nvidia tests"
LABEL = "gpufleet.nvidia stand-in mirror"
# Fixed timestamps in the .deb files: same list, same bytes.
SOURCE_DATE_EPOCH = 1735689600  # 2025-01-01T00:00:00Z
REPO_FILES = ("Packages", "Packages.gz", "Release", "InRelease", "Release.gpg")
TOP_FILES = ("keyring.gpg", "key.asc", "fingerprint", "wrong-key.asc", "wrong-fingerprint")

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")
VERSION_RE = re.compile(r"^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")
ARCHES = ("all", "amd64")
KEYS_REQUIRED = ("name", "version", "description")
KEYS_OPTIONAL = ("arch", "depends", "provides", "conflicts", "replaces", "section", "files")
FILE_KEYS = ("path", "content", "source", "mode")
# Where a file's ``source`` is read from: the programs tests/nodetools/build.sh builds.
DEFAULT_SOURCES = os.path.join(os.path.dirname(os.path.dirname(HERE)), ".cache", "nodetools", "bin")
SOURCE_RE = re.compile(r"^[A-Za-z0-9._+-]+$")
FILE_PATH_RE = re.compile(r"^/(etc|lib|usr)/[A-Za-z0-9._/+-]+$")
# Replaced in a file's path and content (not ${Version} and other shell or dpkg-query forms).
PLACEHOLDERS = ("{name}", "{version}", "{upstream}")

STAND_IN_TEXT = """\
{name} {version} ({arch})

This package is a STAND-IN for tests of the gpufleet.nvidia Ansible
collection. It carries the name and version string of a package from
NVIDIA's or Debian's repositories but contains nothing else: it is NOT
NVIDIA software, has no driver, library or tool in it, and must never be
installed on a real system.
"""

REAL_FILE_TEXT = """\
An exception: {path} is a real program, not a stand-in. It was built for
these tests from its maker's source at a pinned version (tests/nodetools in
the gpufleet.nvidia repository); the package around it is still a stand-in.
"""


class MirrorError(Exception):
    """A problem with the input or with one of the tools."""


def run(cmd, env=None, cwd=None):
    """Run a command and return its stdout; raise MirrorError with its stderr when it fails."""
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        error = proc.stderr.decode(errors="replace").strip()
        raise MirrorError("%s failed (rc=%d): %s" % (" ".join(cmd), proc.returncode, error))
    return proc.stdout


def tool_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPG_", "GNUPG"))}
    env["LC_ALL"] = "C"
    env["SOURCE_DATE_EPOCH"] = str(SOURCE_DATE_EPOCH)
    return env


# ---------------------------------------------------------------- package list

def load_packages(path, sources=DEFAULT_SOURCES):
    """Read and validate a package list; return it sorted by (name, version, arch)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise MirrorError("cannot read package list %s: %s" % (path, exc)) from exc
    if not isinstance(data, list) or not data:
        raise MirrorError("%s: expected a non-empty JSON list of objects" % path)
    packages, seen = [], set()
    for index, entry in enumerate(data):
        where = "%s[%d]" % (path, index)
        if not isinstance(entry, dict):
            raise MirrorError("%s: not an object" % where)
        unknown = set(entry) - set(KEYS_REQUIRED) - set(KEYS_OPTIONAL)
        missing = [k for k in KEYS_REQUIRED if k not in entry]
        if unknown or missing:
            raise MirrorError("%s: unknown keys %s, missing keys %s" % (where, sorted(unknown), missing))
        pkg = {"arch": "all", "depends": "", "provides": "", "conflicts": "", "replaces": "", "section": "misc"}
        pkg.update(entry)
        pkg["files"] = load_files(pkg.pop("files", []), pkg, where, sources)
        for key, value in pkg.items():
            if key != "files" and (not isinstance(value, str) or "\n" in value):
                raise MirrorError("%s: %s must be a one-line string" % (where, key))
        if not NAME_RE.match(pkg["name"]):
            raise MirrorError("%s: bad package name %r" % (where, pkg["name"]))
        if not VERSION_RE.match(pkg["version"]):
            raise MirrorError("%s: bad version %r" % (where, pkg["version"]))
        if pkg["arch"] not in ARCHES:
            raise MirrorError("%s: arch must be one of %s" % (where, ", ".join(ARCHES)))
        if not pkg["description"].strip():
            raise MirrorError("%s: empty description" % where)
        ident = (pkg["name"], pkg["version"], pkg["arch"])
        if ident in seen:
            raise MirrorError("%s: duplicate %s %s %s" % ((where,) + ident))
        seen.add(ident)
        packages.append(pkg)
    return sorted(packages, key=lambda p: (p["name"], p["version"], p["arch"]))


def expand(text, pkg):
    upstream = pkg["version"].split(":", 1)[-1].rsplit("-", 1)[0]
    for token, value in zip(PLACEHOLDERS, (pkg["name"], pkg["version"], upstream)):
        text = text.replace(token, value)
    return text


def load_files(files, pkg, where, sources=DEFAULT_SOURCES):
    """Validate a package's extra files; return them with placeholders expanded, sorted by path.

    A file has either ``content`` (text that says it is a STAND-IN) or ``source``: the name of a
    real program in SOURCES, read as bytes (``content`` is then those bytes)."""
    if not isinstance(files, list):
        raise MirrorError("%s: files must be a list of objects" % where)
    loaded, paths = [], set()
    for index, entry in enumerate(files):
        at = "%s.files[%d]" % (where, index)
        if (not isinstance(entry, dict) or set(entry) - set(FILE_KEYS) or "path" not in entry
                or ("content" in entry) == ("source" in entry)):
            raise MirrorError("%s: expected an object with path, content or source, and optionally mode" % at)
        if not all(isinstance(entry[key], str) for key in entry):
            raise MirrorError("%s: path, content and mode must be strings" % at)
        path = expand(entry["path"], pkg)
        if not FILE_PATH_RE.match(path) or "/../" in path or path.startswith("/usr/share/doc/%s/" % pkg["name"]):
            raise MirrorError("%s: bad path %r" % (at, path))
        if path in paths:
            raise MirrorError("%s: duplicate path %s" % (at, path))
        mode = entry.get("mode", "0644")
        if mode not in ("0644", "0755"):
            raise MirrorError("%s: mode must be 0644 or 0755" % at)
        if "source" in entry:
            if not SOURCE_RE.match(entry["source"]):
                raise MirrorError("%s: source must be a file name, got %r" % (at, entry["source"]))
            source = os.path.join(sources, entry["source"])
            try:
                with open(source, "rb") as handle:
                    content = handle.read()
            except OSError as exc:
                raise MirrorError("%s: cannot read %s (%s): build it first (tests/nodetools/build.sh)" % (at, source, exc)) from exc
            paths.add(path)
            loaded.append({"path": path, "content": content, "mode": mode, "real": True})
            continue
        content = expand(entry["content"], pkg)
        if "STAND-IN" not in content:
            raise MirrorError("%s: the file must say it is a STAND-IN" % at)
        paths.add(path)
        loaded.append({"path": path, "content": content.encode(), "mode": mode, "real": False})
    return sorted(loaded, key=lambda item: item["path"])


def deb_filename(pkg):
    version = pkg["version"].split(":", 1)[-1]  # no epoch in file names, as Debian does
    return "%s_%s_%s.deb" % (pkg["name"], version, pkg["arch"])


def synopsis(pkg):
    text = pkg["description"].strip()
    if not text.startswith(DESCRIPTION_PREFIX):
        text = "%s %s" % (DESCRIPTION_PREFIX, text)
    return text


# ---------------------------------------------------------------- packages

def build_deb(pkg, workdir, repo_dir, env):
    root = os.path.join(workdir, "%s_%s_%s" % (pkg["name"], pkg["version"].replace(":", "%3a"), pkg["arch"]))
    docdir = os.path.join(root, "usr", "share", "doc", pkg["name"])
    os.makedirs(docdir)
    os.makedirs(os.path.join(root, "DEBIAN"))
    stand_in = STAND_IN_TEXT.format(**pkg).encode()
    for item in pkg["files"]:
        if item["real"]:
            stand_in += b"\n" + REAL_FILE_TEXT.format(path=item["path"]).encode()
    with open(os.path.join(docdir, "STAND-IN"), "wb") as handle:
        handle.write(stand_in)
    size = len(stand_in)
    modes = {}
    for item in pkg["files"]:
        target = os.path.join(root, item["path"].lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(item["content"])
        modes[target] = int(item["mode"], 8)
        size += len(item["content"])
    fields = [
        ("Package", pkg["name"]),
        ("Version", pkg["version"]),
        ("Architecture", pkg["arch"]),
        ("Maintainer", MAINTAINER),
        ("Installed-Size", str(max(1, (size + 1023) // 1024))),
        ("Depends", pkg["depends"]),
        ("Conflicts", pkg["conflicts"]),
        ("Replaces", pkg["replaces"]),
        ("Provides", pkg["provides"]),
        ("Section", pkg["section"]),
        ("Priority", "optional"),
        ("Description", synopsis(pkg)),
    ]
    control = "".join("%s: %s\n" % (k, v) for k, v in fields if v)
    real = [item["path"] for item in pkg["files"] if item["real"]]
    control += (" This is a test stand-in with the name and version of a package from\n"
                " NVIDIA's or Debian's repositories. It is NOT NVIDIA software: it only\n"
                " holds /usr/share/doc/%s/STAND-IN%s.\n"
                % (pkg["name"], " and stand-in files" if len(real) < len(pkg["files"]) else ""))
    if real:
        control += (" Except %s: built for the tests from its maker's source at a\n"
                    " pinned version (tests/nodetools), not a stand-in.\n" % ", ".join(real))
    with open(os.path.join(root, "DEBIAN", "control"), "w", encoding="utf-8") as handle:
        handle.write(control)
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), modes.get(os.path.join(dirpath, name), 0o644))
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            os.utime(os.path.join(dirpath, name), (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))
    target = os.path.join(repo_dir, deb_filename(pkg))
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, target], env=env)


# ---------------------------------------------------------------- GnuPG

class GnuPG:
    """One throwaway GnuPG home directory holding one generated key."""

    def __init__(self, uid, env):
        self.env = env
        # Short path: gpg-agent's socket path must fit in sun_path.
        self.home = tempfile.mkdtemp(prefix="gfm-gpg-")
        os.chmod(self.home, 0o700)
        self.fingerprint = None
        self.gpg("--passphrase", "", "--pinentry-mode", "loopback",
                 "--quick-gen-key", uid, "rsa3072", "sign", "never")
        listing = self.gpg("--with-colons", "--fingerprint", "--list-keys", uid).decode()
        fprs = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]
        if not fprs or not re.match(r"^[0-9A-F]{40}$", fprs[0].upper()):
            raise MirrorError("could not read the fingerprint of the new key:\n%s" % listing)
        self.fingerprint = fprs[0].upper()

    def gpg(self, *args):
        return run(["gpg", "--homedir", self.home, "--batch", "--no-tty", "--quiet"] + list(args), env=self.env)

    def export(self, armor=False):
        return self.gpg(*((["--armor"] if armor else []) + ["--export", self.fingerprint]))

    def sign(self, path, mode, output):
        self.gpg("--yes", "--local-user", self.fingerprint, "--digest-algo", "SHA512",
                 "--armor", mode, "--output", output, path)

    def close(self):
        subprocess.run(["gpgconf", "--homedir", self.home, "--kill", "all"], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(self.home, ignore_errors=True)


# ---------------------------------------------------------------- repository

def read_text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def write_file(path, data):
    with open(path, "wb") as handle:
        handle.write(data)


def build_repo(packages, stage, key_name, env):
    repo_dir = os.path.join(stage, "repo")
    work = os.path.join(stage, ".work")
    os.makedirs(repo_dir)
    os.makedirs(work)
    for pkg in packages:
        build_deb(pkg, work, repo_dir, env)

    # Flat repository: indexes next to the .deb files, Filename: ./x.deb
    packages_text = run(["apt-ftparchive", "packages", "."], env=env, cwd=repo_dir)
    write_file(os.path.join(repo_dir, "Packages"), packages_text)
    write_file(os.path.join(repo_dir, "Packages.gz"), gzip.compress(packages_text, 9, mtime=0))
    release = run(["apt-ftparchive",
                   "-o", "APT::FTPArchive::Release::Origin=" + ORIGIN,
                   "-o", "APT::FTPArchive::Release::Label=" + LABEL,
                   "-o", "APT::FTPArchive::Release::Description=STAND-IN packages for gpufleet.nvidia tests",
                   "release", "."], env=env, cwd=repo_dir)
    write_file(os.path.join(work, "Release"), release)
    shutil.move(os.path.join(work, "Release"), os.path.join(repo_dir, "Release"))

    keys = []
    try:
        keys.append(GnuPG("%s <%s>" % (key_name, KEY_EMAIL), env))
        keys.append(GnuPG("%s <%s>" % (WRONG_KEY_NAME, WRONG_KEY_EMAIL), env))
        signer, wrong = keys
        release_path = os.path.join(repo_dir, "Release")
        signer.sign(release_path, "--clearsign", os.path.join(repo_dir, "InRelease"))
        signer.sign(release_path, "--detach-sign", os.path.join(repo_dir, "Release.gpg"))
        write_file(os.path.join(stage, "keyring.gpg"), signer.export())
        write_file(os.path.join(stage, "key.asc"), signer.export(armor=True))
        write_file(os.path.join(stage, "fingerprint"), (signer.fingerprint + "\n").encode())
        write_file(os.path.join(stage, "wrong-key.asc"), wrong.export(armor=True))
        write_file(os.path.join(stage, "wrong-fingerprint"), (wrong.fingerprint + "\n").encode())
    finally:
        for key in keys:
            key.close()
    shutil.rmtree(work)
    for dirpath, dirnames, filenames in os.walk(stage):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


def looks_like_output(path):
    """True when PATH is empty or holds only what this script writes."""
    entries = set(os.listdir(path))
    return not entries or (entries <= {"repo"} | set(TOP_FILES) and "repo" in entries)


def build(packages_path, out, key_name, sources=DEFAULT_SOURCES):
    packages = load_packages(packages_path, sources)
    out = os.path.abspath(out)
    if os.path.lexists(out) and not (os.path.isdir(out) and not os.path.islink(out) and looks_like_output(out)):
        raise MirrorError("%s exists and is not an output of this script; not replacing it" % out)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=".%s." % os.path.basename(out), dir=parent)
    try:
        build_repo(packages, stage, key_name, tool_env())
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return packages


# ---------------------------------------------------------------- self-check

def parse_stanzas(text):
    stanzas = []
    for block in text.strip().split("\n\n"):
        fields, last = {}, None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and last:
                fields[last] += "\n" + line
            else:
                last, value = line.split(":", 1) if ":" in line else (line, "")
                fields[last] = value.strip()
        stanzas.append(fields)
    return stanzas


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def verify_signatures(out, keyring, expect_fpr, env):
    """gpg --verify InRelease and Release.gpg against KEYRING; return True when both are good from EXPECT_FPR."""
    home = tempfile.mkdtemp(prefix="gfm-chk-")
    os.chmod(home, 0o700)
    repo = os.path.join(out, "repo")
    try:
        base = ["gpg", "--homedir", home, "--batch", "--no-tty", "--status-fd", "1"]
        if keyring.endswith(".asc"):
            run(base + ["--import", keyring], env=env)
        else:
            base += ["--no-default-keyring", "--keyring", os.path.abspath(keyring)]
        good = True
        for args in (["--verify", os.path.join(repo, "InRelease")],
                     ["--verify", os.path.join(repo, "Release.gpg"), os.path.join(repo, "Release")]):
            proc = subprocess.run(base + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
            status = proc.stdout.decode()
            good = good and proc.returncode == 0 and ("[GNUPG:] VALIDSIG %s " % expect_fpr) in status
        return good
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(home, ignore_errors=True)


def check_output(out, packages):
    """Return a list of problems with a built mirror (empty when fine)."""
    env = tool_env()
    problems = []
    repo = os.path.join(out, "repo")
    debs = sorted(deb_filename(p) for p in packages)
    expect = sorted(debs + list(REPO_FILES))
    if sorted(os.listdir(repo)) != expect:
        problems.append("repo/ holds %s, expected %s" % (sorted(os.listdir(repo)), expect))
    if sorted(os.listdir(out)) != sorted(("repo",) + TOP_FILES):
        problems.append("unexpected top-level files: %s" % sorted(os.listdir(out)))
    fpr = read_text(os.path.join(out, "fingerprint"))
    wrong_fpr = read_text(os.path.join(out, "wrong-fingerprint"))
    for text in (fpr, wrong_fpr):
        if not re.match(r"^[0-9A-F]{40}\n$", text):
            problems.append("fingerprint file is not 40 uppercase hex digits: %r" % text)
    fpr, wrong_fpr = fpr.strip(), wrong_fpr.strip()
    if fpr == wrong_fpr:
        problems.append("the wrong key is the signing key")

    # Signatures: good with keyring.gpg and key.asc, bad with the wrong key.
    if not verify_signatures(out, os.path.join(out, "keyring.gpg"), fpr, env):
        problems.append("gpg --verify with keyring.gpg did not report a good signature by %s" % fpr)
    if not verify_signatures(out, os.path.join(out, "key.asc"), fpr, env):
        problems.append("gpg --verify with key.asc did not report a good signature by %s" % fpr)
    if verify_signatures(out, os.path.join(out, "wrong-key.asc"), fpr, env):
        problems.append("gpg --verify succeeded with the wrong key")
    inrelease = read_text(os.path.join(repo, "InRelease"))
    release_text = read_text(os.path.join(repo, "Release"))
    if release_text.rstrip("\n") not in inrelease:
        problems.append("InRelease does not clearsign Release")

    # Release: fields, and hashes of the indexes.
    release = parse_stanzas(release_text)[0]
    for field in ("Origin", "Label", "Date", "SHA256"):
        if field not in release:
            problems.append("Release has no %s field" % field)
    hashes = {}
    for line in release.get("SHA256", "").splitlines()[1:]:
        digest, _size, name = line.split()
        hashes[name] = digest
    for name in ("Packages", "Packages.gz"):
        if hashes.get(name) != sha256(os.path.join(repo, name)):
            problems.append("Release SHA256 of %s does not match" % name)
    with gzip.open(os.path.join(repo, "Packages.gz"), "rb") as handle:
        packages_gz = handle.read()

    # Packages: what apt-ftparchive reads from the .deb files now, and the list.
    fresh = run(["apt-ftparchive", "packages", "."], env=env, cwd=repo)
    with open(os.path.join(repo, "Packages"), "rb") as handle:
        packages_raw = handle.read()
    if fresh != packages_raw or packages_gz != packages_raw:
        problems.append("Packages/Packages.gz differ from apt-ftparchive packages output")
    stanzas = parse_stanzas(packages_raw.decode())
    seen = sorted((s.get("Package"), s.get("Version"), s.get("Architecture")) for s in stanzas)
    wanted = sorted((p["name"], p["version"], p["arch"]) for p in packages)
    if seen != wanted:
        problems.append("Packages lists %s, expected %s" % (seen, wanted))
    by_ident = {(p["name"], p["version"], p["arch"]): p for p in packages}
    for stanza in stanzas:
        pkg = by_ident.get((stanza.get("Package"), stanza.get("Version"), stanza.get("Architecture")))
        if pkg is None:
            continue
        label = "%s %s" % (pkg["name"], pkg["version"])
        if stanza.get("Filename") != "./" + deb_filename(pkg):
            problems.append("%s: Filename %s" % (label, stanza.get("Filename")))
        elif stanza.get("SHA256") != sha256(os.path.join(repo, deb_filename(pkg))):
            problems.append("%s: SHA256 mismatch" % label)
        if not stanza.get("Description", "").startswith(DESCRIPTION_PREFIX):
            problems.append("%s: Description does not start with %r" % (label, DESCRIPTION_PREFIX))
        if stanza.get("Maintainer") != MAINTAINER or stanza.get("Priority") != "optional":
            problems.append("%s: Maintainer/Priority wrong" % label)
        for field in ("depends", "provides", "conflicts", "replaces"):
            if stanza.get(field.title(), "") != pkg[field]:
                problems.append("%s: %s differs from the list" % (label, field.title()))
        contents = run(["dpkg-deb", "--fsys-tarfile", os.path.join(repo, deb_filename(pkg))], env=env)
        listing = subprocess.run(["tar", "-tvf", "-"], input=contents, stdout=subprocess.PIPE, check=True)
        files = sorted((line.split()[-1], line.split()[0]) for line in listing.stdout.decode().splitlines()
                       if not line.startswith("d"))
        expected = sorted([("./usr/share/doc/%s/STAND-IN" % pkg["name"], "-rw-r--r--")]
                          + [("." + item["path"], "-rwxr-xr-x" if item["mode"] == "0755" else "-rw-r--r--")
                             for item in pkg["files"]])
        if files != expected:
            problems.append("%s: contents %s, expected %s" % (label, files, expected))
        with tarfile.open(fileobj=io.BytesIO(contents)) as tar:
            for item in pkg["files"]:
                member = tar.extractfile("." + item["path"])
                if member is None or member.read() != item["content"]:
                    problems.append("%s: %s is not the bytes of the list's file" % (label, item["path"]))
    return problems


def self_check(package_files, sources=DEFAULT_SOURCES):
    failures = 0
    for path in package_files:
        tmp = tempfile.mkdtemp(prefix="gfm-selfcheck-")
        try:
            out = os.path.join(tmp, "mirror")
            packages = build(path, out, DEFAULT_KEY_NAME, sources)
            first_fpr = read_text(os.path.join(out, "fingerprint"))
            build(path, out, DEFAULT_KEY_NAME, sources)  # re-run into the same --out replaces it
            problems = check_output(out, packages)
            if first_fpr == read_text(os.path.join(out, "fingerprint")):
                problems.append("re-running did not replace the output")
        except MirrorError as exc:
            problems = [str(exc)]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for problem in problems:
            print("FAIL %s: %s" % (os.path.basename(path), problem), file=sys.stderr)
        if not problems:
            print("ok   %s: %d packages, signatures and indexes verified" % (os.path.basename(path), len(packages)))
        failures += bool(problems)
    return 1 if failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--packages", help="JSON package list (with --self-check: default both lists here)")
    parser.add_argument("--out", help="output directory; replaced when it is an earlier output")
    parser.add_argument("--key-name", default=DEFAULT_KEY_NAME,
                        help="name in the signing key's user ID (default: %(default)s)")
    parser.add_argument("--sources", default=DEFAULT_SOURCES,
                        help="folder of the real programs a list's files take by source (default: %(default)s)")
    parser.add_argument("--self-check", action="store_true",
                        help="build into a temporary directory and verify the result")
    args = parser.parse_args(argv)
    for tool in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgconf"):
        if shutil.which(tool) is None:
            parser.error("%s is not installed" % tool)
    if args.self_check:
        files = [args.packages] if args.packages else [os.path.join(HERE, name) for name in sorted(os.listdir(HERE))
                                                       if name.startswith("packages-") and name.endswith(".json")]
        return self_check(files, args.sources)
    if not args.packages or not args.out:
        parser.error("--packages and --out are required")
    if "<" in args.key_name or ">" in args.key_name or not args.key_name.strip():
        parser.error("--key-name must be a plain name")
    try:
        packages = build(args.packages, args.out, args.key_name.strip(), args.sources)
    except MirrorError as exc:
        print("build-mirror: %s" % exc, file=sys.stderr)
        return 1
    print("built %d packages into %s, signed by %s"
          % (len(packages), args.out, read_text(os.path.join(args.out, "fingerprint")).strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
