"""An attack on the thirty-third session's code (audit33): the v12 heuristic's colour and
standard-library rules, the masking of a secret's head quoted cut short, the fullest name.

- A colour of digits has three, four or six of them (CSS's ``#RGB``, ``#RGBA``, ``#RRGGBB``): a
  quoted or JSON ``"#42"``, ``"#12345"`` is an issue number no colour can be, and a word that only
  ends like a colour's key (``Backfill: #1234``, ``subgraph: #555``, ``cfg: #123``) sets no colour.
- ``from os import path; from mypkg.models import InputConfig`` imports ``InputConfig`` from the project,
  not from the standard library: the names of one import statement end at its ``;``.
- A token that begins with a name said elsewhere (``rem-cycle-dev-token`` and ``rem-cycle``, a
  host, a database) masked that name wherever it stood alone, though nothing was cut there.
- A long run of a URL scheme's characters (``ab-cd-ef-…``) took quadratic time to redact.
- Of names of as many words, the longer as written named the node: ``Pam Beesly's``, a git diff's
  ``a/…``, quotes, an article, ``()`` made the decorated spelling the display name.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from config import Settings
from config.redact import MASK, redact
from pipelines.extract.heuristic import extract_heuristic
from pipelines.extract.model import validate_extraction
from store.facts import least_name
from tests.llm_server import LLMServer, Reply
from tests.test_change_scan import _query
from tests.test_extract import TYPES, conversation, nodes_of, unit
from tests.test_forget import _session
from tests.test_identity_judge_extension import judged, model
from tests.test_migrations_identity_verdicts import _import
from worker.cycle import run_cycle


def issues_in(text: str) -> set[str]:
    work = unit(text)
    return {n.name for n in validate_extraction(extract_heuristic(work), work, semantic_types=TYPES).nodes if n.type == "ISSUE"}


def test_an_issue_number_no_colour_can_be_is_an_issue() -> None:
    """Before, any quoted ``#digits`` and any ``#digits`` after a key merely containing ``fill``,
    ``bg``, ``fg`` or ``color`` was taken for a colour: every issue below was dropped."""
    text = ('{"ref": "#42", "closes": "#12345"}\nRevert "#77"\nBackfill: #1234, prefill= #88\n'
            "subgraph: #555; cfg: #123; Fulfilled: #321\nbg: #12\n")
    assert issues_in(text) == {"#42", "#12345", "#77", "#1234", "#88", "#555", "#123", "#321", "#12"}


def test_a_colour_of_three_four_or_six_digits_is_still_no_issue() -> None:
    text = ('textColor: "#333", fill:#555, bgColor="#1234", "#333333"\nBACKGROUND_COLOR = "#999"\n'
            "border-color: #000; --fg-color: #111111\nFixes #42.")
    assert issues_in(text) == {"#42"}


def test_a_name_imported_after_a_semicolon_from_the_project_is_a_node() -> None:
    script = ("```python\nfrom os import path; from mypkg.models import InputConfig\nfrom io import StringIO; import sys\n"
              "config = InputConfig(path.join('a', 'b'))\nbuf = StringIO()\n```")
    found = nodes_of(conversation(("user", "fix InputConfig"), ("assistant", script), ("assistant", "`InputConfig` joins paths; `StringIO()` too.")))
    assert "CLASS:InputConfig" in found and "CLASS:StringIO" not in found


@pytest.mark.parametrize(("secret", "text"), [
    ("rem-cycle-dev-token", "rem-cycle: cannot open /home/u/rem-cycle/graph.db"),
    ("chroma-prod-token-8f3k2", "cannot reach http://chroma-prod:8000 (timeout)"),
    ("myapp_dev_password", 'FATAL: database "myapp_dev" does not exist'),
    ("rem-cycle-dev-token", "rem-cycle-dev is the dev deployment"),
])
def test_a_name_a_secret_begins_with_is_kept_where_nothing_cut_it(secret: str, text: str) -> None:
    """The text stops where the secret goes on with one of its own separators: it says the
    secret's first words, as a name, and no cut is there (no ``*``, ``…`` or end of text)."""
    assert redact(text, also=[secret]) == text


