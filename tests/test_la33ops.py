"""Two of the thirty-second session's "left alone" items (la33ops): a secret quoted cut short by a
library (``Incorrect API key provided: sk-abcdef12****``, or a message cut mid-key) showed its
head, since :func:`config.redact.redact` matched whole values only; and ``import-notes`` given a
folder skipped a FIFO in it without a line. Real CLI, real loopback model server, real files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from config import redact as redaction
from config.redact import MASK, MIN_HEAD_LENGTH, redact
from tests.conftest import make_session, run_cli, write_sessions
from tests.llm_server import LLMServer, Status

KEY = "sk-rem33-4f9c1a7b2e8d6c3f0a9b1e7d"
# What OpenAI's 401 says of a wrong key: its head, stars, its last four characters.
SHOWN = KEY[:13] + "*" * 20 + KEY[-4:]
# rem-cycle keeps the first 500 bytes of an error answer (pipelines.extract.llm): this one quotes
# the whole key where that cut falls, 12 characters into it.
_QUOTED = f"Incorrect API key provided: {SHOWN}. You can find your API key at https://platform.example/account/api-keys. "
_BEFORE_CUT = len(json.dumps({"error": {"message": _QUOTED}})) - len('"}}')
_PAD = 500 - _BEFORE_CUT - len(" (sent: Bearer ") - 12
REFUSAL = Status(401, json.dumps({"error": {"message": _QUOTED + "x" * _PAD + f" (sent: Bearer {KEY})", "code": "invalid_api_key"}}))


def test_a_key_quoted_cut_short_by_the_model_server_is_masked_in_every_output_and_record(tmp_path: Path) -> None:
    """A 401 quoting the configured key as OpenAI does (its head, then stars) and again whole, past
    the 500 bytes rem-cycle keeps of an answer: the chunk's error (kept in the graph database,
    shown by ``status``), the log lines of ``--once`` and ``import-notes``' lines showed
    ``sk-rem33-4f9c``. No output and no file of the data dir (the run record ``rem_runs``, the
    chunk results) holds the key's first characters now; the message around them is kept."""
    data = tmp_path / "data"
    notes = tmp_path / "design.md"
    notes.write_text("The LazyEdgeQueue feeds the GraphStore.\n", encoding="utf-8")
    with LLMServer(default=REFUSAL) as llm:
        env = {"REM_DATA_DIR": str(data), "REM_LOG_LEVEL": "debug", "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": llm.url,
               "REM_LLM_MAX_RETRIES": "0", "REM_LLM_API_KEY": KEY}
        imported = run_cli("import", str(write_sessions(tmp_path / "in.jsonl", [make_session("s-cut", 4)])), env=env)
        assert imported.returncode == 0, imported.stderr
        once = run_cli("--once", "--json", env=env)
        assert once.returncode == 0, once.stderr
        notes_run = run_cli("import-notes", str(notes), env=env)
        assert notes_run.returncode == 1, notes_run.stderr
        assert llm.chat_count == 2  # the session's chunk and the notes file's, each refused
    status = run_cli("status", "--json", env=env)
    outputs = [once.stdout, once.stderr, notes_run.stdout, notes_run.stderr, status.stdout, status.stderr]
    head = KEY[:MIN_HEAD_LENGTH]
    for text in outputs:
        assert head not in text, text
    for path in data.rglob("*"):
        if path.is_file():
            assert head.encode() not in path.read_bytes(), path
    (failing,) = [c for c in json.loads(status.stdout)["failing_chunks"] if c["session_id"] == "s-cut"]
    assert f"Incorrect API key provided: {MASK}{'*' * 20}{KEY[-4:]}. You can find" in failing["error"], failing
    assert failing["error"].endswith(f"(sent: Bearer {MASK}"), failing
    assert f"Incorrect API key provided: {MASK}" in notes_run.stdout


def test_import_notes_masks_a_key_the_model_server_quotes_whole(tmp_path: Path) -> None:
    """``import-notes`` printed a failed file's error as the model server's answer gave it: a
    key the answer quoted whole was shown (every other output of the error, the log and the chunk
    record, masked it). Its result is masked as ``--once``'s is."""
    notes = tmp_path / "design.md"
    notes.write_text("The LazyEdgeQueue feeds the GraphStore.\n", encoding="utf-8")
    with LLMServer(default=Status(401, json.dumps({"error": {"message": f"key {KEY} refused"}}))) as llm:
        env = {"REM_DATA_DIR": str(tmp_path / "data"), "REM_EXTRACTOR": "openai", "REM_LLM_BASE_URL": llm.url,
               "REM_LLM_MAX_RETRIES": "0", "REM_LLM_API_KEY": KEY}
        for extra in ((), ("--json",)):
            run = run_cli("import-notes", *extra, str(notes), env=env)
            assert run.returncode == 1 and f"key {MASK} refused" in run.stdout, (run.stdout, run.stderr)
            assert KEY[:MIN_HEAD_LENGTH] not in run.stdout + run.stderr


@pytest.fixture
def remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """:data:`KEY` and a passphrase of words are this process's configured secrets for the test."""
    monkeypatch.setattr(redaction, "_remembered", set())
    redaction.remember_secrets([KEY, "password-for-rem-33", "hunter22"])


@pytest.mark.parametrize(("text", "shown"), [
    (f"Incorrect API key provided: {SHOWN}.", f"Incorrect API key provided: {MASK}{'*' * 20}{KEY[-4:]}."),
    (f"Bearer {KEY[:20]}", f"Bearer {MASK}"),  # a message cut mid-key
    (f"key={KEY[:8]}…", f"key={MASK}…"),  # the shortest head masked
    ("cannot connect: password-for-rem", f"cannot connect: {MASK}"),
])
def test_a_head_of_a_secret_standing_on_its_own_is_masked(remembered: None, text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize("text", [
    f"key {KEY[:7]}… refused",  # seven characters: too short to tell from chance
    f"the key {KEY[:12]}Zq9 is another one",  # a longer token that begins alike: not ours
    f"x{KEY[:16]}",  # inside a longer token
    'password authentication failed for user "rem"',  # a word the passphrase begins with
    "hunter2 stands alone",  # seven characters of a secret of eight, which is masked whole only
])
def test_ordinary_words_and_other_tokens_are_kept(remembered: None, text: str) -> None:
    assert redact(text) == text


def test_a_fifo_inside_a_folder_is_listed_not_skipped_silently(tmp_path: Path) -> None:
    """``import-notes notes/`` passed over a FIFO named ``pipe.md`` in the folder without a word
    and exited 0, while the same FIFO named itself was listed. It is listed alike now, never
    opened (a FIFO would wait for a writer), the exit is 1 as for any file not read, and the
    folder's notes are imported."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "design.md").write_text("The LazyEdgeQueue feeds the GraphStore.\n", encoding="utf-8")
    os.mkfifo(folder / "pipe.md")
    os.mkfifo(folder / "pipe.sock")  # not a notes file by its name: no more said of it than of any such file
    env = {"REM_DATA_DIR": str(tmp_path / "data")}
    run = run_cli("import-notes", str(folder), env=env, timeout=60)
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert run.stderr.splitlines() == [f"error     {folder / 'pipe.md'}: not a regular file or folder (a device, a FIFO or a socket); not read"]
    assert run.stdout.splitlines()[-1] == "1 imported, 0 unchanged, 0 failed", run.stdout
