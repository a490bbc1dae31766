"""The thirty-fourth session's determinism and redaction defects (determ34).

- The offline extractor's "imported by name from the standard library is no node" rule read the
  running Python's ``sys.stdlib_module_names``: two workers on different Pythons extracted one
  chunk differently under one extractor version. The list is frozen in the project now
  (:data:`pipelines.python_stdlib.STANDARD_LIBRARY_MODULES`). A project module named like a
  standard-library one (``from secrets import Vault`` beside the project's ``secrets.py``) lost
  its names; the session showing the project's module keeps them.
- The model judge was shown at most ten of a node's aliases in the graph's order, while the
  question's key hashes all of them sorted: one question, two texts. They are shown in the
  names' own order (:func:`store.facts.name_order`), the key unchanged.
- A secret query parameter's name (``?tokentoken…``) took quadratic time to redact.
- A secret's head after a JSON escape (``\\nsk-…``) was kept unmasked.
"""

from __future__ import annotations

import time

import pytest

from config.redact import MASK, redact

KEY = "sk-abcdef1234567890XYZ"


def test_a_long_parameter_name_is_redacted_in_linear_time() -> None:
    """``?`` before a 200 KB run of ``token``: the name pattern (a run, a secret word, a run) tried
    every split of the run, each reading to its end — 32 s here before; now a few milliseconds. The
    bound is generous: only a quadratic search comes near it."""
    text = "?" + "token" * 40_000
    started = time.perf_counter()
    assert redact(text) == text
    assert redact("&" + "x-" * 100_000 + "token=abc") == "&" + "x-" * 100_000 + f"token={MASK}"
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize(("text", "shown"), [
    ("GET /v1?api_key=abc&x=1", f"GET /v1?api_key={MASK}&x=1"),
    ("GET /v1?x=1&X-Amz-Signature=abc#top", f"GET /v1?x=1&X-Amz-Signature={MASK}#top"),
    ("a?page=2;auth_token=abc def", f"a?page=2;auth_token={MASK} def"),
    ("a?page=2&size=3", "a?page=2&size=3"),
    ("a?tokens_total=7", f"a?tokens_total={MASK}"),
    ("a?page=x;token=abc", f"a?page=x;token={MASK}"),
    (f"a?token={MASK}: refused", f"a?token={MASK}: refused"),
    ("?token", "?token"),
])
def test_a_secret_parameter_is_masked_as_before(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(("text", "shown"), [
    (r'{"error": "key:\nsk-abcdef12…"}', rf'{{"error": "key:\n{MASK}…"}}'),
    (r'"bad key\tsk-abcdef1234"', rf'"bad key\t{MASK}"'),
    (r'"key \u0022sk-abcdef1234\u0022"', rf'"key \u0022{MASK}\u0022"'),
])
def test_a_head_after_a_json_escape_is_masked(text: str, shown: str) -> None:
    """The escape's letter (``n`` of ``\\n``) stood before the head, which was taken for the end
    of a longer token and kept."""
    assert redact(text, also=[KEY]) == shown


@pytest.mark.parametrize(("secret", "text"), [
    # An escaped backslash and a letter: the letter begins the token, another one.
    (KEY, r'"dir C:\\nsk-abcdef12 x"'),
    # A word after an escape is still a word, not a passphrase's head.
    ("password-reset-token-9f8e", r'"FATAL:\npassword authentication failed"'),
    (KEY, r'"\nsk-abcdef12zz is another key"'),
])
def test_a_word_or_another_token_after_an_escape_is_kept(secret: str, text: str) -> None:
    assert redact(text, also=[secret]) == text