@pytest.mark.parametrize(("secret", "text", "shown"), [
    ("rem-cycle-dev-token", "Bearer rem-cycle-dev…", f"Bearer {MASK}…"),
    ("rem-cycle-dev-token", "sent: rem-cycle-dev", f"sent: {MASK}"),
    ("rem-cycle-dev-token", "token rem-cycle-***", f"token {MASK}***"),
    ("rem-cycle-dev-token", "token rem-cycle-d: refused", f"token {MASK}: refused"),
    ("chroma-prod-token-8f3k2", "token chroma-prod-token-8f… refused", f"token {MASK}… refused"),
])
def test_a_head_cut_at_one_of_the_secrets_separators_is_still_masked(secret: str, text: str, shown: str) -> None:
    assert redact(text, also=[secret]) == shown


def test_the_plainer_spelling_of_the_same_words_names_the_node() -> None:
    """Among names of as many words, neither writing the id, the longer as written won: what the
    words leave out (a possessive, quotes, an article, a call's ``()``, a git diff's ``a/``) made
    the decorated spelling the display name. Longer words still win (``Pamela``)."""
    cases = [
        (["Pam Beesly's", "Pam Beesly", "Beesly"], "PERSON:Beesly", "Pam Beesly"),
        (['"Pam Beesly"', "Pam Beesly"], "PERSON:Beesly", "Pam Beesly"),
        (["the lazy edge queue", "lazy edge queue", "LEQ"], "CONCEPT:leq", "lazy edge queue"),
        (["LazyEdgeQueue.drain()", "LazyEdgeQueue.drain", "drain"], "METHOD:drain", "LazyEdgeQueue.drain"),
        (["a/django/contrib/admin/admin.py", "django/contrib/admin/admin.py", "admin.py"], "FILE:admin.py", "django/contrib/admin/admin.py"),
        (["Pam Beesly", "Pamela Beesly", "Beesly"], "PERSON:Beesly", "Pamela Beesly"),
        # White space is no decoration: the spaced spelling stays first, as before.
        (["PamBeesly", "Pam Beesly", "Beesly"], "PERSON:Beesly", "Pam Beesly"),
        (["LazyEdgeQueue", "lazy_edge_queue", "lazy edge queue", "LEQ"], "CONCEPT:leq", "lazy edge queue"),
    ]
    for names, node_id, named in cases:
        for order in (names, names[::-1]):
            assert least_name(order, node_id=node_id) == named, (order, node_id)


def test_a_long_run_of_letters_and_hyphens_is_redacted_in_linear_time() -> None:
    """The URL pattern's scheme (``\\b[A-Za-z][A-Za-z0-9+.-]*://``) was tried from every word
    boundary of a run of such characters, each try reading to the run's end: a 240 KB run of
    ``ab-cd-…`` (a model's repetition loop quoted in an error, a long dotted or hyphenated list)
    took some 14 s, 480 KB a minute. A scheme is at most 32 characters now; a URL's password after
    a long run, or glued to a word (``x_http://``), is still masked."""
    started = time.perf_counter()
    assert redact("ab-cd-ef-gh-" * 20000) == "ab-cd-ef-gh-" * 20000
    assert time.perf_counter() - started < 2
    assert redact("x" * 100 + "-https://rem:hunter2@db/x") == "x" * 100 + f"-https://rem:{MASK}@db/x"
    assert redact("x_https://rem:hunter2@db/x") == f"x_https://rem:{MASK}@db/x"
    assert redact("see postgresql://rem@db/rem") == "see postgresql://rem@db/rem"


@pytest.mark.both_backends
async def test_a_cycle_names_the_joined_person_by_the_plain_spelling(settings: Settings, tmp_path: Path) -> None:
    """A real cycle: the model says `Pam Beesly's`, `Pam Beesly` and `Beesly`; the possessive joins
    `Pam Beesly` by its words, the judge joins `Beesly`. The node keeps the least id,
    `PERSON:Beesly`, and is named `Pam Beesly` (before: `Pam Beesly's`); every spelling stays an
    alias."""
    with LLMServer(default=Reply(model(names=("Pam Beesly's", "Pam Beesly", "Beesly")))) as server:
        mine = judged(settings, server)
        await _import(mine, tmp_path / "one.jsonl", [_session("one", "2026-11-01T10:00:00Z", ["Pam Beesly's desk: Pam Beesly and Beesly again."])])
        assert (await run_cycle(mine)).outcome == "completed"
    people = _query(settings, "SELECT id, name FROM nodes WHERE label = 'PERSON'")
    assert people == [("PERSON:Beesly", "Pam Beesly")], people
    aliases = {r[0] for r in _query(settings, "SELECT alias FROM node_aliases WHERE node_id = ?", ("PERSON:Beesly",))}
    assert aliases == {"Beesly", "Pam Beesly", "Pam Beesly's"}
