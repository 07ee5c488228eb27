"""Take one file out of a Debian package from Debian's archive, the package checked by its SHA-256.

    python3 fetch-deb.py POOL_PATH SHA256 MEMBER DEST
    e.g. fetch-deb.py pool/main/e/etcd/etcd-server_3.5.16-4_amd64.deb 0875...  usr/bin/etcd .cache/etcd

The archive is $DEBIAN_MIRROR (http://deb.debian.org/debian by default), as apt and the test
images use it. A package whose checksum differs is refused; nothing is written then.
"""

import hashlib
import io
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import urllib.request


def main():
    pool_path, sha256, member, dest = sys.argv[1:5]
    mirror = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian").rstrip("/")
    url = f"{mirror}/{pool_path}"
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 (the archive, http as apt)
        data = response.read()
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        sys.exit(f"{url}: SHA-256 {found}, expected {sha256} (tests/controlplane/versions.env)")
    with tempfile.TemporaryDirectory() as tmp:
        deb = pathlib.Path(tmp) / "package.deb"
        deb.write_bytes(data)
        # dpkg-deb reads whichever compression the package's data member has
        tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        names = {name.lstrip("./"): name for name in archive.getnames()}
        if member not in names:
            sys.exit(f"{url} has no {member}")
        content = archive.extractfile(names[member]).read()
    target = pathlib.Path(dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(content)
    partial.chmod(0o755)
    partial.replace(target)
    print(f"{target}: {member} of {url}")


if __name__ == "__main__":
    main()
