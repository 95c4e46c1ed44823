"""Image references, checked by the distribution reference grammar that Docker, Podman and the
kubelet parse (github.com/distribution/reference, ``reference.go`` and ``regexp.go``)::

    reference        := name [ ":" tag ] [ "@" digest ]
    name             := [domain "/"] path-component ["/" path-component]*
    domain           := host [":" port-number]
    path-component   := alpha-numeric [separator alpha-numeric]*     (lowercase only)
    separator        := [_.] | "__" | [-]+
    tag              := [\\w][\\w.-]{0,127}
    digest           := algorithm ":" hex   (sha256, sha384 or sha512: 64, 96 or 128
                                             lowercase hex digits, as go-digest validates)

A first component that is no path component must be a registry ``host[:port]`` (the
grammar's optional domain; uppercase is allowed there only); the name is at most 255
characters. An
invalid reference reaching an engine gets misleading answers ("no such image", "Invalid
redirect URL origin"); here it is a ``PlanError`` with the rule that failed.
"""

from __future__ import annotations

import re

__all__ = ["NAME_TOTAL_LENGTH_MAX", "image_reference_problem"]

NAME_TOTAL_LENGTH_MAX = 255
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*", re.ASCII)
_DOMAIN_COMPONENT = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?", re.ASCII)
_IPV6 = re.compile(r"\[[a-fA-F0-9:]+\]", re.ASCII)
_PORT = re.compile(r"[0-9]+", re.ASCII)
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
_ALGORITHM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*", re.ASCII)
_HEX = re.compile(r"[0-9a-fA-F]{32,}", re.ASCII)
_DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}  # go-digest's registered ones
_LOWER_HEX = re.compile(r"[0-9a-f]+", re.ASCII)


def image_reference_problem(reference: str) -> str | None:
    """What is wrong with ``reference``, or None when it is a valid image reference."""
    if not reference:
        return "is empty"
    name, at, digest = reference.partition("@")
    if at and (problem := _digest_problem(digest)):
        return problem
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.fullmatch(tag):
            return (
                f"has an invalid tag {tag!r} (letters, digits, '_', '.' and '-', at most 128, "
                "not starting with '.' or '-')"
            )
    if not name:
        return "has no repository name"
    if len(name) > NAME_TOTAL_LENGTH_MAX:
        return f"has a name of {len(name)} characters (at most {NAME_TOTAL_LENGTH_MAX})"
    components = name.split("/")
    first = components[0]
    if len(components) > 1 and _PATH_COMPONENT.fullmatch(first) is None:
        # not a path component: then it must be a registry (the grammar's optional domain)
        if problem := _domain_problem(first):
            return problem
        components = components[1:]
    for component in components:
        if not _PATH_COMPONENT.fullmatch(component):
            if component.lower() != component and _PATH_COMPONENT.fullmatch(component.lower()):
                return f"must be lowercase: {component!r} (the repository name)"
            return (
                f"has an invalid path component {component!r} (lowercase letters and digits, "
                "separated by '.', '_', '__' or dashes)"
            )
    return None


def _domain_problem(domain: str) -> str | None:
    """``host[:port]``: a hostname or IPv4 address, or ``[IPv6]``."""
    host, port = domain, None
    if domain.startswith("["):
        end = domain.find("]") + 1
        host, rest = domain[:end], domain[end:]
        if not end or not _IPV6.fullmatch(host) or (rest and not rest.startswith(":")):
            return f"has an invalid registry host {domain!r}"
        port = rest[1:] if rest else None
    else:
        if ":" in domain:
            host, _, port = domain.partition(":")
        if not all(_DOMAIN_COMPONENT.fullmatch(part) for part in host.split(".")):
            return f"has an invalid registry host {host!r}"
    if port is not None and not _PORT.fullmatch(port):
        return f"has an invalid registry port in {domain!r}"
    return None


def _digest_problem(digest: str) -> str | None:
    algorithm, colon, hex_part = digest.partition(":")
    if not colon or not _ALGORITHM.fullmatch(algorithm) or not _HEX.fullmatch(hex_part):
        return f"has an invalid digest {digest!r} (algorithm:hex, at least 32 hex digits)"
    length = _DIGEST_LENGTHS.get(algorithm)
    if length is None:
        return f"has a digest of an unsupported algorithm {algorithm!r} (sha256, sha384, sha512)"
    if len(hex_part) != length or not _LOWER_HEX.fullmatch(hex_part):
        return f"has an invalid {algorithm} digest ({length} lowercase hex digits)"
    return None
