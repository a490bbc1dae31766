"""Adversarial audit: a daemon on PostgreSQL while the server is down. psycopg's connection pool
retries in the background and says so through the standard library's ``logging`` — about a line a
second for the pool's 30 s. Those lines must be the worker's own kind of line (one JSON object,
secrets masked), not bare text among the JSON lines a log shipper parses."""

from __future__ import annotations

import io
import json
import logging

from worker.logs import configure_logging


def test_library_warnings_are_json_lines_with_secrets_masked() -> None:
    stream = io.StringIO()
    configure_logging(level="info", fmt="json", stream=stream)
    try:
        pool = logging.getLogger("psycopg.pool")
        # What psycopg_pool logs for each failed attempt while the server is down (its own words).
        pool.warning("error connecting in %r: %s", "rem-cycle",
                     'connection failed: connection to server at "127.0.0.1", port 5471 failed: Connection refused')
        pool.warning("retrying postgresql://rem:hunter2@db.internal/rem")
        logging.getLogger("psycopg.pool").debug("not shown below warning")
        lines = stream.getvalue().splitlines()
        assert len(lines) == 2, lines
        first, second = (json.loads(line) for line in lines)
        assert first["level"] == "warning" and first["logger"] == "psycopg.pool" and first["timestamp"]
        assert first["event"].startswith("error connecting in 'rem-cycle': connection failed")
        assert "hunter2" not in lines[1] and "rem:***@db.internal" in second["event"]
    finally:
        configure_logging(level="info", fmt="json", stream=io.StringIO())  # the next test's stream is its own
