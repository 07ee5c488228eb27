# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for the get-pip script that ansible-test downloads into its cache.

ansible-test bootstraps pip in each of its virtual environments with a
get-pip script fetched from a host that CI cannot reach. This script does the
same job from what CI can reach: it installs the packages ansible-test asks
for (the pinned pip, and setuptools and wheel unless told not to) from PyPI
into the running Python's environment, with the project's pinned uv when
scripts/ansible-test.sh wrote its path below (seconds less per environment
than a pip that bootstraps itself), else with Python's own ensurepip and then
pip. scripts/ansible-test.sh copies it to ~/.ansible/test/cache/get_pip_<ver>.py.
"""

import os
import subprocess
import sys

# get-pip options that pip install itself does not know.
_GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")
# Options ansible-test passes that concern a pip run only.
_PIP_ONLY = ("--disable-pip-version-check",)
# The uv of the project's .venvs/uv, written here by scripts/ansible-test.sh.
UV = ""


def main():
    args = [arg for arg in sys.argv[1:] if arg not in _GET_PIP_ONLY]
    if UV and os.access(UV, os.X_OK):
        packages = [arg for arg in args if arg not in _PIP_ONLY]
        subprocess.check_call([UV, "pip", "install", "--quiet", "--compile-bytecode", "--system-certs", "--python", sys.executable]
                              + packages)
        return
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)


if __name__ == "__main__":
    main()
