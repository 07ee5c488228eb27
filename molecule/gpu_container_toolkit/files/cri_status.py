# Copyright: (c) 2026, gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask containerd's CRI plugin for its status, as kubelet does: runtime.v1.RuntimeService/Status.

A test-side CRI client (Debian has no crictl): Debian's python3-grpcio over containerd's socket,
the request and reply in protobuf's wire format written out by hand (StatusRequest{verbose: true};
StatusResponse fields 1 status, 2 info map, 3 runtime_handlers, from the CRI API's api.proto).
Prints JSON: the conditions, the runtime handlers (containerd 2.x) and the runtimes of the CRI
configuration the plugin runs with (info["config"]).
"""

import json
import sys

import grpc


def _varint(buf, i):
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def fields(buf):
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        else:
            raise SystemExit(f"unexpected protobuf wire type {wire}")
        yield number, value


def main():
    socket = sys.argv[1] if len(sys.argv) > 1 else "/run/containerd/containerd.sock"
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        status = channel.unary_unary("/runtime.v1.RuntimeService/Status",
                                     request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw)
        reply = status(b"\x08\x01", timeout=20)
    conditions, info, handlers = {}, {}, []
    for number, value in fields(reply):
        if number == 1:
            for sub, condition in fields(value):
                if sub == 1:
                    parts = dict(fields(condition))
                    conditions[parts.get(1, b"").decode()] = bool(parts.get(2, 0))
        elif number == 2:
            entry = dict(fields(value))
            info[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
        elif number == 3:
            handlers.append(dict(fields(value)).get(1, b"").decode())
    config = json.loads(info.get("config", "{}"))
    runtimes = config.get("containerd", {}).get("runtimes", {})
    print(json.dumps({"conditions": conditions, "handlers": handlers, "runtimes": runtimes,
                      "enableCDI": config.get("enableCDI"), "cdiSpecDirs": config.get("cdiSpecDirs"),
                      "defaultRuntimeName": config.get("containerd", {}).get("defaultRuntimeName")}))


if __name__ == "__main__":
    main()
