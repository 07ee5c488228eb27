"""Dynamic Resource Allocation (resource.k8s.io/v1) in the simulated cluster.

Sources:
- Types, defaults and limits: k8s.io/api resource/v1 types.go (1.34) and
  pkg/apis/resource/v1/defaults.go (ExactCount, count 1).
- Device selectors: k8s.io/dynamic-resource-allocation cel/compile.go. The
  ``device`` variable has ``driver``, ``attributes`` (domain -> name -> value)
  and ``capacity`` (domain -> name -> quantity); an attribute named without a
  domain belongs to the driver's domain; an unknown domain is an empty map and
  an unknown name in it a runtime error ("no such key: <name>"); versions are
  semver values and capacities quantities (k8s.io/apiserver pkg/cel/library
  quantity.go and semverlib.go). Expressions are compiled and evaluated by
  Google's CEL (cel-cpp, PyPI ``cel-expr-python``) with its strings extension.
  STAND-IN: that library takes no opaque Python values, so a quantity or a
  semver is a map tagged ``@quantity``/``@semver``; only ``compareTo``,
  ``isGreaterThan``, ``isLessThan`` and ``asInteger`` are declared on them, and
  ``device`` is a map, so a misspelt field of it fails at evaluation rather than
  when the claim is created.
- Allocation: k8s.io/dynamic-resource-allocation structured/internal/stable
  (pools of the node by nodeName, nodeSelector or allNodes, only their newest
  generation and only complete pools; devices tried in pool, slice and device
  order, the first full solution taken; ``ExactCount`` and ``All``;
  ``firstAvailable`` subrequests in order; ``matchAttribute`` constraints, a
  device without the attribute passed over).
"""

import re
from decimal import Decimal, InvalidOperation

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
                    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$")
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_SUFFIX = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
           "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), None: 1, "k": 10 ** 3, "M": 10 ** 6,
           "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
# cel/compile.go: CELSelectorExpressionMaxLength; validation.go: list limits.
EXPRESSION_MAX = 10 * 1024
REQUESTS_MAX = 32
SELECTORS_MAX = 32
SUBREQUESTS_MAX = 8
SLICE_DEVICES_MAX = 128
DEVICE_FIELDS_MAX = 32
RESERVED_MAX = 256
FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


class SelectorError(Exception):
    """A selector that does not compile, or fails when evaluated."""


# ------------------------------------------------------------------ CEL values

def quantity_value(text):
    """The amount of a resource.Quantity string; ValueError when it is not one."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression "
                         f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as err:
        raise ValueError(f"invalid quantity {text!r}") from err
    if match.group(2):
        return number * (Decimal(10) ** int(match.group(2)[1:]))
    return number * _SUFFIX[match.group(3)]


def _semver_key(text):
    match = SEMVER.match(text)
    if not match:
        raise ValueError(f"could not parse {text!r} as semver")
    release = tuple(int(part) for part in match.group(1, 2, 3))
    if match.group(4) is None:
        return release, (1,)
    pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in match.group(4).split("."))
    return release, (0,) + pre


def _quantity(text):
    quantity_value(text)
    return {"@quantity": text}


def _semver(text):
    _semver_key(text)
    return {"@semver": text}


def _key(value):
    if isinstance(value, dict) and "@quantity" in value:
        return "quantity", quantity_value(value["@quantity"])
    if isinstance(value, dict) and "@semver" in value:
        return "semver", _semver_key(value["@semver"])
    raise TypeError(f"no such overload: {value!r} is neither a quantity nor a semver")


def _compare(left, right):
    (kind_left, key_left), (kind_right, key_right) = _key(left), _key(right)
    if kind_left != kind_right:
        raise TypeError(f"no such overload: cannot compare {kind_left} with {kind_right}")
    return (key_left > key_right) - (key_left < key_right)


def _as_integer(value):
    kind, amount = _key(value)
    if kind != "quantity" or amount != amount.to_integral_value() or not -2 ** 63 <= amount < 2 ** 63:
        raise ValueError("cannot convert value to integer")
    return int(amount)


_MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)


def _function(name, result, parameters, impl, member):
    return cel.FunctionDecl(name, [cel.Overload(f"k8s_{name}_{len(parameters)}", return_type=result,
                                                parameters=parameters, is_member=member, impl=impl)])


class _KubernetesLibraries(cel.CelExtension):
    """The parts of Kubernetes' quantity and semver CEL libraries that device selectors use."""

    def __init__(self):
        super().__init__("k8s_dra", functions=[
            _function("quantity", _MAP, [cel.Type.STRING], _quantity, False),
            _function("semver", _MAP, [cel.Type.STRING], _semver, False),
            _function("compareTo", cel.Type.INT, [_MAP, _MAP], _compare, True),
            _function("isGreaterThan", cel.Type.BOOL, [_MAP, _MAP], lambda a, b: _compare(a, b) > 0, True),
            _function("isLessThan", cel.Type.BOOL, [_MAP, _MAP], lambda a, b: _compare(a, b) < 0, True),
            _function("asInteger", cel.Type.INT, [_MAP], _as_integer, True)])


