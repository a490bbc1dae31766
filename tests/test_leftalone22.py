"""What the twentieth session left alone, tested (leftalone22): a forget whose held answers' file
refuses its scrub, a rewrite seen by ``rem-cycle backfill``, and what ``forget`` and
``import-notes`` say. Real CLI, real SQLite files and a real PostgreSQL schema, real embedded
Chroma."""

from __future__ import annotations

import json

import pytest

from config import Settings
from store.backend import open_database
from tests.conftest import run_cli


@pytest.mark.both_backends
def test_a_forget_whose_held_answers_file_refuses_its_scrub_is_done_and_says_so(
    settings: Settings, database_url: str | None,
) -> None:
    """``forget`` takes the answers quoting what it took out of ``held-answers.jsonl``; the file
    refusing (here a directory at its name: chmod does not stop root) leaves the forget done:
    exit 0, ``held_answers_error`` in ``--json``, a warning; the records settle all the same."""
    from tests.test_forgetdur import _env

    open_database(settings).close()
    settings.held_answers_path.mkdir(parents=True)

    done = run_cli("forget", "--memory", "s-x-t0000", "--json", env=_env(settings, database_url))

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["tombstone"] is True and report["held_answers_error"], report
    assert "queue_error" not in report and report["erased"] is True
    assert f"the forget is done, but {settings.held_answers_path.name} may still hold answers" in done.stderr


def test_a_held_answers_line_nested_too_deeply_is_dropped_as_unreadable_by_a_forget(settings: Settings) -> None:
    """A damaged line the JSON parser cannot descend (``[`` two hundred thousand times) made the
    file's read raise ``RecursionError``, no ``OSError``: the forget's withdrawal failed whole
    (``queue_error``, its record kept) and every extract phase's take of the file raised. It is an
    unreadable line now, dropped by the scrub as a line cut short is."""
    from tests.test_forgetdur import _env

    open_database(settings).close()
    settings.held_answers_path.write_bytes(b"[" * 200_000 + b"\n")

    done = run_cli("forget", "--memory", "s-x-t0000", "--json", env=_env(settings, None))

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "queue_error" not in report and "held_answers_error" not in report, report
    assert not settings.held_answers_path.exists()
