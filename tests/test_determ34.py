"""The thirty-fourth session's determinism and redaction defects (determ34).

- The offline extractor's "imported by name from the standard library is no node" rule read the
  running Python's ``sys.stdlib_module_names``: two workers on different Pythons extracted one
  chunk differently under one extractor version. The list is frozen in the project now
  (:data:`pipelines.python_names.STANDARD_LIBRARY_MODULES`). A project module named like a
  standard-library one (``from secrets import SecretVault`` beside the project's ``secrets.py``) lost
  its names; the session showing the project's module keeps them.
- The model judge was shown at most ten of a node's aliases in the graph's order, while the
  question's key hashes all of them sorted: one question, two texts. They are shown in the
  names' own order (:func:`store.facts.name_order`), the key unchanged.
- A secret query parameter's name (``?tokentoken…``) took quadratic time to redact.
- A secret's head after a JSON escape (``\\nsk-…``) was kept unmasked.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from config import load_settings
from config.redact import MASK, redact, secret_values
from pipelines.identity import NodeRef, audit_question
from pipelines.python_names import STANDARD_LIBRARY_MODULES
from tests.test_extract import conversation, nodes_of
from tests.llm_server import LLMServer, Reply
from worker.knowledge import model_judge

KEY = "sk-abcdef1234567890XYZ"


def imports_and_uses(imports: str, *shown: str) -> set[str]:
    """The nodes of a coding chunk whose edit imports by ``imports`` and uses ``SecretVault``,
    ``LooseVersion`` and ``cgi.escape()``, and whose other turns show ``shown``."""
    edit = f"```python\n{imports}\nvault = SecretVault()\nv = LooseVersion('1.2')\nsafe = cgi.escape(text)\n```"
    turns = [("user", "fix the SecretVault"), ("assistant", edit), *(("tool", text) for text in shown),
             ("assistant", "`SecretVault()` checks `LooseVersion`; `cgi.escape()` quotes.")]
    return set(nodes_of(conversation(*turns)))


# Python 3.13's names lack those it removed (`distutils` in 3.12, `cgi` in 3.13).
ANOTHER_PYTHON = frozenset(sys.stdlib_module_names) - {"distutils", "cgi"}


def test_the_standard_library_rule_reads_no_running_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the rule read ``sys.stdlib_module_names``: on another Python (3.13's list) the same
    chunk made ``LooseVersion`` and ``cgi.escape`` nodes under the same extractor version."""
    imports = "from distutils.version import LooseVersion\nfrom vaults import SecretVault\nimport cgi"
    here = imports_and_uses(imports)
    monkeypatch.setattr(sys, "stdlib_module_names", ANOTHER_PYTHON)
    assert imports_and_uses(imports) == here == {"CLASS:SecretVault"}


def test_the_frozen_list_holds_the_running_pythons_names() -> None:
    """The list is the union of 3.10 to 3.14's (:mod:`pipelines.python_names`); a newer Python's
    new names show here, to be added with a new extractor version."""
    if sys.version_info >= (3, 14):
        pytest.skip("3.14's final names were not known when the list was frozen; see pipelines/python_names.py")
    assert set(sys.stdlib_module_names) <= STANDARD_LIBRARY_MODULES
    assert {"distutils", "imp", "cgi", "binhex", "tomllib", "annotationlib"} <= STANDARD_LIBRARY_MODULES


@pytest.mark.parametrize("shown", [
    "$ ls\n./secrets.py  ./README.md",
    "diff --git a/secrets.py b/secrets.py",
    "$ cat secrets/__init__.py",
    "Editing src/secrets/__init__.py",
])
def test_a_project_module_named_like_the_standard_librarys_keeps_its_names(shown: str) -> None:
    """``from secrets import SecretVault`` where the chunk shows the project's own top-level
    ``secrets`` module imports the project's ``SecretVault``: before, it was taken for the standard
    library's and made no node."""
    assert imports_and_uses("from secrets import SecretVault\nfrom distutils.version import LooseVersion\nimport cgi", shown) == {"CLASS:SecretVault"}


@pytest.mark.parametrize("shown", [
    "",
    # A package's module of that name shadows nothing: `from secrets import` is the standard library's.
    "diff --git a/vaults/secrets.py b/vaults/secrets.py",
    "from .secrets import SecretVault",
    # A bare name in a listing of some folder, a traceback through the standard library.
    "$ ls vaults\nsecrets.py\nstore.py",
    "  File \"/usr/lib/python3.11/secrets.py\", line 3",
    "  File \"/home/u/.venv/lib/python3.11/site-packages/secrets/__init__.py\"",
])
def test_a_name_from_the_standard_librarys_module_stays_no_node(shown: str) -> None:
    assert imports_and_uses("from secrets import SecretVault\nfrom distutils.version import LooseVersion\nimport cgi", shown) == set()


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


def test_a_url_settings_secret_parameters_are_still_its_secrets(tmp_path: Path) -> None:
    """The same name pattern tells which of a URL setting's parameters are secrets."""
    settings = load_settings(data_dir=tmp_path, llm_base_url="http://h/v1?api_key=abcd1234&page=22&X-Amz-Signature=zz99zz99")
    assert {"abcd1234", "zz99zz99"} <= secret_values(settings) and "22" not in secret_values(settings)


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


async def test_one_question_key_is_always_one_question_text(tmp_path: Path) -> None:
    """The same node with its aliases in two orders (as two reads of the graph may give them):
    one key, and — before, the first ten as given — one text, the fullest spellings shown."""
    spellings = ["LazyEdgeQueue"] + [f"LazyEdgeQueue{n:02d}" for n in range(11)] + ["leq", "LEQ"]
    forward = NodeRef("CLASS:LazyEdgeQueue", "CLASS", "LazyEdgeQueue", tuple(spellings))
    backward = NodeRef(forward.id, forward.type, forward.name, tuple(reversed(spellings)))
    options = [NodeRef("CLASS:EdgeQueue", "CLASS", "EdgeQueue", ("EdgeQueue", "edge queue"))]
    assert audit_question(forward, options) == audit_question(backward, options)
    with LLMServer() as server:
        server.script(*[Reply({"verdict": "create"})] * 2, match='"existing"')
        settings = load_settings(data_dir=tmp_path, extractor="openai", llm_base_url=server.url, llm_judge=True, llm_max_retries=0)
        async with model_judge(settings) as judge:
            assert judge is not None
            for node in (forward, backward):
                assert await judge.audit_identity(node, options) is None
        first, second = (json.loads(request.prompt) for request in server.chat_requests)
    assert first == second
    # Of as many words, the spelling that writes the id first, then the shorter.
    assert first["new"]["aliases"] == ["LazyEdgeQueue"] + [f"LazyEdgeQueue{n:02d}" for n in range(9)]
    assert first["existing"][0]["aliases"] == ["EdgeQueue", "edge queue"]
