"""What a kube-apiserver v1.36 does to a Pod, as pure functions, for the fake API server.

Each rule here was read off the recordings in ``recordings/`` (see ``test_fake_matches_recordings``,
which holds the fake to them): defaulting and normalisation on create (01a-01c, 02), Status bodies
(03b, 03c, 04b, 07a-07c), label and field selectors, the deletion arithmetic (03a, 03h).
"""

from __future__ import annotations

import copy
import json
import random
import re
import string
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

# --- time ------------------------------------------------------------------------------------


def rfc3339(moment: datetime) -> str:
    """Whole seconds, UTC, ``Z``: how the API server writes every timestamp."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def truncated_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


# --- Status bodies ---------------------------------------------------------------------------


class APIError(Exception):
    """An error answer: HTTP ``status`` with a Status ``body``."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body["message"])
        self.status = int(body["code"])
        self.body = body


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def not_found(name: str, kind: str = "pods") -> APIError:
    return APIError(
        status_body(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": kind})
    )


def already_exists(name: str) -> APIError:
    return APIError(
        status_body(
            409, "AlreadyExists", f'pods "{name}" already exists', {"name": name, "kind": "pods"}
        )
    )


def uid_conflict(name: str, wanted: str, actual: str) -> APIError:
    return APIError(
        status_body(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on Pod "{name}": the UID in the precondition '
            f"({wanted}) does not match the UID in record ({actual}). The object might have "
            "been deleted and then recreated",
            {"name": name, "kind": "Pod"},
        )
    )


def method_not_allowed() -> APIError:
    return APIError(
        status_body(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            {},
        )
    )


def forbidden(verb: str, name: str, namespace: str) -> APIError:
    """Not in the recordings (RBAC was AlwaysAllow there): the upstream message format."""
    target = f'pods "{name}"' if name else "pods"
    return APIError(
        status_body(
            403,
            "Forbidden",
            f'{target} is forbidden: User "system:serviceaccount:{namespace}:ci" cannot {verb} '
            f'resource "pods" in API group "" in the namespace "{namespace}"',
            {"name": name, "kind": "pods"} if name else {"kind": "pods"},
        )
    )


def unauthorized() -> APIError:
    return APIError(status_body(401, "Unauthorized", "Unauthorized"))


def bad_request(message: str) -> APIError:
    return APIError(status_body(400, "BadRequest", message))


def expired(requested: str, oldest: int) -> dict[str, Any]:
    """The ``ERROR`` event object of a watch from a compacted resourceVersion (05d)."""
    return status_body(410, "Expired", f"too old resource version: {requested} ({oldest})")


def invalid(name: str, causes: list[dict[str, str]]) -> APIError:
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return APIError(
        status_body(
            422,
            "Invalid",
            f'Pod "{name}" is invalid: {text}',
            {"name": name, "kind": "Pod", "causes": causes},
        )
    )


# --- quantities (02-quantity-normalisation.json) ---------------------------------------------

_QUANTITY = re.compile(r"([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)", re.ASCII)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SUFFIX_OF = {v: k for k, v in _DECIMAL.items()}
_REGEX_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def canonical_quantity(sent: str | float) -> str:
    """The API server's canonical spelling; ``ValueError`` with its decode message otherwise."""
    text = (sent if isinstance(sent, str) else json.dumps(sent)).strip(" ")
    match = _QUANTITY.fullmatch(text)
    if match is None or match[1].count(".") > 1 or not re.search(r"\d", match[1]):
        raise ValueError(_REGEX_ERROR)
    number, suffix = Decimal(match[1]), match[2]
    exponent_form = re.fullmatch(r"([eE])([-+]?\d+)", suffix)
    if suffix in _BINARY:
        value = number * 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value = number.scaleb(_DECIMAL[suffix])
    elif exponent_form:
        value = number.scaleb(int(exponent_form[2]))
    else:
        raise ValueError("unable to parse quantity's suffix")
    sign = "+" if text.startswith("+") else ""
    # Anything finer than a milli-unit is rounded up to it (0.0001, 100u, 1n → 1m).
    value = (value * 1000).to_integral_value(rounding=ROUND_CEILING) / 1000
    if suffix in _BINARY and value == value.to_integral_value() and value >= 1024:
        amount = int(value)
        for name, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            if amount % 1024**power == 0:
                return f"{sign}{amount // 1024**power}{name}"
    mantissa, power = int(value * 1000), -3
    while power < 18 and mantissa != 0 and mantissa % 1000 == 0:
        mantissa, power = mantissa // 1000, power + 3
    if mantissa == 0:
        power = 0
    if exponent_form:
        letter = exponent_form[1]
        return f"{sign}{mantissa}" if power == 0 else f"{sign}{mantissa}{letter}{power}"
    return f"{sign}{mantissa}{_SUFFIX_OF[power]}"


def quantity_value(text: str) -> Decimal:
    """The number a canonical quantity denotes (for comparisons)."""
    match = _QUANTITY.fullmatch(text)
    assert match is not None
    number, suffix = Decimal(match[1]), match[2]
    if suffix in _BINARY:
        return number * Decimal(1024 ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number.scaleb(int(suffix[1:]))


# --- selectors -------------------------------------------------------------------------------

Matcher = Callable[[Mapping[str, Any]], bool]


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def label_matcher(selector: str | None) -> Matcher:
    """``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, comma-joined."""
    # (key, allowed values or None for "present", whether the test is negated)
    tests: list[tuple[str, set[str] | None, bool]] = []
    for part in _split_top(selector or ""):
        if m := re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\((.*)\)", part):
            tests.append((m[1], {v.strip() for v in m[3].split(",")}, m[2] == "notin"))
        elif m := re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)", part):
            tests.append((m[1], {m[3]}, m[2] == "!="))
        elif m := re.fullmatch(r"(!?)([\w./-]+)", part):
            tests.append((m[2], None, m[1] == "!"))
        else:
            raise bad_request(f"unable to parse requirement: {part!r}")

    def passes(labels: Mapping[str, str], key: str, values: set[str] | None, negated: bool) -> bool:
        found = key in labels if values is None else labels.get(key) in values
        return found != negated

    def match(pod: Mapping[str, Any]) -> bool:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return all(passes(labels, *test) for test in tests)

    return match


def field_matcher(selector: str | None) -> Matcher:
    """``metadata.name=x``, ``metadata.namespace=y`` (``==`` and ``!=`` too)."""
    tests = []
    for part in _split_top(selector or ""):
        m = re.fullmatch(r"(metadata\.name|metadata\.namespace)\s*(==|=|!=)\s*(.*)", part)
        if m is None:
            raise bad_request(f'field label not supported: "{part}"')
        field, op, value = m[1].split(".")[1], m[2], m[3]
        tests.append((field, op != "!=", value))

    def match(pod: Mapping[str, Any]) -> bool:
        metadata = pod.get("metadata") or {}
        return all((metadata.get(f) == v) == eq for f, eq, v in tests)

    return match


# --- create: validation and defaulting (01a-01c, 02, 07b) ------------------------------------

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1}
_CONTAINER_ORDER = [
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resources",
    "volumeMounts",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "securityContext",
    "stdin",
    "tty",
]
SPEC_ORDER = [
    "volumes",
    "initContainers",
    "containers",
    "restartPolicy",
    "terminationGracePeriodSeconds",
    "dnsPolicy",
    "serviceAccountName",
    "serviceAccount",
    "nodeName",
    "hostNetwork",
    "shareProcessNamespace",
    "securityContext",
    "schedulerName",
    "tolerations",
    "priority",
    "enableServiceLinks",
    "preemptionPolicy",
    "os",
]
DEFAULT_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{key}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for key in ("not-ready", "unreachable")
]


