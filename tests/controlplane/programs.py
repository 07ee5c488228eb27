"""What a container of the test cluster's nodes runs, decided by its command (or its image's entrypoint).

Daemons (NVIDIA's device plugin, gpu-feature-discovery, the config manager,
the MPS control daemon, ``sleep infinity``, unknown images) run until stopped.
Short programs run to completion here and give (output, exit code, files):
``nvidia-smi -L``, CUDA's vectorAdd sample, and ``sh -c`` scripts made of
simple commands joined by ``;``, ``&&`` and ``||`` with ``>``/``2>&1``
redirections, ``$?`` and ``status=$?`` variables, ``cat``, ``echo``, ``exit``,
``true``/``false`` and ``sleep``.
"""

import re
import shlex

import gpus as gpu_model  # tests/controlplane, on sys.path beside this file

# Scripts that images run and end (name -> what they print): the DRA driver's init container checks the
# driver root (deployments/container/kubelet-plugin-prestart.sh). STAND-IN: it always finds the driver.
SCRIPTS = {"kubelet-plugin-prestart.sh": "NVIDIA_DRIVER_ROOT (path on host): /\nnvidia-smi found: /driver-root/usr/bin/nvidia-smi\n"}
DAEMONS = {"nvidia-device-plugin": "device-plugin", "gpu-feature-discovery": "gfd",
           "config-manager": "config-manager", "mps-control-daemon": "mps",
           # NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/): its kubelet plugins.
           "gpu-kubelet-plugin": "dra-gpu-plugin", "compute-domain-kubelet-plugin": "daemon"}
# Entrypoints of the images NVIDIA publishes (their Dockerfiles), by image name.
ENTRYPOINTS = [("k8s-device-plugin", ["nvidia-device-plugin"]), ("gpu-feature-discovery", ["gpu-feature-discovery"]),
               ("cuda-sample:vectoradd", ["/cuda-samples/vectorAdd"]), ("cuda-sample", ["/cuda-samples/vectorAdd"])]
# Environment the CUDA base images set (nvidia/container-images/cuda Dockerfiles).
IMAGE_ENV = [("nvcr.io/nvidia/cuda", {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}),
             ("nvidia/cuda", {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}),
             ("cuda-sample", {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})]
VECTOR_ADD_OK = ("[Vector addition of 50000 elements]\nCopy input data from the host memory to the CUDA device\n"
                 "CUDA kernel launch with 196 blocks of 256 threads\nCopy output data from the CUDA device to the "
                 "host memory\nTest PASSED\nDone\n")
VECTOR_ADD_NO_GPU = ("[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code "
                     "no CUDA-capable device is detected)!\n")


def argv_of(container):
    command = container.get("command") or []
    args = container.get("args") or []
    if not command:
        image = container.get("image", "")
        command = next((entry for name, entry in ENTRYPOINTS if name in image), [])
    return list(command) + list(args)


def image_env(image):
    env = {}
    for name, values in IMAGE_ENV:
        if name in image:
            env.update(values)
    return env


def daemon_kind(argv):
    """What long-running thing argv is, or None for a program that ends."""
    if not argv:
        return "daemon"
    name = argv[0].rsplit("/", 1)[-1]
    if name in DAEMONS:
        return DAEMONS[name]
    if name == "sleep" and argv[1:2] in (["infinity"], ["inf"]):
        return "daemon"
    if name in ("sh", "bash") and "-c" in argv:
        script = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else ""
        # A script that runs a known daemon (the DRA driver's chart starts its plugins from bash -c).
        for daemon, kind in DAEMONS.items():
            if re.search(rf"(^|[\s/;&|]){re.escape(daemon)}(\s|$|;)", script):
                return kind
        if re.search(r"\bsleep\s+inf", script) or "while true" in script:
            return "daemon"
        return None
    if name in ("nvidia-smi", "vectorAdd", "echo", "cat", "true", "false", "sleep"):
        return None
    if name in ("sh", "bash") and argv[1:2] and argv[1].rsplit("/", 1)[-1] in SCRIPTS:
        return None
    return "daemon"


class Context:
    """What the container sees: the devices, and whether the NVIDIA runtime hook injected the tools."""

    def __init__(self, devices, nvidia_tools):
        self.devices = devices
        self.nvidia_tools = nvidia_tools
        self.files = {}


