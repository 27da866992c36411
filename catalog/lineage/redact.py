"""Keeping secrets and (optionally) names out of lineage events.

Events leave the process for a collector run by someone else, so everything that can carry a
credential is scrubbed before an event is stored in the outbox: URIs lose their userinfo,
query string and fragment; free text (error messages, SQL) loses the userinfo and query of any
URI it quotes and the value of anything that looks like ``password=...`` / ``token: ...``.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit, urlunsplit

# key=value / key: value pairs whose value is a secret (case-insensitive key match).
_SECRET_KEYS = (
    r"password|passwd|pwd|secret|secret[_-]?access[_-]?key|access[_-]?key(?:[_-]?id)?|api[_-]?key|apikey"
    r"|token|auth|authorization|credential|credentials|session[_-]?token|signature|x-amz-signature|sig"
)
_SECRET_PAIR = re.compile(
    rf"(?P<key>\b[\w-]*?(?:{_SECRET_KEYS})\b)(?P<sep>\s*[=:]\s*)(?P<value>'[^']*'|\"[^\"]*\"|[^\s'\",;&)]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
# scheme://[userinfo@]rest — the URI ends at whitespace or a quote.
_URI = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")

REDACTED = "***"


def redact_uri(uri: str) -> str:
    """``uri`` without userinfo, query string or fragment; text that is not a URI unchanged."""
    if "://" not in uri:
        return uri
    try:
        parts = urlsplit(uri)
    except ValueError:
        return REDACTED
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def redact_text(text: str) -> str:
    """Free text with URIs redacted and secret-looking ``key=value`` pairs masked."""
    text = _URI.sub(lambda m: redact_uri(m.group(0)), text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _SECRET_PAIR.sub(lambda m: f"{m.group('key')}{m.group('sep')}{REDACTED}", text)


def hash_name(name: str) -> str:
    """A stable stand-in for a dataset or job name (same name, same hash; not reversible)."""
    return "sha256:" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
