# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for the get-pip script that ansible-test downloads into its cache.

ansible-test bootstraps pip in each of its virtual environments with a
get-pip script fetched from a host that CI cannot reach. This script does the
same job from what CI can reach: Python's own ensurepip, then pip from PyPI
with the arguments ansible-test passes (the pinned pip version among them).
scripts/ansible-test.sh copies it to ~/.ansible/test/cache/get_pip_<ver>.py.
"""

import subprocess
import sys

# get-pip options that pip install itself does not know.
_GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main():
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
    args = [arg for arg in sys.argv[1:] if arg not in _GET_PIP_ONLY]
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)


if __name__ == "__main__":
    main()