def _nvidia_smi(args, ctx):
    if not ctx.nvidia_tools:
        return "", "sh: 1: nvidia-smi: not found\n", 127
    if not ctx.devices:
        return "No devices were found\n", "", 6
    if args in (["-L"], ["--list-gpus"]):
        return gpu_model.list_output(ctx.devices), "", 0
    return "", f"stand-in: nvidia-smi {' '.join(args)} is not modelled here; only -L is\n", 2


def _simple(words, ctx, variables):
    """One simple command -> (stdout, stderr, rc)."""
    if not words:
        return "", "", 0
    name = words[0].rsplit("/", 1)[-1]
    if "=" in words[0] and len(words) == 1:
        key, value = words[0].split("=", 1)
        variables[key] = value
        return "", "", int(variables.get("?", 0))
    if name == "nvidia-smi":
        return _nvidia_smi(words[1:], ctx)
    if name == "vectorAdd":
        if not ctx.nvidia_tools or not ctx.devices:
            return VECTOR_ADD_NO_GPU, "", 1
        return VECTOR_ADD_OK, "", 0
    if name == "echo":
        return " ".join(words[1:]) + "\n", "", 0
    if name == "cat":
        out = ""
        for path in words[1:]:
            if path not in ctx.files:
                return out, f"cat: {path}: No such file or directory\n", 1
            out += ctx.files[path]
        return out, "", 0
    if name in ("true", ":"):
        return "", "", 0
    if name == "false":
        return "", "", 1
    if name == "sleep":
        return "", "", 0
    return "", f"sh: 1: {words[0]}: not found\n", 127


def _split(script):
    """Commands with the operator that precedes each: [(op, text)]."""
    parts, op, current, quote = [], ";", "", None
    index = 0
    while index < len(script):
        char = script[index]
        if quote:
            quote = None if char == quote else quote
            current += char
        elif char in "'\"":
            quote = char
            current += char
        elif script.startswith("&&", index) or script.startswith("||", index):
            parts.append((op, current))
            op, current = script[index:index + 2], ""
            index += 1
        elif char in ";\n":
            parts.append((op, current))
            op, current = ";", ""
        else:
            current += char
        index += 1
    parts.append((op, current))
    return [(o, c.strip()) for o, c in parts if c.strip()]


def run_script(script, ctx):
    """Run a sh -c script. Returns (log, rc)."""
    log, rc, variables = "", 0, {"?": "0"}
    for op, text in _split(script):
        if (op == "&&" and rc != 0) or (op == "||" and rc == 0):
            continue
        text = re.sub(r"\$\{?(\w+|\?)\}?", lambda m: variables.get(m.group(1), ""), text)
        words = shlex.split(text)
        if words and words[0] == "exit":
            return log, int(words[1]) if len(words) > 1 else rc
        if words[:1] == ["sleep"] and words[1:2] and words[1].startswith("inf"):
            return log, None
        stdout_to, stderr_to = None, None
        plain = []
        # sh takes "> file" as well as ">file" (POSIX shell "Redirection").
        joined = []
        for word in words:
            if joined and re.fullmatch(r"\d?>>?", joined[-1]):
                joined[-1] += word
            else:
                joined.append(word)
        for word in joined:
            match = re.match(r"^(\d?)(>>?)(&1|.+)$", word)
            if match:
                fd, _op, target = match.groups()
                if fd == "2":
                    stderr_to = stdout_to if target == "&1" else target
                else:
                    stdout_to = target
            else:
                plain.append(word)
        if "2>&1" in words:
            stderr_to = stdout_to
        out, err, rc = _simple(plain, ctx, variables)
        for stream, target in ((out, stdout_to), (err, stderr_to)):
            if target is None:
                log += stream
            elif target != "/dev/null":
                ctx.files[target] = ctx.files.get(target, "") + stream
        variables["?"] = str(rc)
    return log, rc


def is_script(argv):
    return bool(argv) and argv[0].rsplit("/", 1)[-1] in ("sh", "bash") and "-c" in argv


def run(argv, ctx):
    """Run a program that ends. Returns (log, rc)."""
    name = argv[0].rsplit("/", 1)[-1] if argv else ""
    if name in ("sh", "bash") and "-c" in argv:
        position = argv.index("-c") + 1
        return run_script(argv[position] if position < len(argv) else "", ctx)
    if name in ("sh", "bash") and argv[1:2] and argv[1].rsplit("/", 1)[-1] in SCRIPTS:
        return SCRIPTS[argv[1].rsplit("/", 1)[-1]], 0
    out, err, rc = _simple(argv, ctx, {})
    return out + err, rc
