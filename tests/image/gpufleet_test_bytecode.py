"""Bytecode cache for code imported from zip archives, in the molecule test images and venvs only.

Every Ansible task runs its module from an AnsiballZ zip, and zipimport compiles each
module_utils file from source on every import: CPython keeps no bytecode for zip archives.
In the test images this costs more CPU than the modules' own work. This hook keeps the
compiled code of each source file under CACHE_DIR, keyed by the Python release's bytecode
magic number, the optimisation level, the file's path inside its archive and a SHA-256 of its
source, so a file is compiled once per container instead of once per task. A module runs the
same code it would run without the cache; only compile() is skipped, and with it the
compile-time warnings (a SyntaxWarning is printed by the first task only). Nothing of it goes into the
collection or onto a user's node. The molecule controllers' venvs carry it too, for the modules
they run on localhost, with GPUFLEET_TEST_BYTECODE_DIR naming a folder of the checkout's.
"""
import os
import zipimport

IMAGE_CACHE_DIR = "/var/cache/gpufleet-test-bytecode"
CACHE_DIR = os.environ.get("GPUFLEET_TEST_BYTECODE_DIR") or IMAGE_CACHE_DIR


def _member(pathname):
    # pathname is ARCHIVE/PATH/IN/ARCHIVE.py; the archive's own path changes at every task.
    marker = ".zip" + os.sep
    index = pathname.rfind(marker)
    return pathname[index + len(marker):] if index >= 0 else pathname


def _install():
    compile_source = getattr(zipimport, "_compile_source", None)
    if compile_source is None:
        return
    if CACHE_DIR != IMAGE_CACHE_DIR:
        try:
            os.makedirs(CACHE_DIR, exist_ok=True)
        except OSError:
            return
    if not os.access(CACHE_DIR, os.W_OK):
        return

    def cached_compile_source(pathname, source):
        # Imported here, not at start-up: most Python processes in the image import no zip.
        import hashlib  # pylint: disable=import-outside-toplevel
        import marshal  # pylint: disable=import-outside-toplevel
        import sys  # pylint: disable=import-outside-toplevel
        from importlib.util import MAGIC_NUMBER  # pylint: disable=import-outside-toplevel

        import _imp  # pylint: disable=import-outside-toplevel

        key = b"%s\0%d\0%s\0" % (MAGIC_NUMBER, sys.flags.optimize, _member(pathname).encode())
        digest = hashlib.sha256(key + source).hexdigest()
        path = os.path.join(CACHE_DIR, digest)
        try:
            with open(path, "rb") as handle:
                code = marshal.loads(handle.read())
        except (OSError, EOFError, ValueError, TypeError):
            code = compile_source(pathname, source)
            partial = f"{path}.{os.getpid()}"
            try:
                with open(partial, "wb") as handle:
                    handle.write(marshal.dumps(code))
                os.replace(partial, path)
            except OSError:
                pass
            return code
        _imp._fix_co_filename(code, pathname)  # pylint: disable=protected-access
        return code

    zipimport._compile_source = cached_compile_source  # pylint: disable=protected-access


_install()
