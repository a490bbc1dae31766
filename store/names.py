"""The words of a name, and a path as the file system reads it (pure): the one split identity
compares prose by (:func:`words`, :func:`normal_path`, imported by :mod:`pipelines.identity`) and
a node's display name is ranked by (:func:`store.facts.name_order`: the name of more words names
the node). Here, below both, so that the store's merges and the pipelines' commits rank names by
the same words."""

from __future__ import annotations

import re
import unicodedata

CAMEL_LOWER_UPPER = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
CAMEL_ACRONYM = re.compile(r"(?<=[A-Z])(?=[A-Z][a-z])")
NON_WORD = re.compile(r"[^0-9a-z]+")
CALL = re.compile(r"\([^()]*\)\s*$")
QUOTES = "`'\"“”‘’"
POSSESSIVE = re.compile(r"['’]s\b")
# Dropped at the start of a name: articles and demonstratives ("this Sequential Feature Selector").
ARTICLES = frozenset({"the", "a", "an", "this", "that", "these", "those"})
# Dropped inside a name too ("Accessing the UserAdmin" = "Accessing UserAdmin"); not "a", which
# inside a name is often a letter ("Type A Error").
INNER_ARTICLES = frozenset({"the", "an"})
# What a git diff, a relative path or a shell puts before a path: `a/x.py`, `b/x.py`, `./x.py`.
PATH_PREFIX = re.compile(r"^(?:[ab]/(?=.))?(?:\./)*")
URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def plain(text: str) -> str:
    """NFKD with accents dropped (``Tomás`` → ``Tomas``), quotes around it stripped."""
    if text.isascii():  # nothing to decompose or drop: skips a Python loop over each character
        return text.strip().strip(QUOTES)
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).strip().strip(QUOTES)


def words(text: str) -> list[str]:
    """Lower-case words: camelCase split, punctuation and underscores as separators, accents, a
    possessive ``'s`` and a call's ``(…)`` dropped, a leading article dropped, and ``the``/``an``
    inside the name.
    ``"LazyEdgeQueue.drain()"`` → ``["lazy", "edge", "queue", "drain"]``."""
    text = POSSESSIVE.sub("", CALL.sub("", plain(text)))
    text = CAMEL_ACRONYM.sub(" ", CAMEL_LOWER_UPPER.sub(" ", text))
    found = [w for w in NON_WORD.split(text.casefold()) if w]
    found = found[1:] if len(found) > 1 and found[0] in ARTICLES else found
    return [w for i, w in enumerate(found) if i == 0 or w not in INNER_ARTICLES]


def normal_path(text: str) -> str:
    """A path as the file system reads it: ``\\`` as ``/``, a git diff's ``a/``/``b/`` and any
    ``./`` in front dropped, case kept (``a/src/X.py`` → ``src/X.py``). URLs are left whole."""
    path = plain(text).replace("\\", "/")
    return path if URL.match(path) else PATH_PREFIX.sub("", path)
