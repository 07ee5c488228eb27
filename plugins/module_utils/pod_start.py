# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a kubelet says when it cannot start a pod, and which of it no retry of its own mends.

Shared by module pods_wait (when to stop waiting for a pod) and the smoke test's verdicts (what to
tell the user). The kubelet retries a failed image pull and a failed sandbox with a back-off, and
between two tries keeps showing the last failure (ImagePullBackOff while it pulls again), so only an
answer that the next try would get again is final here.
"""

from __future__ import annotations

import re

# A container's waiting reasons that no retry mends (pkg/kubelet/images): a reference that does not
# parse, an image absent under imagePullPolicy Never.
NEVER_STARTS = ("InvalidImageName", "ErrImageNeverPull")
# A pull failure (pkg/kubelet/images: ErrImagePull, then ImagePullBackOff) is final only when the
# registry's answer is: no such image, tag or repository, credentials refused, or a registry name that
# does not resolve. A timeout, HTTP 429 or 5xx, a connection reset are the kubelet's to retry.
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff")
FINAL_PULL_RE = re.compile(r"not found|manifest unknown|name unknown|unauthorized|denied|forbidden|no such host|"
                           r"invalid reference format", re.IGNORECASE)
# A sandbox the container runtime refuses for a RuntimeClass handler it does not have: containerd 1.7
# (pkg/cri/server/sandbox_run.go) and 2.x (internal/cri/config) 'no runtime for "nvidia" is configured',
# CRI-O (internal/oci/oci.go) 'failed to find runtime handler nvidia from runtime list ...'. Nothing
# but a change of the runtime's configuration mends it.
MISSING_HANDLER_RE = re.compile(r'no runtime for "(?P<a>[^"]+)" is configured|failed to find runtime handler "?(?P<b>[^" ]+)')


def final_waiting(reason, message):
    """True when a container waiting with this reason and message will not start by the kubelet's retries."""
    if reason in NEVER_STARTS:
        return True
    return reason in PULL_FAILURES and bool(FINAL_PULL_RE.search(message or ""))


def missing_handler(message):
    """The RuntimeClass handler a sandbox failure's message says the runtime lacks, else None."""
    found = MISSING_HANDLER_RE.search(message or "")
    return (found.group("a") or found.group("b")) if found else None
