"""A fault-injecting proxy in front of the test control plane's kube-apiserver.

The collection's clients (kubernetes.core, the kubernetes Python client, kubectl) reach the API
server through this proxy; it answers chosen requests with an error instead of passing them on,
so that a test can give a role an HTTP 500, 503, 429 or 409 on exactly the request it wants to
see fail. Every other request goes to the API server unchanged, watches and log streams included.

Who the client is travels the way kube-aggregator passes it to an extension API server: the proxy
checks the client's certificate against the run's CA and tells the API server the user and groups
in X-Remote-User and X-Remote-Group, over a connection authenticated with the front-proxy client
certificate (kube-apiserver --requestheader-*). RBAC therefore judges the real client. A client
with a bearer token (a ServiceAccount) is passed on with its token.

Faults are rules read from FAULTS (a JSON file, re-read when it changes):
    [{"code": 500, "count": 2, "verb": "PATCH", "path": "^/api/v1/nodes/gpu-a$", "retryAfter": 1}]
`count` requests that match the verb (any when absent) and the path's regular expression (on the
URL path, without the query) get `code`; the rule is then spent. Spent counts are written back
to the file (`hits`), so a test can tell that its fault was met. A rule with `version` instead
of `code` passes the request on and rewrites the answer as a server of that release would write
it ({"version": "v1.33.4", "path": "^/version/?$", "count": 1000}): an API server older than the
one built here, for the refusals that depend on the server's version alone.

It also counts the requests it sees, by verb and path: GET /gpufleet-test/v1/stats answers them
(DELETE counts from zero again), for an administrator (group system:masters) only.

    python3 faultproxy.py --listen PORT --upstream URL --pki DIR --faults FILE
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import pathlib
import re
import socketserver
import ssl
import threading
import time
import urllib.parse

REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout", 403: "Forbidden", 404: "NotFound", 422: "Invalid"}
# The proxy's own endpoint: the requests it passed or answered, by verb and path.
STATS_PATH = "/gpufleet-test/v1/stats"
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "host"}


class Faults:
    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.lock = threading.Lock()
        self.mtime = None
        self.rules = []

    def _load(self):
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self.rules, self.mtime = [], None
            return
        if mtime != self.mtime:
            self.rules = json.loads(self.path.read_text() or "[]")
            self.mtime = mtime

    def take(self, verb, path):
        """The rule this request meets, its count spent, or None."""
        with self.lock:
            self._load()
            for rule in self.rules:
                if rule.get("hits", 0) >= rule.get("count", 1):
                    continue
                if rule.get("verb") and rule["verb"].upper() != verb:
                    continue
                if rule.get("path") and not re.search(rule["path"], path):
                    continue
                rule["hits"] = rule.get("hits", 0) + 1
                partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
                partial.write_text(json.dumps(self.rules, indent=1) + "\n")
                partial.replace(self.path)
                self.mtime = self.path.stat().st_mtime_ns
                return dict(rule)
        return None


def status_body(code, verb, path, message=None):
    reason = REASONS.get(code, "InternalError")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message or f"injected fault: {verb} {path} answered {code}", "reason": reason,
            "details": {"causes": [{"reason": "InjectedFault", "message": "tests/controlplane/faultproxy.py"}]},
            "code": code}


def older_version(payload, git_version):
    """The API server's /version answer as a server of another release writes it: gitVersion,
    major and minor of that release, and without the emulation and compatibility versions that
    only 1.33 and later report."""
    info = json.loads(payload)
    major, minor = re.match(r"v?(\d+)\.(\d+)", git_version).groups()
    info.update(major=major, minor=minor, gitVersion=git_version)
    if (int(major), int(minor)) < (1, 33):
        for key in ("emulationMajor", "emulationMinor", "minCompatibilityMajor", "minCompatibilityMinor"):
            info.pop(key, None)
    else:
        # a server emulates its own release and is compatible with the one before it
        info.update(emulationMajor=major, emulationMinor=minor, minCompatibilityMajor=major,
                    minCompatibilityMinor=str(int(minor) - 1))
    return json.dumps(info, indent=2).encode()


def identity(cert):
    """User and groups of a client certificate, as kube-apiserver's x509 authenticator reads them."""
    user, groups = None, []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                user = value
            elif key == "organizationName":
                groups.append(value)
    return user, groups


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpufleet-faultproxy"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass

    def _handle(self):
        cfg = self.server.cfg
        path = urllib.parse.urlsplit(self.path).path
        if path == STATS_PATH:
            self._stats()
            return
        cfg.count(self.command, path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._read_chunked()
        rule = cfg.faults.take(self.command, path)
        version = rule.get("version") if rule else None
        if rule and not version:
            if rule.get("delay"):
                time.sleep(float(rule["delay"]))
            payload = json.dumps(status_body(rule["code"], self.command, path, rule.get("message"))).encode()
            self.send_response(rule["code"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if rule.get("retryAfter") is not None:
                self.send_header("Retry-After", str(rule["retryAfter"]))
            self.end_headers()
            self.wfile.write(payload)
            return
        headers = [(k, v) for k, v in self.headers.items()
                   if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"
                   and not k.lower().startswith("x-remote-")]
        cert = self.connection.getpeercert()
        if cert:
            user, groups = identity(cert)
            # kube-apiserver adds system:authenticated itself
            headers += [("X-Remote-User", user)] + [("X-Remote-Group", group) for group in groups]
        if body is not None:
            headers.append(("Content-Length", str(len(body))))
        upstream = http.client.HTTPSConnection(cfg.upstream_host, cfg.upstream_port, context=cfg.upstream_context,
                                               timeout=3600)
        try:
            upstream.putrequest(self.command, self.path, skip_host=False, skip_accept_encoding=True)
            for key, value in headers:
                upstream.putheader(key, value)
            upstream.endheaders(body)
            response = upstream.getresponse()
            # the API server's own status line and headers, not the proxy's Date and Server
            self.send_response_only(response.status, response.reason)
            length = response.getheader("Content-Length")
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            if length is not None:
                payload = response.read()
                if version and response.status == 200:
                    payload = older_version(payload, version)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            else:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    chunk = response.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
        except (ConnectionError, TimeoutError, http.client.HTTPException):
            self.close_connection = True
        finally:
            upstream.close()

    def _stats(self):
        """The requests counted so far (GET), or counted from zero again (DELETE); for a client of
        the group system:masters only."""
        cert = self.connection.getpeercert()
        if not cert or "system:masters" not in identity(cert)[1]:
            self.send_error(403)
            return
        cfg = self.server.cfg
        with cfg.lock:
            payload = {"requests": sum(cfg.by_path.values()), "byPath": dict(cfg.by_path)}
            if self.command == "DELETE":
                cfg.by_path.clear()
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_chunked(self):
        data = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return data
            data += self.rfile.read(size)
            self.rfile.readline()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Config:  # pylint: disable=too-few-public-methods
    def __init__(self, upstream, pki, faults):
        parts = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.upstream_context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.upstream_context.load_cert_chain(str(pki / "front-proxy-client.crt"), str(pki / "front-proxy-client.key"))
        self.faults = Faults(faults)
        self.lock = threading.Lock()
        self.by_path = {}

    def count(self, verb, path):
        with self.lock:
            key = f"{verb} {path}"
            self.by_path[key] = self.by_path.get(key, 0) + 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--pki", required=True)
    parser.add_argument("--faults", required=True)
    args = parser.parse_args()
    pki = pathlib.Path(args.pki)
    server = Server(("127.0.0.1", args.listen), Handler)
    server.cfg = Config(args.upstream, pki, args.faults)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki / "apiserver.crt"), str(pki / "apiserver.key"))
    context.load_verify_locations(str(pki / "ca.crt"))
    context.verify_mode = ssl.CERT_OPTIONAL
    context.set_alpn_protocols(["http/1.1"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
