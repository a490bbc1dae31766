"""Text neither engine can store (a lone surrogate: a command-line byte that is not UTF-8 arrives as
one) raises the StoreError family like any other database failure, on both engines and through the
real CLI: one line and exit 1, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import Settings
from store.errors import DatabaseError
from store.graph import GraphStore
from tests.conftest import make_session, run_cli, write_sessions
from tests.daemon_support import worker_env

pytestmark = pytest.mark.both_backends


def test_text_with_a_lone_surrogate_is_a_store_error(settings: Settings, open_graph_database) -> None:  # type: ignore[no-untyped-def]
    db = open_graph_database(settings.graph_path)
    try:
        with pytest.raises(DatabaseError, match="cannot store"):
            GraphStore(db).search_nodes("Graph\ud800Store", limit=5)
        assert GraphStore(db).search_nodes("GraphStore", limit=5) == []  # the connection is still usable
    finally:
        db.close()


def test_commands_given_a_byte_that_is_not_utf8_say_so_in_one_line(settings: Settings, tmp_path: Path) -> None:
    env = worker_env(settings.data_dir)
    if settings.database_url is not None:
        env["REM_DATABASE_URL"] = settings.database_url.get_secret_value()
    assert run_cli("import", str(write_sessions(tmp_path / "in.jsonl", [make_session("s1")])), env=env).returncode == 0
    assert run_cli("--once", env=env).returncode == 0
    for args in (["search", "Graph\udcff"], ["retry", "--session", "s\udcff"]):
        done = run_cli(*args, env=env)
        # input29: refused before the database sees it (exit 2), where the database's refusal was exit 1.
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert len(done.stderr.strip().splitlines()) == 1 and "is not UTF-8" in done.stderr, done.stderr