_ENV = None
_COMPILED = {}
# The fields of the device variable (kubernetes.DRADevice; allowMultipleAllocations only under an alpha gate).
_FIELD = re.compile(r"\bdevice\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
DEVICE_FIELDS = ("driver", "attributes", "capacity")
_DOMAINS = re.compile(r"device\s*\.\s*(?:attributes|capacity)\s*\[\s*(?:'([^']*)'|\"([^\"]*)\")\s*\]")


def _env():
    global _ENV  # pylint: disable=global-statement
    if _ENV is None:
        _ENV = cel.NewEnv(variables={"device": _MAP}, extensions=[ext_strings.ExtStrings(), _KubernetesLibraries()])
    return _ENV


def _plain(message):
    """cel-cpp's status text as cel-go words it where the two differ."""
    message = re.sub(r"^[A-Z_]+: ", "", str(message))
    message = re.sub(r"\s*\[[A-Z_]+\]$", "", message)
    found = re.match(r'^Key not found in map : "?(.*?)"?$', message)
    if found:
        return f"no such key: {found.group(1)}"
    return message


def compile_selector(expression):
    """The compiled selector, and the domains it names; SelectorError with the compiler's message."""
    cached = _COMPILED.get(expression)
    if cached is not None:
        return cached
    for field in _FIELD.findall(expression):
        # device is a typed object (kubernetes.DRADevice) upstream: an unknown field fails to compile.
        if field not in DEVICE_FIELDS:
            raise SelectorError(f"compilation failed: ERROR: <input>: undefined field '{field}'")
    try:
        program = _env().compile(expression)
    except RuntimeError as err:
        raise SelectorError(f"compilation failed: {_plain(err)}") from None
    result = program.return_type()
    if result not in (cel.Type.BOOL, cel.Type.DYN):
        raise SelectorError(f"must evaluate to bool or the unknown type, not {result.name()}")
    domains = {a or b for a, b in _DOMAINS.findall(expression)}
    if len(_COMPILED) > 4096:
        _COMPILED.clear()
    _COMPILED[expression] = (program, domains)
    return program, domains


def cel_device(driver, device):
    """The ``device`` variable of a selector for a ResourceSlice device of ``driver``."""
    attributes, capacity = {}, {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _sep, short = name.rpartition("/")
        if "version" in value:
            plain = {"@semver": value["version"]}
        else:
            plain = next((value[k] for k in ("int", "bool", "string") if k in value), None)
        attributes.setdefault(domain or driver, {})[short] = plain
    for name, value in (device.get("capacity") or {}).items():
        domain, _sep, short = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[short] = {"@quantity": str(value.get("value"))}
    return {"driver": driver, "attributes": attributes, "capacity": capacity}


def selects(expression, view):
    """Whether the selector selects the device (``cel_device``); SelectorError on a runtime error."""
    program, domains = compile_selector(expression)
    for domain in domains:
        # An unknown domain is an empty map (compile.go's mapper), not a missing key.
        view["attributes"].setdefault(domain, {})
        view["capacity"].setdefault(domain, {})
    value = program.eval(data={"device": view})
    if value.type() == cel.Type.ERROR:
        raise SelectorError(f"CEL runtime error: {_plain(value.value())}")
    if value.type() != cel.Type.BOOL:
        raise SelectorError(f"CEL result of type {value.type().name()} could not be converted to bool")
    return value.value()


# -------------------------------------------------------------- allocation

class AllocationError(Exception):
    """An error of the allocator (the scheduler's Error status, not Unschedulable)."""


def node_pools(slices, node, node_matches):
    """{(driver, pool): [(slice, device)]} of the pools available on ``node``: only the newest
    generation of each pool, only complete pools (the others are passed over as incomplete)."""
    newest = {}
    for item in slices:
        spec = item.get("spec") or {}
        name = node["metadata"]["name"]
        if spec.get("nodeName") not in (None, name):
            continue
        if spec.get("nodeName") is None and not spec.get("allNodes") and not (
                spec.get("nodeSelector") and node_matches(spec["nodeSelector"], node)):
            continue
        pool = spec.get("pool") or {}
        key = (spec.get("driver"), pool.get("name"))
        generation = int(pool.get("generation") or 0)
        current = newest.get(key)
        if current is None or generation > current[0]:
            newest[key] = (generation, int(pool.get("resourceSliceCount") or 1), [item])
        elif generation == current[0]:
            current[2].append(item)
    pools = {}
    for key, (_generation, count, items) in sorted(newest.items()):
        if len(items) != count:
            continue
        devices = []
        for item in sorted(items, key=lambda s: s["metadata"]["name"]):
            for device in item["spec"].get("devices") or []:
                devices.append(device)
        names = [d["name"] for d in devices]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate:
            raise AllocationError(f"pool {key[0]}/{key[1]} is invalid: duplicate device name {duplicate}")
        pools[key] = devices
    return pools


def _attribute(device, driver, name):
    attributes = device.get("attributes") or {}
    if name in attributes:
        return attributes[name]
    domain, _sep, short = name.partition("/")
    if domain == driver and short in attributes:
        return attributes[short]
    return None


def _requests(claim):
    """[(result name, class name, selectors, mode, count)], the alternatives of each request in order."""
    out = []
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if request.get("exactly"):
            exact = request["exactly"]
            out.append((request["name"], [(request["name"], exact)]))
        else:
            out.append((request["name"], [(f"{request['name']}/{sub['name']}", sub)
                                          for sub in request.get("firstAvailable") or []]))
    return out


def allocate(claim, classes, pools, in_use):
    """The allocation results of one claim from the node's pools, or None when it cannot be allocated.
    ``in_use``: the set of (driver, pool, device) taken (updated with what is chosen)."""
    label = f"claim {claim['metadata'].get('namespace')}/{claim['metadata']['name']}"
    constraints = ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []
    candidates = []
    for key, devices in pools.items():
        for device in devices:
            candidates.append((key, device, cel_device(key[0], device)))

    def eligible(entry, request):
        (driver, pool), device, view = entry
        if (driver, pool, device["name"]) in in_use:
            return False
        class_name = request.get("deviceClassName")
        device_class = classes.get(class_name)
        if device_class is None:
            raise AllocationError(f"{label}, request: could not retrieve device class {class_name}")
        for index, selector in enumerate((device_class.get("spec") or {}).get("selectors") or []):
            try:
                if not selects(selector["cel"]["expression"], dict(view, attributes=dict(view["attributes"]),
                                                                   capacity=dict(view["capacity"]))):
                    return False
            except SelectorError as err:
                raise AllocationError(f"class {class_name}: selector #{index}: {err}") from None
        for index, selector in enumerate(request.get("selectors") or []):
            try:
                if not selects(selector["cel"]["expression"], dict(view, attributes=dict(view["attributes"]),
                                                                   capacity=dict(view["capacity"]))):
                    return False
            except SelectorError as err:
                raise AllocationError(f"{label}: selector #{index}: {err}") from None
        return True

    def fits_constraints(chosen):
        for constraint in constraints:
            name = constraint.get("matchAttribute")
            if not name:
                continue
            scope = set(constraint.get("requests") or [])
            seen = None
            for result_name, (driver, _pool), device in chosen:
                if scope and result_name not in scope and result_name.split("/")[0] not in scope:
                    continue
                value = _attribute(device, driver, name)
                if value is None:
                    return False
                if seen is None:
                    seen = value
                elif value != seen:
                    return False
        return True

    requests = _requests(claim)

    def solve(index, chosen):
        if index == len(requests):
            return chosen
        _name, alternatives = requests[index]
        for result_name, request in alternatives:
            mode = request.get("allocationMode", "ExactCount")
            matching = [entry for entry in candidates if eligible(entry, request)]
            if mode == "All":
                every = [entry for entry in candidates if _selectable(entry, request, eligible, in_use)]
                if not every or len(every) != len(matching):
                    continue
                picked = chosen + [(result_name, e[0], e[1]) for e in every]
                if not fits_constraints(picked):
                    continue
                for entry in every:
                    in_use.add((entry[0][0], entry[0][1], entry[1]["name"]))
                found = solve(index + 1, picked)
                if found is not None:
                    return found
                for entry in every:
                    in_use.discard((entry[0][0], entry[0][1], entry[1]["name"]))
                continue
            found = _choose(matching, int(request.get("count") or 1), result_name, chosen, fits_constraints,
                            in_use, lambda picked: solve(index + 1, picked))
            if found is not None:
                return found
        return None

    chosen = solve(0, [])
    if chosen is None:
        return None
    return [{"request": name, "driver": key[0], "pool": key[1], "device": device["name"]}
            for name, key, device in chosen]


def _selectable(entry, request, eligible, in_use):
    """A device the request's selectors take, in use or not (allocationMode All wants every one free)."""
    key = (entry[0][0], entry[0][1], entry[1]["name"])
    if key not in in_use:
        return eligible(entry, request)
    in_use.discard(key)
    try:
        return eligible(entry, request)
    finally:
        in_use.add(key)


def _choose(matching, count, result_name, chosen, fits, in_use, rest):
    """Backtracking over ``count`` devices of ``matching`` in order."""
    def pick(start, need, picked):
        if need == 0:
            return rest(picked)
        for position in range(start, len(matching)):
            (driver, pool), device, _view = matching[position]
            key = (driver, pool, device["name"])
            if key in in_use:
                continue
            attempt = picked + [(result_name, (driver, pool), device)]
            if not fits(attempt):
                continue
            in_use.add(key)
            found = pick(position + 1, need - 1, attempt)
            if found is not None:
                return found
            in_use.discard(key)
        return None
    return pick(0, count, chosen)


def results_in_use(claims):
    """{(driver, pool, device)} allocated to any claim."""
    used = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            used.add((result.get("driver"), result.get("pool"), result.get("device")))
    return used


# ------------------------------------------------------ defaults, validation

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_TEXT = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
               "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
               "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUBDOMAIN_TEXT = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                   "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def _default_request(request):
    # SetDefaults_ExactDeviceRequest / SetDefaults_DeviceSubRequest.
    if not isinstance(request, dict):
        return
    if not request.get("allocationMode"):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1


def default_claim_spec(spec):
    for request in ((spec or {}).get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        _default_request(request.get("exactly"))
        for sub in request.get("firstAvailable") or []:
            _default_request(sub)


def _cause(field, message, reason="FieldValueInvalid"):
    return {"reason": reason, "field": field, "message": message}


def _too_many(field, items, most):
    if isinstance(items, list) and len(items) > most:
        return [_cause(field, f"Too many: {len(items)}: must have at most {most} items", "FieldValueTooMany")]
    return []


def selector_causes(selectors, field):
    causes = _too_many(field, selectors, SELECTORS_MAX)
    if causes:
        return causes
    for index, selector in enumerate(selectors or []):
        here = f"{field}[{index}].cel"
        expression = ((selector or {}).get("cel") or {}).get("expression")
        if not (selector or {}).get("cel"):
            causes.append(_cause(here, "Required value", "FieldValueRequired"))
        elif not expression:
            causes.append(_cause(f"{here}.expression", "Required value", "FieldValueRequired"))
        elif len(expression.encode()) > EXPRESSION_MAX:
            causes.append(_cause(f"{here}.expression", f"Too long: may not be more than {EXPRESSION_MAX} bytes",
                                 "FieldValueTooLong"))
        else:
            try:
                compile_selector(expression)
            except SelectorError as err:
                causes.append(_cause(f"{here}.expression", f'Invalid value: "{expression}": {err}'))
    return causes


def _exact_causes(request, field, sub=False):
    causes = []
    if sub and not request.get("name"):
        causes.append(_cause(f"{field}.name", "Required value", "FieldValueRequired"))
    elif sub and not _LABEL.match(request["name"]):
        causes.append(_cause(f"{field}.name", f'Invalid value: "{request["name"]}": {_LABEL_TEXT}'))
    class_name = request.get("deviceClassName")
    if not class_name:
        causes.append(_cause(f"{field}.deviceClassName", "Required value", "FieldValueRequired"))
    elif not _SUBDOMAIN.match(class_name) or len(class_name) > 253:
        causes.append(_cause(f"{field}.deviceClassName", f'Invalid value: "{class_name}": {_SUBDOMAIN_TEXT}'))
    causes += selector_causes(request.get("selectors"), f"{field}.selectors")
    mode, count = request.get("allocationMode"), request.get("count")
    if mode == "ExactCount":
        if not isinstance(count, int) or count <= 0:
            causes.append(_cause(f"{field}.count", f"Invalid value: {count}: must be greater than zero"))
    elif mode == "All":
        if count:
            causes.append(_cause(f"{field}.count", f"Invalid value: {count}: must not be specified when "
                                                   "allocationMode is 'All'"))
    else:
        causes.append(_cause(f"{field}.allocationMode", f'Unsupported value: "{mode}": supported values: "All", '
                                                        '"ExactCount"', "FieldValueNotSupported"))
    return causes


def claim_spec_causes(spec, field):
    """validateResourceClaimSpec (pkg/apis/resource/validation/validation.go)."""
    devices = (spec or {}).get("devices") or {}
    requests = devices.get("requests") or []
    causes = _too_many(f"{field}.devices.requests", requests, REQUESTS_MAX)
    if causes:
        return causes
    names = set()
    for index, request in enumerate(requests):
        here = f"{field}.devices.requests[{index}]"
        name = request.get("name")
        if not name:
            causes.append(_cause(f"{here}.name", "Required value", "FieldValueRequired"))
        elif not _LABEL.match(name):
            causes.append(_cause(f"{here}.name", f'Invalid value: "{name}": {_LABEL_TEXT}'))
        elif name in names:
            causes.append(_cause(f"{here}.name", f'Duplicate value: "{name}"', "FieldValueDuplicate"))
        names.add(name)
        exact, first = request.get("exactly"), request.get("firstAvailable")
        if exact and first:
            causes.append(_cause(here, "Invalid value: null: exactly one of `exactly` or `firstAvailable` is "
                                       "required, but multiple fields are set"))
        elif exact:
            causes += _exact_causes(exact, f"{here}.exactly")
        elif first:
            too_many = _too_many(f"{here}.firstAvailable", first, SUBREQUESTS_MAX)
            causes += too_many
            subnames = set()
            for position, sub in enumerate(first if not too_many else []):
                causes += _exact_causes(sub, f"{here}.firstAvailable[{position}]", sub=True)
                if sub.get("name") in subnames:
                    causes.append(_cause(f"{here}.firstAvailable[{position}].name",
                                         f'Duplicate value: "{sub["name"]}"', "FieldValueDuplicate"))
                subnames.add(sub.get("name"))
                names.add(f"{name}/{sub.get('name')}")
        else:
            causes.append(_cause(here, "Required value: exactly one of `exactly` or `firstAvailable` is required",
                                 "FieldValueRequired"))
    for index, constraint in enumerate(devices.get("constraints") or []):
        here = f"{field}.devices.constraints[{index}]"
        for position, reference in enumerate(constraint.get("requests") or []):
            if reference not in names:
                causes.append(_cause(f"{here}.requests[{position}]", f'Invalid value: "{reference}": must be the '
                                     "name of a request in the claim or the name of a request and a subrequest "
                                     "separated by '/'"))
        attribute = constraint.get("matchAttribute")
        if not attribute:
            causes.append(_cause(f"{here}.matchAttribute", "Required value", "FieldValueRequired"))
        elif "/" not in attribute:
            causes.append(_cause(f"{here}.matchAttribute", f'Invalid value: "{attribute}": a fully qualified name '
                                                           "must be a domain and a name separated by a slash"))
    return causes


def _attribute_causes(device, field):
    causes = []
    attributes, capacity = device.get("attributes") or {}, device.get("capacity") or {}
    if len(attributes) + len(capacity) > DEVICE_FIELDS_MAX:
        causes.append(_cause(field, f"Invalid value: {len(attributes) + len(capacity)}: the total number of "
                                    f"attributes and capacities must not exceed {DEVICE_FIELDS_MAX}"))
    for kind, table in (("attributes", attributes), ("capacity", capacity)):
        for key, value in table.items():
            here = f"{field}.{kind}[{key}]"
            domain, _sep, short = key.rpartition("/")
            if key.count("/") > 1:
                causes.append(_cause(here, f'Invalid value: "{key}": must not contain more than one slash'))
            elif not _C_IDENTIFIER.match(short) or len(short) > 32 or (domain and not _SUBDOMAIN.match(domain)):
                causes.append(_cause(here, f'Invalid value: "{key}": a valid C identifier must start with '
                                           "alphabetic character or '_', followed by a string of alphanumeric "
                                           "characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex "
                                           "used for validation is '[A-Za-z_][A-Za-z0-9_]*')"))
            if kind == "capacity":
                try:
                    quantity_value(str((value or {}).get("value")))
                except ValueError:
                    causes.append(_cause(f"{here}.value", "Required value", "FieldValueRequired"))
                continue
            given = [k for k in ("int", "bool", "string", "version") if k in (value or {})]
            if len(given) != 1:
                causes.append(_cause(here, "Invalid value: " + ("null" if not given else "{...}") +
                                     ": exactly one value must be specified"))
            elif "version" in given and not SEMVER.match(str(value["version"])):
                causes.append(_cause(f"{here}.version", f'Invalid value: "{value["version"]}": must be a string '
                                                        "compatible with semver.org spec 2.0.0"))
            elif "string" in given and len(str(value["string"]).encode()) > 64:
                causes.append(_cause(f"{here}.string", "Too long: may not be more than 64 bytes",
                                     "FieldValueTooLong"))
    return causes


def slice_causes(spec, old_spec):
    """validateResourceSliceSpec, and the fields an update may not change."""
    causes = []
    driver = spec.get("driver")
    if not driver:
        causes.append(_cause("spec.driver", "Required value", "FieldValueRequired"))
    elif len(driver) > 63 or not _SUBDOMAIN.match(driver.lower()):
        causes.append(_cause("spec.driver", f'Invalid value: "{driver}": {_SUBDOMAIN_TEXT}'))
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        causes.append(_cause("spec.pool.name", "Required value", "FieldValueRequired"))
    if int(pool.get("resourceSliceCount") or 0) <= 0:
        causes.append(_cause("spec.pool.resourceSliceCount", f"Invalid value: {pool.get('resourceSliceCount', 0)}: "
                                                             "must be greater than zero"))
    if int(pool.get("generation") or 0) < 0:
        causes.append(_cause("spec.pool.generation", f"Invalid value: {pool.get('generation')}: must be greater "
                                                     "than or equal to zero"))
    chosen = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k) is not None]
    if not chosen:
        causes.append(_cause("spec", "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                                     "`perDeviceNodeSelection` is required", "FieldValueRequired"))
    elif len(chosen) > 1:
        shown = ", ".join(f"`{k}`" for k in chosen)
        causes.append(_cause("spec", f'Invalid value: "{{{shown}}}": exactly one of `nodeName`, `nodeSelector`, '
                                     "`allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set"))
    if spec.get("nodeName") == "":
        causes.append(_cause("spec.nodeName", 'Invalid value: "": must be either unset or set to a non-empty string'))
    if spec.get("allNodes") is False:
        causes.append(_cause("spec.allNodes", "Invalid value: false: must be either unset or set to true"))
    devices = spec.get("devices") or []
    too_many = _too_many("spec.devices", devices, SLICE_DEVICES_MAX)
    causes += too_many
    names = set()
    for index, device in enumerate(devices if not too_many else []):
        here = f"spec.devices[{index}]"
        name = device.get("name")
        if not name:
            causes.append(_cause(f"{here}.name", "Required value", "FieldValueRequired"))
        elif not _LABEL.match(name):
            causes.append(_cause(f"{here}.name", f'Invalid value: "{name}": {_LABEL_TEXT}'))
        elif name in names:
            causes.append(_cause(f"{here}.name", f'Duplicate value: "{name}"', "FieldValueDuplicate"))
        names.add(name)
        causes += _attribute_causes(device, here)
    if old_spec is not None:
        for path, new, old in (("spec.driver", spec.get("driver"), old_spec.get("driver")),
                               ("spec.pool.name", pool.get("name"), (old_spec.get("pool") or {}).get("name")),
                               ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName"))):
            if new != old:
                causes.append(_cause(path, f'Invalid value: "{new}": field is immutable'))
    return causes


def claim_status_causes(status, old_status, deleting):
    """What a ResourceClaim's status update may not do (validateResourceClaimStatusUpdate)."""
    causes = []
    status, old_status = status or {}, old_status or {}
    reserved = status.get("reservedFor") or []
    causes += _too_many("status.reservedFor", reserved, RESERVED_MAX)
    uids = set()
    for index, entry in enumerate(reserved):
        for key in ("resource", "name", "uid"):
            if not entry.get(key):
                causes.append(_cause(f"status.reservedFor[{index}].{key}", "Required value", "FieldValueRequired"))
        if entry.get("uid") in uids:
            causes.append(_cause(f"status.reservedFor[{index}].uid", f'Duplicate value: "{entry.get("uid")}"',
                                 "FieldValueDuplicate"))
        uids.add(entry.get("uid"))
    if reserved and not status.get("allocation"):
        causes.append(_cause("status.reservedFor", "Forbidden: may not be specified when `allocated` is not set",
                             "FieldValueForbidden"))
    if old_status.get("allocation") and status.get("allocation") and status["allocation"] != old_status["allocation"]:
        causes.append(_cause("status.allocation", "Invalid value: \"{...}\": field is immutable"))
    if deleting:
        old_uids = {e.get("uid") for e in old_status.get("reservedFor") or []}
        if uids - old_uids:
            causes.append(_cause("status.reservedFor", "Forbidden: new entries may not be added while "
                                                       "`deallocationRequested` or `deletionTimestamp` are set",
                                 "FieldValueForbidden"))
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    causes += _too_many("status.allocation.devices.results", results, REQUESTS_MAX)
    return causes


# Fields behind feature gates, with the release whose default turns the gate on (None: off in every
# release served here): the API server drops them on write while the gate is off
# (pkg/registry/resource/*/strategy.go, dropDisabledFields; gates per kubernetes.io's feature-gate pages).
_GATED = {
    "DeviceClass": [(("spec", "extendedResourceName"), (1, 36))],
    "ResourceSlice": [(("spec", "sharedCounters"), (1, 36)), (("spec", "perDeviceNodeSelection"), (1, 36)),
                      (("spec", "devices", "*", "consumesCounters"), (1, 36)),
                      (("spec", "devices", "*", "taints"), (1, 36)),
                      (("spec", "devices", "*", "allowMultipleAllocations"), None)],
}


def drop_disabled(obj, release):
    """Drop the fields whose feature gate is off in this release."""
    for path, since in _GATED.get(obj.get("kind"), []):
        if since is not None and tuple(release) >= since:
            continue
        _drop(obj, path)


def _drop(value, path):
    if not isinstance(value, (dict, list)) or not path:
        return
    head, rest = path[0], path[1:]
    if head == "*":
        for item in value if isinstance(value, list) else []:
            _drop(item, rest)
    elif isinstance(value, dict) and head in value:
        if rest:
            _drop(value[head], rest)
        else:
            del value[head]
