# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes connection of the collection's modules (api_list, pods_batch, pods_wait), over the kubernetes
client: found from the same settings and in the same order as kubernetes.core finds it, and the
answers a client tries again."""

from __future__ import annotations

import json
import threading
import time
import traceback
from urllib.parse import quote, urlencode

try:
    import kubernetes
    import urllib3
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
    NO_ANSWER = (OSError, urllib3.exceptions.HTTPError)
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    NO_ANSWER = (OSError,)

# What Kubernetes clients try again: too many requests, and the server's or a proxy's 5xx.
RETRYABLE = (429, 500, 502, 503, 504)

# Each setting's variables, in the order kubernetes.core reads them.
ENV = {"kubeconfig": ("K8S_AUTH_KUBECONFIG",), "context": ("K8S_AUTH_CONTEXT",), "host": ("K8S_AUTH_HOST",),
       "api_key": ("K8S_AUTH_API_KEY",), "validate_certs": ("K8S_AUTH_VALIDATE_CERTS", "K8S_AUTH_VERIFY_SSL"),
       "ca_cert": ("K8S_AUTH_CA_CERT", "K8S_AUTH_SSL_CA_CERT")}
# Settings kubernetes.core takes that these modules do not: refused by name rather than ignored, since the
# kubernetes.core tasks of the same role would then reach another endpoint or act as another user.
UNSUPPORTED_ENV = ("K8S_AUTH_PROXY", "K8S_AUTH_NO_PROXY", "K8S_AUTH_PROXY_HEADERS", "K8S_AUTH_CERT_FILE",
                   "K8S_AUTH_KEY_FILE", "K8S_AUTH_USERNAME", "K8S_AUTH_PASSWORD", "K8S_AUTH_IMPERSONATE_USER",
                   "K8S_AUTH_IMPERSONATE_GROUPS")
# The client's token refresh (an exec plugin, OIDC) runs once at a time, not in every worker thread.
AUTH_LOCK = threading.Lock()

# The options of the k8s_auth doc fragment.
AUTH_ARGUMENT_SPEC = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
    host=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    validate_certs=dict(type="bool", aliases=["verify_ssl"]),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
    request_timeout=dict(type="int", default=30),
)


def auth_settings(params, environ):
    """The connection settings: each parameter, else its K8S_AUTH_* variable (as kubernetes.core reads them)."""
    auth = {}
    for name, variables in ENV.items():
        value = params.get(name)
        for variable in variables:
            if value is None and environ.get(variable) not in (None, ""):
                value = environ[variable]
                if name == "validate_certs":
                    value = value.lower() not in ("0", "false", "no")
        if value is not None:
            auth[name] = value
    return auth


def unsupported_settings(environ):
    """The K8S_AUTH_* variables set that these modules do not take (UNSUPPORTED_ENV)."""
    return [name for name in UNSUPPORTED_ENV if environ.get(name) not in (None, "")]


def api_client(auth, pool=None):
    """An ApiClient found in kubernetes.core's order (the doc fragment's kubeconfig option); ``pool``:
    how many connections it may keep open at once (the client's default is 5 per CPU)."""
    if not (auth.get("host") and auth.get("api_key")):
        # persist_config=False: a refreshed token is never written back into the user's kubeconfig.
        if auth.get("kubeconfig") or auth.get("context"):
            kubernetes.config.load_kube_config(config_file=auth.get("kubeconfig"), context=auth.get("context"),
                                               persist_config=False)
        else:
            try:
                kubernetes.config.load_incluster_config()
            except kubernetes.config.ConfigException:
                kubernetes.config.load_kube_config(persist_config=False)
    try:
        configuration = kubernetes.client.Configuration.get_default_copy()
    except AttributeError:
        configuration = kubernetes.client.Configuration()
    if auth.get("host"):
        configuration.host = auth["host"].rstrip("/")
    if auth.get("api_key"):
        # Under both names: clients up to 35 read "authorization", 36.0.0 and 36.0.1 only "BearerToken".
        configuration.api_key = {"authorization": "Bearer %s" % auth["api_key"],
                                 "BearerToken": "Bearer %s" % auth["api_key"]}
    if "validate_certs" in auth:
        configuration.verify_ssl = bool(auth["validate_certs"])
    if auth.get("ca_cert"):
        configuration.ssl_ca_cert = auth["ca_cert"]
    if pool:
        configuration.connection_pool_maxsize = pool
    return kubernetes.client.ApiClient(configuration)


class ApiAnswer(Exception):
    """An answer of the API outside 2xx: its code, reason, body and headers."""

    def __init__(self, status, reason, body, headers):
        super().__init__("HTTP %s %s" % (status, reason))
        self.status = status
        self.reason = reason
        self.body = body
        self.headers = headers


def path_of(*parts):
    """An API path from its parts, each quoted as a path segment."""
    return "/" + "/".join(quote(part, safe="") for part in parts)


def request(client, method, path, query=None, body=None, timeout=30, content_type="application/json", text=False):
    """One request, as JSON both ways, through the client's connection pool (its TLS and credentials):
    the objects as the API wrote them (the shape of kubernetes.core's resources) and as the caller
    wrote them, with none of the client's models, which cost more CPU than the request at a thousand
    objects and, in newer clients, refuse what the API takes (a quantity written as a number).
    An answer outside 2xx is raised as ApiAnswer; no answer as the connection's own error.
    ``content_type`` is the body's (application/merge-patch+json for a JSON merge patch). With ``text``, the answer
    is returned as text (a pod's log, text/plain), not read as JSON."""
    configuration = client.configuration
    headers = {"Accept": "text/plain, */*" if text else "application/json", "User-Agent": client.user_agent}
    # The client's own header credentials (a bearer token, refreshed by its hook when it expires), named
    # as the client version names them; client certificates are in the pool's TLS settings.
    with AUTH_LOCK:
        for setting in configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        if not any(key.lower() == "authorization" for key in headers):
            token = (configuration.api_key or {}).get("BearerToken") or (configuration.api_key or {}).get("authorization")
            if token:
                headers["Authorization"] = token if " " in token else "Bearer %s" % token
    data = None
    if body is not None:
        headers["Content-Type"] = content_type
        data = json.dumps(body).encode("utf-8")
    url = configuration.host + path + ("?" + urlencode(query) if query else "")
    response = client.rest_client.pool_manager.request(method, url, body=data, headers=headers,
                                                       timeout=urllib3.Timeout(total=timeout), retries=False)
    if not 200 <= response.status < 300:
        raise ApiAnswer(response.status, response.reason, response.data.decode("utf-8", "replace"),
                        response.headers)
    if text:
        return (response.data or b"").decode("utf-8", "replace")
    try:
        return json.loads(response.data or b"{}")
    except ValueError:
        # A 2xx that is not the API's JSON (a proxy's or a login page): an answer, not the API's.
        raise ApiAnswer(response.status, "NotJSON", "the answer to %s %s is not JSON: %r" % (
            method, path, response.data[:200]), response.headers) from None


def api_status(error):
    """(code, reason, message) of an ApiAnswer: the Status object's when the body is one."""
    message = (error.body or "") if isinstance(error.body, str) else (error.body or b"").decode("utf-8", "replace")
    reason = error.reason
    try:
        status = json.loads(message)
        if isinstance(status, dict) and status.get("kind") == "Status":
            reason = status.get("reason") or reason
            message = status.get("message") or message
    except ValueError:
        pass
    return error.status, reason, message.strip()[:500]


def retry_after(error, default, most=30.0):
    """Seconds to wait before trying again: a 429's or 503's Retry-After (at most ``most``), else ``default``."""
    headers = getattr(error, "headers", None) or {}
    found = [value for key, value in headers.items() if key.lower() == "retry-after"]
    try:
        value = float(found[0] if found else None)
    except (TypeError, ValueError):
        return default
    return min(max(value, 0.0), most)


class Requests:
    """Requests to the API, each tried again on the answers clients try again (RETRYABLE, no answer), at most
    ``retries`` more times, ``delay`` seconds apart (a 429's or 503's Retry-After instead, when it gives one);
    counted in ``requests``. ``send(method, path, query, body, timeout)`` makes one request (request() over
    a client)."""

    def __init__(self, send, retries=4, delay=2.0, timeout=30):
        self.send = send
        self.retries = retries
        self.delay = delay
        self.timeout = timeout
        self.requests = 0
        self.lock = threading.Lock()

    def call(self, method, path, query=None, body=None):
        """(answer, None, tries) or (None, (status, reason, message), tries) after the last try."""
        tries = 0
        while True:
            tries += 1
            with self.lock:
                self.requests += 1
            try:
                return self.send(method, path, query, body, self.timeout), None, tries
            except ApiAnswer as error:
                failure = api_status(error)
                wait = retry_after(error, self.delay) if error.status in (429, 503) else self.delay
                if error.status not in RETRYABLE:
                    return None, failure, tries
            except NO_ANSWER as error:
                failure = (None, None, "no answer: %s" % str(error)[:300])
                wait = self.delay
                if certificate_refused(error):
                    # Trying again would meet the same certificate.
                    return None, (None, None, "the TLS connection was refused: %s" % str(error)[:300]), tries
            if tries > self.retries:
                return None, failure, tries
            time.sleep(wait)


def certificate_refused(error):
    """Whether a connection error is TLS refusing the server's certificate (or ours), which no retry mends."""
    if not HAS_KUBERNETES:
        return False
    reason = getattr(error, "reason", None)
    return isinstance(error, urllib3.exceptions.SSLError) or isinstance(reason, urllib3.exceptions.SSLError)
