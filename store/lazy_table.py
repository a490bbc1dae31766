"""The lazy-edge queue's database form: the tables ``lazy_edges`` and ``lazy_edges_dead``
(migration 9), for producers that do not share the worker's disk.

One row is one queue line: ``line`` holds exactly the JSON text a line of the JSONL queue holds
(store/lazy_queue.py); what it means is decided in ``pipelines.lazy_edge`` for both forms. Any
process that can reach the database may insert rows (``INSERT INTO lazy_edges(line, enqueued_at)
VALUES (?, ?)``; ``pipelines.enqueue.enqueue_lazy_edges`` validates first).

A drain reads the rows present when it starts (ids up to :meth:`LazyEdgeTable.last_id`), in id
order, and settles each batch (:meth:`LazyEdgeTable.settle`) inside the transaction that writes
the batch's edges: a row is deleted (linked), re-inserted under its own id with ``attempts`` + 1
(failed, retried by the next drain) or moved to ``lazy_edges_dead`` with the reason. A kill at any
point rolls the whole batch back — its edges and its rows' fates together — so nothing is lost and
nothing applied twice. The settle deletes the batch's rows first: rows another drain settled
meanwhile make it raise :class:`RowsTakenError`, and the batch is rolled back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from config.settings import Settings
from store.backend import open_database_at
from store.db import Database, in_batches
from store.dialect import Dialect
from store.errors import DatabaseError, DatabaseUnreadableError
from store.graph import chunked, utc_now
from store.lazy_queue import LazyEdgeQueue, LineFilter, edge_line

# The longest ``line`` the table takes (its CHECK constraint, migration 9): a longer insert fails
# at once, so the producer learns; the JSONL form's limit is the same number of bytes.
MAX_LINE_CHARACTERS = 1024 * 1024

# Queue lines held at once when a large input is queued: what `rem-cycle enqueue` checks and turns
# into lines per step (pipelines/enqueue.py) and :meth:`LazyEdgeTable.append_lines` inserts per
# statement — about 1 MB of lines; and the rows :meth:`LazyEdgeTable.withdraw` reads per page.
APPEND_BATCH_ROWS = 2000
# The tables a drain's batch writes: back-filled nodes (their aliases, and the recall row a session
# node gets), the edges, what their triggers log for the counts, and this queue's own two tables.
DRAIN_TABLES = ("nodes", "node_aliases", "recall_sessions", "edges", "graph_count_changes", "backfill_count_changes", "lazy_edges", "lazy_edges_dead")


_READ_BATCH = "SELECT id, {line} AS line, attempts, enqueued_at FROM lazy_edges WHERE id > ? AND id <= ? ORDER BY id LIMIT ?"


def _read_lines(run: Callable[[str], Sequence[Any]], statement: str) -> Sequence[Any]:
    """The rows ``run`` returns for ``statement``, whose ``{line}`` stands for a queue line: read
    as text, or, when a producer wrote bytes that are not UTF-8 (SQLite keeps what it is given;
    PostgreSQL refuses them), as bytes."""
    try:
        return run(statement.format(line="line"))
    except DatabaseError as exc:
        try:
            return run(statement.format(line="CAST(line AS BLOB)"))
        except DatabaseError:
            raise exc from None


def holding_read(table: str, filters: LineFilter, dialect: Dialect) -> tuple[str, list[str]]:
    """The read of a page of ``table``'s rows (``id``, the line as ``{line}`` stands for it,
    :func:`_read_lines`) that ``filters`` selects, in id order after an id — parameters the id,
    the returned ones, the page's length. First chunk ids alone are sought through the
    first-chunk index (``dialect``'s :meth:`~store.dialect.Dialect.queue_first_chunk`, migration
    27), a range of it per prefix, the id bound kept out of the seek (``+id``: an anchor's rows are
    few, and sorted); any text makes it a read of every row, as ``LIKE``. ``table``: the caller's
    constant, never input."""
    if filters.texts:
        patterns = ["%" + f.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for f in filters.as_texts()]
        holds = " OR ".join("line LIKE ? ESCAPE '\\'" for _ in patterns)
        return f"SELECT id, {{line}} FROM {table} WHERE id > ? AND ({holds}) ORDER BY id LIMIT ?", patterns
    # A prefix's range: every text that begins with it sorts from it up to the prefix with its last
    # character's successor (bytewise on both engines: SQLite's BINARY, PostgreSQL's "C").
    first = dialect.queue_first_chunk()
    bounds = [bound for prefix in filters.first_chunk_prefixes for bound in (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1))]
    seeks = " OR ".join(f"({first} >= ? AND {first} < ?)" for _ in filters.first_chunk_prefixes)
    return f"SELECT id, {{line}} FROM {table} WHERE +id > ? AND ({seeks}) ORDER BY id LIMIT ?", bounds


class RowsTakenError(DatabaseError):
    """Rows a drain was settling were settled by another drain first; its batch was rolled back."""


@dataclass(frozen=True, slots=True)
class QueuedRow:
    """One row of ``lazy_edges``: ``line`` is its UTF-8 text (a queue line without newline)."""

    id: int
    line: bytes
    attempts: int
    enqueued_at: str


@dataclass(frozen=True, slots=True)
class DeadRow:
    """A row that will never link, as ``lazy_edges_dead`` keeps it."""

    row: QueuedRow
    reason: str
    detail: str
    attempts: int
    dead_lettered_at: str


class LazyEdgeTable:
    """The queue table of ``db`` (the graph's own database, so a batch's fate and edges commit
    together). Blocking: call from a worker thread."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # --- producers -----------------------------------------------------------------------
    def append(self, edges: Iterable[Mapping[str, Any]]) -> int:
        """Insert one row per edge (a ``timestamp`` is added when missing) in one transaction;
        returns the number of rows."""
        return self.append_lines(edge_line(edge) for edge in edges)

    def append_lines(self, lines: Iterable[bytes | str]) -> int:
        """Insert ready-made queue lines (trailing newline optional) in one transaction, taking
        ``lines`` :data:`APPEND_BATCH_ROWS` at a time (a large input is never held whole); any
        failure, the iterable's own included, rolls every batch back."""
        now = utc_now()
        batches = chunked(((_text(line), now) for line in lines), APPEND_BATCH_ROWS)
        batch = next(batches, None)
        if batch is None:
            return 0  # no lines, no transaction (a commit with no lazy edges touches nothing)
        count = 0
        with self.db.transaction() as conn:
            for batch in chain([batch], batches):
                conn.executemany("INSERT INTO lazy_edges(line, enqueued_at) VALUES (?, ?)", batch)
                count += len(batch)
        return count

    def supersede(self, edges: Sequence[Mapping[str, Any]], *, filters: LineFilter, picks: Callable[[bytes], bool]) -> int:
        """Insert one row per edge in place of the rows of ``lazy_edges`` ``filters`` selects
        that ``picks`` chooses (:meth:`withdraw`; dead rows stay), in one transaction:
        the caller's (a commit's), so the old rows go only with the new ones. Returns how many
        rows were inserted."""
        with self.db.transaction():
            self._withdraw(filters, picks, tables=("lazy_edges",))
            return self.append(edges)

    # --- the drain's side ----------------------------------------------------------------
    def last_id(self) -> int:
        """The newest row's id (0 when empty): a drain takes rows up to it, not those inserted
        while it runs, so a steady producer cannot keep it going forever."""
        return self.db.query("SELECT COALESCE(MAX(id), 0) FROM lazy_edges")[0][0]

    def pending_bytes(self, *, up_to: int) -> int:
        """Characters of the rows up to id ``up_to`` (for progress reports)."""
        return self.db.query("SELECT COALESCE(SUM(length(line)), 0) FROM lazy_edges WHERE id <= ?", (up_to,))[0][0]

    def read_batch(self, *, after: int, up_to: int, limit: int, max_bytes: int) -> list[QueuedRow]:
        """Rows with ``after < id <= up_to`` in id order: at most ``limit`` of them and, past the
        first, no more than about ``max_bytes`` bytes (a row holds at most
        :data:`MAX_LINE_CHARACTERS`, the table's CHECK), so a batch of long rows stays small."""
        params = (after, up_to, max(1, limit))
        # A row that is not UTF-8 comes as bytes: the drain dead-letters it as it does such a file line.
        found = _read_lines(lambda statement: self.db.query(statement, params), _READ_BATCH)
        rows: list[QueuedRow] = []
        total = 0
        for row_id, text, attempts, enqueued_at in found:
            line = text if isinstance(text, bytes) else text.encode("utf-8")
            total += len(line)
            if rows and total > max_bytes:
                break
            rows.append(QueuedRow(row_id, line, attempts, enqueued_at))
        return rows

    def settle(self, *, taken: Sequence[QueuedRow], requeued: Sequence[tuple[QueuedRow, str]], dead: Sequence[DeadRow]) -> None:
        """Record what a drain made of the rows ``taken``: all leave the queue, ``requeued``
        (row, error) come back with ``attempts`` + 1, ``dead`` go to ``lazy_edges_dead``. Call in
        the transaction that writes their edges; raises :class:`RowsTakenError` (roll back) when
        another drain settled any of them first (linked, dead or put back)."""
        with self.db.transaction() as conn:
            # A row is the drain's to settle only as it read it: one another drain put back (its id
            # kept, one attempt more) was settled by that drain for this pass.
            read = {row.id: row.attempts for row in taken}
            deleted = 0
            for batch, marks in in_batches(read):
                gone = conn.execute(f"DELETE FROM lazy_edges WHERE id IN ({marks}) RETURNING id, attempts", batch).fetchall()
                deleted += sum(read[row_id] == attempts for row_id, attempts in gone)
            if deleted != len(taken):
                raise RowsTakenError(f"{len(taken) - deleted} of {len(taken)} queue rows were settled by another drain")
            if requeued:
                conn.executemany(
                    "INSERT INTO lazy_edges(id, line, attempts, last_error, enqueued_at) VALUES (?, ?, ?, ?, ?)",
                    [(row.id, _text(row.line), row.attempts + 1, error[:300], row.enqueued_at) for row, error in requeued],
                )
            if dead:
                conn.executemany(
                    """INSERT INTO lazy_edges_dead(line, reason, detail, attempts, enqueued_at, dead_lettered_at)
                       VALUES (?, ?, ?, ?, ?, ?)""",
                    [(_text(d.row.line), d.reason, d.detail, d.attempts, d.row.enqueued_at, d.dead_lettered_at) for d in dead],
                )

    def withdraw(self, filters: LineFilter, picks: Callable[[bytes], bool], *, dry_run: bool = False) -> int:
        """Delete, in one transaction, the rows of ``lazy_edges`` and ``lazy_edges_dead`` whose
        ``line`` ``filters`` selects (:func:`holding_read`) and that ``picks`` chooses (given the
        line as UTF-8); returns how many (``dry_run``: only counts them). Each table is read once
        (the filters are a few conditions of one statement:
        ``pipelines.lazy_edge.ExtractionLines.filters``). A drain settling a row deleted here rolls its batch back and reads
        again (:class:`RowsTakenError`), so no other row is lost."""
        return self._withdraw(filters, picks, tables=("lazy_edges", "lazy_edges_dead"), dry_run=dry_run)

    def _withdraw(self, filters: LineFilter, picks: Callable[[bytes], bool], *, tables: Sequence[str], dry_run: bool = False) -> int:
        """:meth:`withdraw` from ``tables``."""
        if not filters:
            return 0
        withdrawn = 0
        with self.db.transaction() as conn:
            for table in tables:
                # A page of lines at a time, in id order: with many anchors the filter is the text
                # every extraction line holds, and the whole table's lines must not be held at once.
                after = 0
                # A row that is not UTF-8 (a producer's, not dead-lettered yet) comes as bytes: failing
                # on it, the withdrawal failed every time, and with it every cycle and drain (each
                # withdraws first), so no drain came to dead-letter it.
                statement, patterns = holding_read(table, filters, self.db.dialect)
                while rows := _read_lines(
                    lambda statement, after=after: conn.execute(statement, (after, *patterns, APPEND_BATCH_ROWS)).fetchall(),
                    statement,
                ):
                    after = rows[-1][0]
                    chosen = [row_id for row_id, line in rows if picks(line if isinstance(line, bytes) else line.encode("utf-8"))]
                    if dry_run:
                        withdrawn += len(chosen)
                        continue
                    for batch, marks in in_batches(chosen):
                        withdrawn += conn.execute(f"DELETE FROM {table} WHERE id IN ({marks})", batch).rowcount
        return withdrawn

    # --- reporting -----------------------------------------------------------------------
    def depth(self) -> int:
        """Rows waiting in the queue table."""
        return self.db.query("SELECT COUNT(*) FROM lazy_edges")[0][0]

    def oldest_enqueued_at(self) -> str | None:
        """When the first row in line was inserted (``None`` when the table is empty); one index
        look-up, not a scan."""
        found = self.db.query("SELECT enqueued_at FROM lazy_edges ORDER BY id LIMIT 1")
        return found[0][0] if found else None

    def dead_letter_count(self) -> int:
        """Rows in ``lazy_edges_dead``."""
        return self.db.query("SELECT COUNT(*) FROM lazy_edges_dead")[0][0]

    def dead_letters(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """The newest dead rows, as the dead-letter file's records (``line``, ``reason``, ``detail``,
        ``attempts``, ``deadLetteredAt``)."""
        rows = self.db.query(
            "SELECT line, reason, detail, attempts, dead_lettered_at FROM lazy_edges_dead ORDER BY id DESC LIMIT ?", (limit,)
        )
        return [
            {"reason": r["reason"], "detail": r["detail"], "attempts": r["attempts"], "deadLetteredAt": r["dead_lettered_at"],
             "line": r["line"]}
            for r in rows
        ]


def _text(line: bytes | str) -> str:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    return text[:-1] if text.endswith("\n") else text



def lazy_edge_sink(settings: Settings, db: Database) -> LazyEdgeQueue | LazyEdgeTable:
    """Where the worker's own lazy edges go (``REM_LAZY_QUEUE``): the JSONL queue, or the queue
    table of ``db`` — its rows then commit with the session that produced them."""
    return LazyEdgeTable(db) if settings.lazy_queue == "database" else LazyEdgeQueue(settings.queue_path)


SQLITE_URL_PREFIX = "sqlite:///"
POSTGRES_URL_PREFIXES = ("postgresql://", "postgres://")


def is_database_url(target: object) -> bool:
    """Whether ``target`` names a database (``sqlite:///…``, ``postgresql://…``) rather than a
    JSONL queue file. Pure."""
    return isinstance(target, str) and target.startswith((SQLITE_URL_PREFIX, *POSTGRES_URL_PREFIXES))


@contextmanager
def open_queue_table(url: str, *, timeout: float = 30.0) -> Iterator[LazyEdgeTable]:
    """The queue table of the database ``url`` names, closed on exit:
    ``sqlite:///relative/graph.sqlite3``, ``sqlite:////absolute/graph.sqlite3`` or
    ``postgresql://user@host/db``. The database must be one rem-cycle made: a producer never
    makes a graph database (its whole schema) of a mistyped path, another database on the server,
    or another program's SQLite file. Raises the :mod:`store.errors` family."""
    if url.startswith(SQLITE_URL_PREFIX):
        path, database_url = Path(url[len(SQLITE_URL_PREFIX):]), None
        if not path.is_file():
            raise DatabaseUnreadableError(f"no graph database at {path}: run rem-cycle once there first, or fix the URL")
    elif url.startswith(POSTGRES_URL_PREFIXES):
        path, database_url = Path(), url  # psycopg loads only here
    else:
        raise ValueError(f"not a database URL (sqlite:///PATH or postgresql://…): {url.split('://', 1)[0]}://…")
    probe = open_database_at(path=path, url=database_url, readonly=True, timeout=timeout)
    try:
        made_by_rem_cycle, location = probe.table_exists("schema_version"), probe.location
    finally:
        probe.close()
    if not made_by_rem_cycle:
        raise DatabaseUnreadableError(f"no graph database at {location}: run rem-cycle once there first, or fix the URL")
    db = open_database_at(path=path, url=database_url, timeout=timeout)
    try:
        yield LazyEdgeTable(db)
    finally:
        db.close()
