"""The one rule for hiding credentials wherever asyncdeploy prints a value.

Two checks, applied together:

* a value whose **name** looks secret (``DB_PASSWORD``, ``HF_TOKEN``, ``SESSION_COOKIE``, ...) is
  replaced whole by :data:`MASK`;
* any other text has the **credentials inside it** masked: the password of a URL
  (``postgres://u:pw@host`` → ``postgres://u:****@host``), secret-looking ``key=value`` pairs of
  DSNs and query strings (``host=db password=pw``, ``?token=abc``), and the value of
  ``Authorization``/``Cookie`` headers.

A user name alone (``https://user@host``) is kept: it is what one needs to read the output.
Pure, and importable from every layer (plan errors, drivers, the CLI).
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MASK",
    "SECRET_NAME",
    "is_secret_name",
    "mask_env_entry",
    "mask_text",
    "mask_tree",
    "mask_value",
    "masked_repr",
]

MASK = "****"

SECRET_NAME = re.compile(
    r"PASS|PWD|SECRET|TOKEN|KEY|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION|DSN|SIGNATURE|SALT|CERT",
    re.IGNORECASE,
)
"""Names whose values are always masked (environment variables, mapping keys)."""

# scheme://user:password@ — greedy up to the last '@' of the word, so an unescaped '@' or '/'
# in the password is masked too (over-masking a path is the safe side).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s]*(?=@)")
# Authorization: Bearer abc / Cookie: a=b; c=d — everything to the end of the line.
_HEADER = re.compile(
    r"(?P<head>\b(?:proxy-)?(?:authorization|cookie|set-cookie)\s*[:=]\s*)[^\r\n]+", re.IGNORECASE
)
# password=pw, Pwd=pw; token='a b' — in DSNs, query strings and ODBC connection strings.
_PAIR = re.compile(
    rf"(?P<head>\b[\w.-]*(?:{SECRET_NAME.pattern})[\w.-]*\s*=\s*)"
    r"(?:'[^']*'|\"[^\"]*\"|[^\s;&,]+)",
    re.IGNORECASE,
)


def mask_text(text: str) -> str:
    """``text`` with the credentials inside it masked (URL passwords, secret pairs, headers)."""
    text = _HEADER.sub(lambda m: m["head"] + MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m["head"] + MASK, text)
    return _PAIR.sub(lambda m: m["head"] + MASK, text)


def is_secret_name(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def mask_value(name: str, value: str) -> str:
    """A named value as it may be printed: all of it masked when the name looks secret."""
    if is_secret_name(name):
        return MASK if value else value
    return mask_text(value)


def mask_env_entry(entry: str) -> str:
    """An engine ``NAME=value`` environment entry, masked."""
    name, sep, value = entry.partition("=")
    return f"{name}{sep}{mask_value(name, value)}" if sep else mask_text(entry)


def mask_tree(data: Any, *, name: str = "") -> Any:
    """A copy of JSON-like data with every string masked: by its key's name, then its content."""
    if isinstance(data, str):
        return mask_value(name, data)
    if isinstance(data, Mapping):
        return {k: mask_tree(v, name=str(k) if isinstance(v, str) else "") for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [mask_tree(item) for item in data]
    return data


_SHORT = reprlib.Repr()
_SHORT.maxlevel = 3
_SHORT.maxdict = _SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = 4
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlong = 40


def masked_repr(value: Any, *, name: str = "") -> str:
    """A value for an error message: only its type when ``name`` looks secret, else a masked,
    bounded ``repr`` (a plan file may hold anything: deep, huge, or self-referencing)."""
    if is_secret_name(name):
        return f"a {type(value).__name__} (not shown: {name} looks secret)"
    return mask_text(_SHORT.repr(value))
