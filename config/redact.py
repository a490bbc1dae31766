"""Secrets never leave the process as text: :func:`redact` is the one function that masks them,
used by logging and by everything that prints or records settings and errors (run records,
chunk errors, ``status``).

It masks two kinds of secret:

- credentials inside any URL in the text (``http://user:secret@host`` → ``http://user:***@host``,
  ``?api_key=secret`` → ``?api_key=***``, ``http://token@host`` → ``http://***@host``), whether
  or not they were configured — but a PostgreSQL URL's user without a password is its role name,
  kept (``postgresql://rem@db/rem``);
- the configured secret values (tokens, API keys, URL passwords) wherever they appear, once
  :func:`remember_secrets` was called — they are process-wide, like the settings they come from —
  and a head of one quoted cut short (``Incorrect API key provided: sk-abcdef12****``, a message
  cut mid-key) where it stands on its own (:func:`_mask_heads`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

if TYPE_CHECKING:
    from config.settings import Settings

MASK = "***"
# Shorter values are too likely to occur by chance in ordinary text; URL credentials are masked
# by their place in the URL whatever their length.
MIN_SECRET_LENGTH = 4
# A head of a secret (its first characters, quoted cut short by a library) is masked from this
# length on: eight characters of a random key are far too many to meet by chance (62**8 ≈ 2e14),
# while fewer would mask common fragments and a provider's bare prefix (``sk-a``, ``http``,
# ``ghp_``) — and four, what OpenAI shows of a key's end, say nothing of it. A secret of this
# length or shorter is masked whole only: a head is shorter than its secret.
MIN_HEAD_LENGTH = 8
_URL_SETTINGS = ("chroma_url", "llm_base_url", "embedding_url")
_TOKEN_SETTINGS = ("chroma_token", "llm_api_key", "embedding_api_key", "mcp_token")
# What shows a quote cut short right after it: a mask, an ellipsis, or the end of the text.
_CUT = re.compile(r"\*|…|\.\.|$")
# A JSON string's escape of one letter or of a code point (:func:`_after_escape`).
_JSON_ESCAPE = re.compile(r"\\(?:[bfnrt]|u[0-9A-Fa-f]{4})")
# A URL's percent escape of one byte (``%20``, ``%3D``): a query or form value quoted in a message.
_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
# A parameter's name that says a secret: a run of name characters with one of these words in it.
# The word is looked for ahead, lazily, and the run is then taken whole without giving any back
# (possessive, Python 3.11+): one pass over the run from each ``?``/``&``/``;``, none of which is a
# name character, so the runs are disjoint and the search is linear in the text (determ34). Written
# as a run, a word and a run, it tried every split of a long run (``?tokentoken…`` of 200 KB: 32 s).
_SECRET_WORD = r"api[_-]?key|token|secret|password|passwd|pwd|auth|signature|sig|credential"
_SECRET_NAME = rf"(?=[A-Za-z0-9_.-]*?(?:{_SECRET_WORD}))[A-Za-z0-9_.-]*+"
# scheme://userinfo@ — greedy up to the last '@' before the path, so an unencoded '@' in a password is covered.
# A scheme is at most 32 characters (audit33): unbounded, it was tried from every word boundary of
# a long run of its characters (`ab-cd-ef-…`) to the run's end, a quadratic cost. Any letter may
# begin it, so a URL glued to a word or after a long run is still found.
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31}://)(?P<userinfo>[^\s/?#]*)@")
# A value already masked (``***``, perhaps followed by a ``:`` that ends a message's clause) is
# kept as it is: a message that quotes a redacted URL (store.postgres.redacted) is redacted again on
# its way out, and the value's characters would swallow that ``:``. Redaction is idempotent.
_PARAMETER_VALUE = r"[^&#\s'\"()<>\[\]]"
_MASKED_VALUE = r"\*\*\*(?=:?(?:[&#\s'\"()<>\[\]]|$))"
_SECRET_PARAMETER = re.compile(rf"(?P<name>[?&;]{_SECRET_NAME}=)(?:{_MASKED_VALUE}|{_PARAMETER_VALUE}*)", re.IGNORECASE)

# URL schemes whose user part, without a password, is a name and not a secret (_user_is_a_name).
_NAMED_USER_SCHEMES = frozenset({"postgresql", "postgres"})

_remembered: set[str] = set()
T = TypeVar("T")


def redact(value: T, *, also: Iterable[str] = ()) -> T:
    """``value`` with every secret masked (and the values in ``also``): a string, or the strings
    inside dicts, lists and tuples (keys included); anything else is returned as it is.

    >>> redact("cannot open Chroma (http://rem:hunter2@db:8000/?token=abc)")
    'cannot open Chroma (http://rem:***@db:8000/?token=***)'
    """
    if isinstance(value, str):
        return _redact_text(value, also)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {redact(k, also=also): redact(v, also=also) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, also=also) for v in value)  # type: ignore[return-value]
    return value


def secret_values(settings: Settings) -> set[str]:
    """The secret values in ``settings``: tokens, API keys, and the passwords (and secret query
    parameters) of the URL settings, as written and percent-decoded."""
    found: set[str] = set()
    for name in _TOKEN_SETTINGS:
        secret = getattr(settings, name)
        if secret is not None:
            found.add(secret.get_secret_value())
    for name in _URL_SETTINGS:
        found |= _url_secrets(getattr(settings, name))
    if settings.database_url is not None:  # a secret as a whole; its password wherever a driver quotes it
        found |= _url_secrets(settings.database_url.get_secret_value())
    return {value for value in found if len(value) >= MIN_SECRET_LENGTH}


def remember_secrets(values: Iterable[str]) -> None:
    """Add ``values`` to the secrets :func:`redact` masks in this process (call once the settings
    are loaded; see :func:`secret_values`)."""
    _remembered.update(value for value in values if len(value) >= MIN_SECRET_LENGTH)


def _redact_text(text: str, also: Iterable[str]) -> str:
    # Longest first, so a secret containing another is masked whole.
    extra = {value for value in also if len(value) >= MIN_SECRET_LENGTH}
    for secret in sorted(_remembered | extra, key=len, reverse=True):
        text = _mask_heads(text.replace(secret, MASK), secret)
    text = _URL_USERINFO.sub(_mask_userinfo, text)
    return _SECRET_PARAMETER.sub(lambda m: m["name"] + MASK, text)


def _mask_heads(text: str, secret: str) -> str:
    """``text`` with each head of ``secret`` (at least :data:`MIN_HEAD_LENGTH` of its first
    characters, fewer than all) masked where it stands on its own: not after a letter or digit (but
    after an escape: JSON's ``\\n`` or ``\\u0022``, a URL's ``%20``; :func:`_after_escape`), and followed
    by the end of the text or by anything but a letter or digit (``****``, ``…``, ``.``, a quote) —
    where a library cut the quote short. A longer token that only begins like the secret
    is another one, and kept. A head that is a word (letters, lower case after the first: the
    start of a passphrase like ``password-…``) is kept too: masked, it would mask that word in
    every message (PostgreSQL's ``password authentication failed``), and a random key's head is
    almost never one. A head that stops where the secret goes on with one of its own separators
    is masked only before a cut (``*``, ``…``, ``..``, the end of the text): before anything else it
    is the secret's first words said as a name (``rem-cycle:`` of the token ``rem-cycle-dev-token``,
    ``http://chroma-prod:8000`` of ``chroma-prod-token-…``)."""
    first = secret[:MIN_HEAD_LENGTH]
    if len(secret) <= MIN_HEAD_LENGTH or first not in text:
        return text
    kept, done, at = [], 0, text.find(first)
    while at != -1:
        end = _head_end(text, at, secret)
        if end is not None:
            kept += (text[done:at], MASK)
            done = end
        at = text.find(first, at + 1 if end is None else end)
    return "".join(kept) + text[done:]


def _head_end(text: str, at: int, secret: str) -> int | None:
    """Where the head of ``secret`` that begins at ``at`` in ``text`` ends, or ``None`` when none
    stands on its own there (see :func:`_mask_heads`)."""
    if at > 0 and text[at - 1].isalnum() and not _after_escape(text, at):
        return None
    end, most = at + MIN_HEAD_LENGTH, min(len(text), at + len(secret) - 1)
    while end < most and text[end] == secret[end - at]:
        end += 1
    head = text[at:end]
    if end < len(text) and text[end].isalnum() or head.isalpha() and head[1:].islower():
        return None
    if not secret[end - at].isalnum() and not _CUT.match(text, end):
        # The text stops where the secret goes on with one of its own separators: it says the
        # secret's first words (``rem-cycle`` of ``rem-cycle-dev-token``, a host, a database),
        # a name said for itself unless a cut shows there (audit33).
        return None
    return end


def _after_escape(text: str, at: int) -> bool:
    """Whether an escape ends at ``at`` in ``text``, so that its last letter or digit is no part of
    the word after it: a JSON string's (``\\n``, ``\\t``, ``\\u0022``: ``"error:\\nsk-abcdef12…"``, a
    model's answer quoted as JSON, determ34) or a URL's percent escape (``%20sk-abcdef12…``, ``%3D``:
    a form or query value quoted in a message, determ35). A backslash escaped before a JSON escape
    (``\\\\n``) is a backslash, and the letter after it the word's."""
    if at >= 3 and _PERCENT_ESCAPE.fullmatch(text, at - 3, at):
        return True
    for length in (2, 6):
        start = at - length
        if start >= 0 and _JSON_ESCAPE.fullmatch(text, start, at):
            backslash = start
            while backslash > 0 and text[backslash - 1] == "\\":
                backslash -= 1
            return (start - backslash) % 2 == 0
    return False


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match["userinfo"].partition(":")
    if colon:
        return f"{match['scheme']}{user}:{MASK}@"
    return f"{match['scheme']}{user}@" if _user_is_a_name(match["scheme"]) else f"{match['scheme']}{MASK}@"


def _user_is_a_name(scheme: str) -> bool:
    """Whether a URL of ``scheme`` (``postgresql://`` or ``postgresql``) without a password names
    a user in its user part. A PostgreSQL URL's is a role name (libpq takes a password only after
    ``:`` or as ``password=``), shown so the operator sees which role connects; any other URL's may
    be the credential itself (a token used as a user name), so it is masked."""
    return scheme.lower().removesuffix("://") in _NAMED_USER_SCHEMES


def _url_secrets(url: str) -> set[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return set()
    found = set()
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        user, colon, password = userinfo.partition(":")
        if colon or not _user_is_a_name(parts.scheme):
            found.add(password if colon else user)
    found |= {value for name, value in parse_qsl(parts.query) if re.fullmatch(_SECRET_NAME, name, re.IGNORECASE)}
    return found | {unquote(value) for value in found}
