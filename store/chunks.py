"""Run state of extraction: ``chunk_results``, one row per (chunk content hash, extractor fingerprint).

An ``ok`` row is the chunk's extraction, reused as long as the chunk's content and the extractor's
fingerprint are unchanged (no second model call) — and, by its text hash, in any other session that
has the same words (:meth:`ChunkResultStore.answers_by_text`), where it is copied into that
session's own row (:meth:`ChunkResultStore.record_copies`). A ``failed`` row carries the failure
kind, the attempts and the time before which the chunk is not tried again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from config.redact import redact
from store.db import CHUNK_TEXT_VERSION, Database, in_batches
from store.graph import dumps, utc_now

# A paid extraction as ``restore`` carries it from the graph it replaces (:meth:`ChunkResultStore.answers`).
ANSWER_COLUMNS = ("session_id", "chunk_id", "content_hash", "fingerprint", "attempts", "tokens_in", "tokens_out",
                  "latency_ms", "payload", "run_id", "updated_at", "text_hash", "memory_ids")
# The columns of a row, in the order :meth:`ChunkResultStore._upsert` writes them.
_WRITTEN = ("session_id", "chunk_id", "content_hash", "fingerprint", "status", "error_kind", "error", "next_attempt_at",
            "tokens_in", "tokens_out", "latency_ms", "payload", "run_id", "updated_at", "text_hash", "memory_ids", "attempts")


@dataclass(frozen=True, slots=True)
class ChunkResult:
    session_id: str
    chunk_id: str
    content_hash: str
    fingerprint: str
    status: str
    error_kind: str | None
    error: str | None
    attempts: int
    next_attempt_at: str | None
    tokens_in: int
    tokens_out: int
    latency_ms: float
    payload: dict[str, Any] | None
    run_id: str | None
    updated_at: str
    # Where the answer can be reused in another session: both set, or both None (a failure, or a
    # row written before schema 19).
    text_hash: str | None = None
    memory_ids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class AnswerCopy:
    """An answer reused from another session's row, written as the reusing unit's own row."""

    session_id: str
    chunk_id: str
    content_hash: str
    text_hash: str
    memory_ids: tuple[str, ...]
    fingerprint: str
    payload: dict[str, Any]
    run_id: str | None


class ChunkResultStore:
    """Typed access to ``chunk_results`` (same database file as the graph)."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    def get_many(self, content_hashes: Iterable[str], fingerprint: str) -> dict[str, ChunkResult]:
        """Rows for ``fingerprint`` among ``content_hashes``, by content hash."""
        hashes = sorted(set(content_hashes))
        found: dict[str, ChunkResult] = {}
        for part, marks in in_batches(hashes):
            rows = self.db.query(
                f"SELECT * FROM chunk_results WHERE fingerprint = ? AND content_hash IN ({marks})", [fingerprint, *part]
            )
            found.update((r["content_hash"], _result(r)) for r in rows)
        return found

    def answers_by_text(self, text_hashes: Iterable[str], fingerprint: str) -> dict[str, ChunkResult]:
        """An ``ok`` row for ``fingerprint`` of each of ``text_hashes`` that has one, in any session
        (of several, the one of the least content hash), by text hash. The choice is made in the
        index ``chunk_results_text`` alone, so a text held by many sessions costs one row read;
        rows written before schema 19 have no text hash."""
        hashes = sorted(set(text_hashes))
        found: dict[str, ChunkResult] = {}
        for part, marks in in_batches(hashes):
            rows = self.db.query(
                "SELECT * FROM chunk_results WHERE fingerprint = ? AND content_hash IN ("
                f"SELECT MIN(content_hash) FROM chunk_results WHERE text_hash IN ({marks}) AND fingerprint = ? "
                "AND status = 'ok' GROUP BY text_hash) AND payload IS NOT NULL",
                [fingerprint, *part, fingerprint],
            )
            found.update((r["text_hash"], _result(r)) for r in rows)
        return found

    def record_ok(
        self,
        *,
        session_id: str,
        chunk_id: str,
        content_hash: str,
        text_hash: str,
        memory_ids: Sequence[str],
        fingerprint: str,
        tokens_in: int,
        tokens_out: int,
        latency_ms: float,
        payload: dict[str, Any],
        run_id: str | None,
    ) -> None:
        """Store a successful extraction (replacing an earlier failure of the same chunk)."""
        self._upsert([
            (session_id, chunk_id, content_hash, fingerprint, "ok", None, None, None, tokens_in, tokens_out,
             latency_ms, dumps(payload), run_id, self.clock(), text_hash, dumps(list(memory_ids)), 1),
        ])

    def record_copies(self, copies: Sequence[AnswerCopy]) -> None:
        """Store answers reused from other sessions as the reusing units' own rows, in one
        transaction (replacing a failure of the same chunk): no tokens, no attempt — the model was
        not asked. So the reusing session keeps its answers when the session they came from is
        forgotten, and its own forgets and re-extractions read and prune them as any other."""
        if not copies:
            return
        now = self.clock()
        self._upsert([
            (c.session_id, c.chunk_id, c.content_hash, c.fingerprint, "ok", None, None, None, 0, 0, 0.0, dumps(c.payload),
             c.run_id, now, c.text_hash, dumps(list(c.memory_ids)), 0)
            for c in copies
        ])

    def record_failure(
        self,
        *,
        session_id: str,
        chunk_id: str,
        content_hash: str,
        fingerprint: str,
        error_kind: str,
        error: str,
        next_attempt_at: str | None,
        tokens_in: int,
        tokens_out: int,
        latency_ms: float,
        run_id: str | None,
    ) -> int:
        """Store a failed attempt — unless the chunk has an answer (another worker's attempt at the
        same text succeeded meanwhile): the answer stays. Returns the chunk's attempt count so far."""
        self._upsert([
            (session_id, chunk_id, content_hash, fingerprint, "failed", error_kind, redact(error)[:2000], next_attempt_at,
             tokens_in, tokens_out, latency_ms, None, run_id, self.clock(), None, None, 1),
        ])
        rows = self.db.query(
            "SELECT attempts FROM chunk_results WHERE content_hash = ? AND fingerprint = ?", (content_hash, fingerprint)
        )
        return rows[0][0]

    def _upsert(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Write rows of :data:`_WRITTEN` (``attempts``: the attempts they add, 0 for a copy)."""
        with self.db.transaction() as conn:
            conn.executemany(
                f"INSERT INTO chunk_results({', '.join(_WRITTEN)}) VALUES ({', '.join('?' * len(_WRITTEN))}) "
                "ON CONFLICT(content_hash, fingerprint) DO UPDATE SET "
                "session_id = excluded.session_id, chunk_id = excluded.chunk_id, status = excluded.status, "
                "error_kind = excluded.error_kind, error = excluded.error, next_attempt_at = excluded.next_attempt_at, "
                "tokens_in = chunk_results.tokens_in + excluded.tokens_in, "
                "tokens_out = chunk_results.tokens_out + excluded.tokens_out, latency_ms = excluded.latency_ms, "
                "payload = excluded.payload, run_id = excluded.run_id, updated_at = excluded.updated_at, "
                "text_hash = excluded.text_hash, memory_ids = excluded.memory_ids, "
                "attempts = chunk_results.attempts + excluded.attempts "
                # A failure never replaces an answer: another worker's attempt at the same text may
                # have succeeded while this one's was failing (paid for; reused, never asked again).
                "WHERE chunk_results.status != 'ok' OR excluded.status = 'ok'",
                rows,
            )

    def answers(self, *, page: int = 500) -> Iterator[tuple[Any, ...]]:
        """Every ``ok`` row (an extraction the model was paid for) as a tuple of
        :data:`ANSWER_COLUMNS` (the payload as its stored JSON text: never decoded), read ``page``
        rows at a time in key order (never the whole table in memory)."""
        # A database a release before schema 19 wrote, read without migrating it (``restore``
        # reads the graph it replaces read-only): its rows have no text hash.
        known = self.db.schema_version >= CHUNK_TEXT_VERSION
        columns = ", ".join(c if known or c not in ("text_hash", "memory_ids") else f"NULL AS {c}" for c in ANSWER_COLUMNS)
        after: tuple[str, str] = ("", "")
        while True:
            rows = self.db.query(
                f"SELECT {columns} FROM chunk_results WHERE status = 'ok' AND payload IS NOT NULL AND "
                "(content_hash > ? OR (content_hash = ? AND fingerprint > ?)) ORDER BY content_hash, fingerprint LIMIT ?",
                (after[0], after[0], after[1], page),
            )
            yield from (tuple(r) for r in rows)
            if len(rows) < page:
                return
            after = (rows[-1]["content_hash"], rows[-1]["fingerprint"])

    def keep_answers(self, answers: Iterable[Sequence[Any]]) -> int:
        """Write these rows of :meth:`answers` where this database has no answer for their (content
        hash, fingerprint) — none, or a failure — as they are (their tokens were paid once, not
        again). Returns how many were written."""
        rows = [tuple(a) for a in answers]
        if not rows:
            return 0
        updates = ", ".join(f"{c} = excluded.{c}" for c in ANSWER_COLUMNS if c not in ("content_hash", "fingerprint"))
        with self.db.transaction() as conn:
            return conn.executemany(
                f"INSERT INTO chunk_results({', '.join(ANSWER_COLUMNS)}, status) VALUES ({', '.join('?' * len(ANSWER_COLUMNS))}, 'ok') "
                f"ON CONFLICT(content_hash, fingerprint) DO UPDATE SET {updates}, status = 'ok', error_kind = NULL, "
                "error = NULL, next_attempt_at = NULL WHERE chunk_results.status != 'ok'",
                rows,
            ).rowcount

    def session_results(self, session_id: str) -> list[ChunkResult]:
        """The session's ``ok`` rows (every fingerprint), in no particular order."""
        rows = self.db.query("SELECT * FROM chunk_results WHERE session_id = ? AND status = 'ok'", (session_id,))
        return [_result(r) for r in rows]

    def delete_results(self, keys: Iterable[tuple[str, str]]) -> int:
        """Delete the rows of these (content hash, fingerprint) keys."""
        doomed = sorted(set(keys))
        with self.db.transaction() as conn:
            conn.executemany("DELETE FROM chunk_results WHERE content_hash = ? AND fingerprint = ?", doomed)
        return len(doomed)

    def prune_session(self, session_id: str, keep_hashes: Iterable[str]) -> int:
        """Delete the session's rows for chunks it no longer has, and its failures (call in the
        commit transaction: a digested session has nothing failing)."""
        keep = set(keep_hashes)
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT content_hash, fingerprint, status FROM chunk_results WHERE session_id = ?", (session_id,)
            ).fetchall()
            doomed = [(r[0], r[1]) for r in rows if r[2] == "failed" or r[0] not in keep]
            conn.executemany("DELETE FROM chunk_results WHERE content_hash = ? AND fingerprint = ?", doomed)
        return len(doomed)

    def sessions_with_results(self, session_ids: Iterable[str]) -> set[str]:
        """Those of ``session_ids`` with a chunk result of any status (a notes file's key has them,
        and no digest record)."""
        found: set[str] = set()
        for part, marks in in_batches(sorted(set(session_ids))):
            rows = self.db.query(f"SELECT DISTINCT session_id FROM chunk_results WHERE session_id IN ({marks})", part)
            found.update(r[0] for r in rows)
        return found

    def sessions_with_failures(self) -> set[str]:
        """The keys (sessions, notes files' ``note-…``) with a failed chunk result."""
        return {r[0] for r in self.db.query("SELECT DISTINCT session_id FROM chunk_results WHERE status = 'failed'", ())}

    def reset_failures(self, session_ids: Iterable[str] | None = None) -> int:
        """Forget failed attempts (all, or of ``session_ids``) so the chunks are tried at once. An
        answer that overran the output limit stays known, its wait cleared: its chunk is asked as
        its halves, not whole again (pipelines/extract/map.py); it counts among those reset."""
        cleared = "UPDATE chunk_results SET next_attempt_at = NULL WHERE status = 'failed' AND error_kind = 'truncated-output'"
        forgotten = "DELETE FROM chunk_results WHERE status = 'failed' AND COALESCE(error_kind, '') != 'truncated-output'"
        with self.db.transaction() as conn:
            if session_ids is None:
                return conn.execute(cleared).rowcount + conn.execute(forgotten).rowcount
            keys = [(s,) for s in session_ids]
            return conn.executemany(f"{cleared} AND session_id = ?", keys).rowcount + conn.executemany(
                f"{forgotten} AND session_id = ?", keys
            ).rowcount


def _result(row: Any) -> ChunkResult:
    return ChunkResult(
        session_id=row["session_id"],
        chunk_id=row["chunk_id"],
        content_hash=row["content_hash"],
        fingerprint=row["fingerprint"],
        status=row["status"],
        error_kind=row["error_kind"],
        error=row["error"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        tokens_in=row["tokens_in"],
        tokens_out=row["tokens_out"],
        latency_ms=row["latency_ms"],
        payload=json.loads(row["payload"]) if row["payload"] else None,
        run_id=row["run_id"],
        updated_at=row["updated_at"],
        text_hash=row["text_hash"],
        memory_ids=tuple(json.loads(row["memory_ids"])) if row["memory_ids"] else None,
    )