def ordered(data: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """Keys in the Go struct's order (as the server serialises), unknown ones last."""
    rank = {key: i for i, key in enumerate(order)}
    return dict(sorted(data.items(), key=lambda kv: rank.get(kv[0], len(order))))


def validate(pod: Mapping[str, Any]) -> None:
    """The 422s the fake reproduces (07b; negative quantities and requests > limits of 02).

    Quantities must be decoded (:func:`decode_quantities`) first, as the server does.
    """
    name = str((pod.get("metadata") or {}).get("name") or "")
    spec = pod.get("spec") or {}
    causes: list[dict[str, str]] = []

    def cause(reason: str, field: str, message: str) -> None:
        causes.append({"reason": reason, "message": message, "field": field})

    if len(name) > 253:
        cause(
            "FieldValueInvalid",
            "metadata.name",
            f'Invalid value: "{name}": must be no more than 253 characters',
        )
    elif not _DNS_SUBDOMAIN.fullmatch(name):
        cause(
            "FieldValueInvalid",
            "metadata.name",
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
            "character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        )
    if not spec.get("containers"):
        cause("FieldValueRequired", "spec.containers", "Required value")
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            path = f"spec.{key}[{i}]"
            cname = container.get("name", "")
            if not _DNS_LABEL.fullmatch(cname):
                cause(
                    "FieldValueInvalid",
                    f"{path}.name",
                    f'Invalid value: "{cname}": a lowercase RFC 1123 label must consist of lower '
                    "case alphanumeric characters or '-', and must start and end with an "
                    "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                )
            elif cname in seen:
                cause("FieldValueDuplicate", f"{path}.name", f'Duplicate value: "{cname}"')
            seen.add(cname)
            if not container.get("image"):
                cause("FieldValueRequired", f"{path}.image", "Required value")
            for j, port in enumerate(container.get("ports") or []):
                host = port.get("hostPort")
                if (
                    spec.get("hostNetwork")
                    and host is not None
                    and host != port.get("containerPort")
                ):
                    cause(
                        "FieldValueInvalid",
                        f"{path}.ports[{j}].hostPort",
                        f"Invalid value: {host}: must match `containerPort` when `hostNetwork` is true",
                    )
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                for resource, value in (resources.get(kind) or {}).items():
                    if str(value).startswith("-"):
                        cause(
                            "FieldValueInvalid",
                            f"{path}.resources.{kind}[{resource}]",
                            f'Invalid value: "{value}": must be greater than or equal to 0',
                        )
            limits = resources.get("limits") or {}
            for resource, value in sorted((resources.get("requests") or {}).items()):
                limit = limits.get(resource)
                if limit is not None and quantity_value(value) > quantity_value(limit):
                    cause(
                        "FieldValueInvalid",
                        f"{path}.resources.requests",
                        f'Invalid value: "{value}": must be less than or equal to {resource} '
                        f"limit of {limit}",
                    )
    if causes:
        raise invalid(name, causes)


def _image_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


_PROBE_ORDER = [
    "exec",
    "httpGet",
    "tcpSocket",
    "grpc",
    "initialDelaySeconds",
    "timeoutSeconds",
    "periodSeconds",
    "successThreshold",
    "failureThreshold",
    "terminationGracePeriodSeconds",
]
_HTTP_GET_ORDER = ["path", "port", "host", "scheme", "httpHeaders"]
_PORT_ORDER = ["name", "hostPort", "containerPort", "protocol", "hostIP"]
_MOUNT_ORDER = ["name", "readOnly", "recursiveReadOnly", "mountPath", "subPath"]


def _default_probe(probe: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(probe)
    if "httpGet" in out:
        out["httpGet"].setdefault("scheme", "HTTP")
        out["httpGet"] = ordered(out["httpGet"], _HTTP_GET_ORDER)
    for key, value in _PROBE_DEFAULTS.items():
        out.setdefault(key, value)
    out.setdefault("failureThreshold", 3)
    return ordered(out, _PROBE_ORDER)


def decode_quantities(pod: dict[str, Any], warnings: list[str]) -> None:
    """Canonicalise every resource quantity in place (400 on a malformed one), as decoding does.

    Fractional memory is accepted with a ``Warning`` (02): one per field, added to ``warnings``.
    """
    spec = pod.get("spec") or {}
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                values = resources.get(kind) or {}
                for resource, value in values.items():
                    try:
                        values[resource] = canonical_quantity(value)
                    except ValueError as exc:
                        raise bad_request(
                            f'Pod in version "v1" cannot be handled as a Pod: {exc}'
                        ) from None
                    number = quantity_value(values[resource])
                    if resource == "memory" and number != number.to_integral_value():
                        warnings.append(
                            f'299 - "spec.{key}[{i}].resources.{kind}[{resource}]: fractional '
                            f'byte value \\"{values[resource]}\\" is invalid, must be an integer"'
                        )


def _default_resources(resources: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("limits", "requests"):
        values = (resources or {}).get(kind)
        if values:
            out[kind] = dict(sorted(values.items()))
    if "limits" in out and "requests" not in out:
        out["requests"] = dict(out["limits"])
    return out


def _default_container(
    container: Mapping[str, Any], sa_mount: dict[str, Any] | None, host_network: bool
) -> dict[str, Any]:
    out = copy.deepcopy(dict(container))
    for i, port in enumerate(out.get("ports") or []):
        port.setdefault("protocol", "TCP")
        if host_network:
            port.setdefault("hostPort", port["containerPort"])
        out["ports"][i] = ordered(port, _PORT_ORDER)
    for env in out.get("env") or []:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if field_ref is not None:
            field_ref.setdefault("apiVersion", "v1")
            env["valueFrom"]["fieldRef"] = ordered(field_ref, ["apiVersion", "fieldPath"])
    out["resources"] = _default_resources(out.get("resources"))
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in out:
            out[probe] = _default_probe(out[probe])
    mounts = [ordered(m, _MOUNT_ORDER) for m in out.get("volumeMounts") or []]
    if sa_mount is not None:
        mounts.append(dict(sa_mount))
    if mounts:
        out["volumeMounts"] = mounts
    out.setdefault("terminationMessagePath", "/dev/termination-log")
    out.setdefault("terminationMessagePolicy", "File")
    out.setdefault("imagePullPolicy", _image_pull_policy(out.get("image", "")))
    return ordered(out, _CONTAINER_ORDER)


def _sa_volume(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def qos_class(spec: Mapping[str, Any]) -> str:
    """Zero quantities count as unset; requests default to limits (already copied)."""
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]

    def nonzero(values: Mapping[str, str] | None) -> dict[str, Decimal]:
        parsed = {k: quantity_value(v) for k, v in (values or {}).items() if k in ("cpu", "memory")}
        return {k: v for k, v in parsed.items() if v != 0}

    pairs = [
        (
            nonzero((c.get("resources") or {}).get("limits")),
            nonzero((c.get("resources") or {}).get("requests")),
        )
        for c in containers
    ]
    if not any(limits or requests for limits, requests in pairs):
        return "BestEffort"
    for limits, requests in pairs:
        if set(limits) != {"cpu", "memory"} or requests != limits:
            return "Burstable"
    return "Guaranteed"


def _fields(value: Any) -> Any:
    """A coarse ``fieldsV1``: the sent object's keys (list items keyed by name)."""
    if isinstance(value, dict):
        return {f"f:{k}": _fields(v) for k, v in value.items()}
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and "name" in v for v in value)
    ):
        return {".": {}, **{f'k:{{"name":"{v["name"]}"}}': {".": {}, **_fields(v)} for v in value}}
    return {}


def defaulted_pod(
    sent: Mapping[str, Any],
    *,
    namespace: str,
    manager: str,
    now: datetime,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    """The stored object for a create: decoding (400), validation (422), server defaults."""
    body = copy.deepcopy(dict(sent))
    decode_quantities(body, [] if warnings is None else warnings)
    validate(body)
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    automount = spec.get("automountServiceAccountToken", True)
    sa_name = "kube-api-access-" + "".join(
        random.choices(string.ascii_lowercase + string.digits, k=5)
    )
    sa_mount = (
        {
            "name": sa_name,
            "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        }
        if automount
        else None
    )
    host_network = bool(spec.get("hostNetwork"))
    out_spec: dict[str, Any] = {}
    volumes = []
    for volume in spec.get("volumes") or []:
        volume = copy.deepcopy(volume)
        if "hostPath" in volume:
            volume["hostPath"].setdefault("type", "")
        volumes.append(volume)
    if automount:
        volumes.append(_sa_volume(sa_name))
    if volumes:
        out_spec["volumes"] = volumes
    for key in ("initContainers", "containers"):
        if spec.get(key):
            out_spec[key] = [_default_container(c, sa_mount, host_network) for c in spec[key]]
    grace = spec.get("terminationGracePeriodSeconds", 30)
    out_spec.update(
        restartPolicy=spec.get("restartPolicy", "Always"),
        terminationGracePeriodSeconds=1 if grace < 0 else grace,
        dnsPolicy=spec.get("dnsPolicy", "ClusterFirst"),
        serviceAccountName=spec.get("serviceAccountName", "default"),
        serviceAccount=spec.get("serviceAccountName", "default"),
        securityContext=spec.get("securityContext", {}),
        schedulerName=spec.get("schedulerName", "default-scheduler"),
        tolerations=[*(spec.get("tolerations") or []), *copy.deepcopy(DEFAULT_TOLERATIONS)],
        priority=0,
        enableServiceLinks=spec.get("enableServiceLinks", True),
        preemptionPolicy="PreemptLowerPriority",
    )
    for key in ("nodeName", "os", "automountServiceAccountToken"):
        if key in spec:
            out_spec[key] = spec[key]
    for key in ("hostNetwork", "shareProcessNamespace"):
        if spec.get(key):  # a false toggle is the zero value: dropped
            out_spec[key] = True
    stamp = rfc3339(now)
    out_metadata: dict[str, Any] = {
        "name": metadata.get("name"),
        "namespace": namespace,
        "uid": str(uuid.uuid4()),
        "resourceVersion": "0",
        "generation": 1,
        "creationTimestamp": stamp,
    }
    for key in ("labels", "annotations"):
        if metadata.get(key):
            out_metadata[key] = dict(sorted(metadata[key].items()))
    out_metadata["managedFields"] = [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": stamp,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": _fields(
                    {k: metadata[k] for k in ("labels", "annotations") if k in metadata}
                ),
                "f:spec": _fields(spec),
            },
        }
    ]
    out_spec = ordered(out_spec, SPEC_ORDER)
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": out_metadata,
        "spec": out_spec,
        "status": {"phase": "Pending", "qosClass": qos_class(out_spec)},
    }


# --- delete arithmetic (03a, 03d, 03e, 03h) --------------------------------------------------


def graceful_deletion(
    metadata: Mapping[str, Any], grace: int, now: datetime
) -> tuple[str, int] | None:
    """``(deletionTimestamp, deletionGracePeriodSeconds)`` after a delete, None if unchanged.

    The first delete sets now + grace (whole seconds). Later ones may only shorten it:
    old timestamp - old grace + new grace, or now with grace 1 when that lies in the past.
    """
    current = metadata.get("deletionTimestamp")
    if current is None:
        return rfc3339(now + timedelta(seconds=grace)), grace
    old_grace = int(metadata.get("deletionGracePeriodSeconds") or 0)
    if grace >= old_grace:
        return None
    moved = parse_rfc3339(current) - timedelta(seconds=old_grace) + timedelta(seconds=grace)
    if moved <= now:
        return rfc3339(now), 1
    return rfc3339(moved), grace
