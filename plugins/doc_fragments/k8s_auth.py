# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """The connection options of the modules that talk to the Kubernetes API over the kubernetes client."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path of the kubeconfig, else C(K8S_AUTH_KUBECONFIG).
      - The connection is found in the order M(kubernetes.core.k8s_info) finds it from these settings - O(host)
        with O(api_key) alone; else the kubeconfig or O(context) when one is given; else the in-cluster
        configuration, then the C(kubernetes) library's default kubeconfig (C(KUBECONFIG), C(~/.kube/config)).
        O(host), O(api_key), O(validate_certs) and O(ca_cert) then override what was loaded. A token the client
        refreshes is never written back into the kubeconfig.
      - kubernetes.core's proxy, client certificate file, username and password and impersonation settings
        (C(K8S_AUTH_PROXY) and the like) are not taken; the module refuses to run when one is set. A
        kubeconfig can say each of them.
    type: path
  context:
    description: Context in the kubeconfig, else C(K8S_AUTH_CONTEXT); empty uses its current context.
    type: str
  host:
    description: URL of the API server, else C(K8S_AUTH_HOST).
    type: str
  api_key:
    description: Bearer token, else C(K8S_AUTH_API_KEY).
    type: str
  validate_certs:
    description: Whether to verify the API server's certificate, else C(K8S_AUTH_VALIDATE_CERTS) or C(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: Path of the CA certificate that signed the API server's, else C(K8S_AUTH_CA_CERT) or C(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  request_timeout:
    description: Seconds one request may take before it counts as unanswered.
    type: int
    default: 30
requirements:
  - kubernetes (the Python client) on the host the module runs on
"""
