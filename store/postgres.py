"""The worker's PostgreSQL database: the same surface as :class:`store.db.Database`, on psycopg 3.

Selected by ``REM_DATABASE_URL=postgresql://…`` (:func:`store.backend.open_database`). The stores'
SQL is shared with SQLite: statements are written with ``?`` (and ``:name``) placeholders and in
the SQL both engines accept (``ON CONFLICT``, ``RETURNING``); this module rewrites the placeholders
to psycopg's (:func:`to_pyformat`), returns rows readable by index and by column name like
``sqlite3.Row`` (:class:`Row`), and turns every psycopg error into the :mod:`store.errors` family
(:func:`store_error`). What the engines do not share lives in two places:
:class:`store.dialect.Dialect` (a few SQL fragments) and :data:`store.postgres_schema.SCHEMA`,
which gives PostgreSQL the handful of SQLite functions the statements use (``json_each`` over an
array, ``json_group_array``, ``json_valid``, ``json_extract``) with SQLite's meaning, and the
``nocase`` collation.

Connections come from one :class:`psycopg_pool.ConnectionPool` per URL and process: a
:class:`PostgresDatabase` holds one connection for its life (the stores' transactions nest on it,
as on the SQLite connection) and gives it back on :meth:`~PostgresDatabase.close`, so the short
reads of ``/healthz``, ``/metrics`` and ``status`` reuse connections instead of opening new ones.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
import psycopg.errors
from psycopg.types.string import StrDumper
from psycopg_pool import ConnectionPool, PoolTimeout

from store.dialect import POSTGRESQL, Dialect
from store.errors import (
    ConnectionsExhaustedError,
    ConstraintError,
    DatabaseBusyError,
    DatabaseDamagedError,
    DatabaseError,
    DatabaseFullError,
    DatabaseUnreadableError,
    QueryInterruptedError,
    SchemaTooNewError,
    unstorable_text,
)
from store.library_log import get_logger
from store.postgres_schema import migrations

log = get_logger(__name__)

# --- placeholders ------------------------------------------------------------------------
# A string literal, a quoted identifier, a comment, a cast (``::``), a ``?``, a ``:name`` or a ``%``.
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|::|\?|(?<![\w:]):([A-Za-z_]\w*)|%")


@functools.lru_cache(maxsize=4096)
def to_pyformat(sql: str) -> str:
    """``sql`` with SQLite's placeholders in psycopg's style: ``?`` → ``%s``, ``:name`` →
    ``%(name)s``, every ``%`` doubled (psycopg formats the whole text, literals included); what is
    inside literals, quoted names and comments is otherwise untouched. A ``?`` tested for NULL
    (``? IS NULL``) is cast to text: PostgreSQL must know each parameter's type, and a NULL test
    holds for any. Pure."""

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "?":
            return "CAST(%s AS text)" if _NULL_TEST.match(sql, match.end()) else "%s"
        if token == "%":
            return "%%"
        if match.group(1):
            return f"%({match.group(1)})s"
        return token.replace("%", "%%")  # inside a literal, a quoted name or a comment

    return _TOKENS.sub(replace, sql)


_NULL_TEST = re.compile(r"\s+IS\s+(?:NOT\s+)?NULL\b", re.IGNORECASE)


# --- rows --------------------------------------------------------------------------------
class Row(Sequence[Any]):
    """A result row readable like ``sqlite3.Row``: by index, by column name, ``keys()``, iteration
    over the values (so ``tuple(row)`` and ``dict(row)`` work)."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: dict[str, int], values: tuple[Any, ...]) -> None:
        self._names = names
        self._values = values

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self._values[self._names[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Row) and self._values == other._values and self._names == other._names

    __hash__ = None  # type: ignore[assignment]

    def keys(self) -> list[str]:
        return list(self._names)

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._names, self._values, strict=True))!r})"


def _row_factory(cursor: psycopg.Cursor[Any]) -> Any:
    names = {column.name: index for index, column in enumerate(cursor.description or ())}
    return lambda values: Row(names, tuple(values))


# --- errors ------------------------------------------------------------------------------
_BUSY_STATES = frozenset({"40001", "40P01", "55P03", "53300"})  # serialization, deadlock, lock, too many connections
_INTERRUPT_STATES = frozenset({"57014"})  # query_canceled (statement_timeout)
_DISK_FULL_STATE = "53100"  # disk_full
# data_corrupted, index_corrupted: the server found a table's or an index's pages damaged. As a
# damaged SQLite file, no wait or retry mends it (store.errors.DatabaseDamagedError).
_DAMAGED_STATES = frozenset({"XX001", "XX002"})
# program_limit_exceeded (an index row, a tsvector, a statement over the server's limits): what was
# asked for is too big, every time it is asked. psycopg calls it an OperationalError, as it does a
# lost connection; it is the caller's own failure, not the database's (store.errors.DATABASE_OUTAGES).
_PROGRAM_LIMIT_CLASS = "54"


def store_error(exc: BaseException) -> DatabaseError:
    """The :mod:`store.errors` class for a psycopg (or pool) error, with its message. Pure."""
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, psycopg.IntegrityError):
        kind: type[DatabaseError] = ConstraintError
    elif state in _BUSY_STATES or isinstance(exc, PoolTimeout) or _TOO_MANY_CONNECTIONS.search(str(exc)):
        kind = DatabaseBusyError
    elif state in _INTERRUPT_STATES:
        kind = QueryInterruptedError
    elif state == _DISK_FULL_STATE:
        kind = DatabaseFullError
    elif state in _DAMAGED_STATES:
        kind = DatabaseDamagedError
    elif state.startswith(_PROGRAM_LIMIT_CLASS):
        kind = DatabaseError
    elif isinstance(exc, psycopg.OperationalError) or state.startswith(("08", "28", "3D")) or state == "42501":
        kind = DatabaseUnreadableError  # cannot connect, authenticate, no such database, no privilege
    else:
        kind = DatabaseError
    message = str(exc).strip() or type(exc).__name__
    if kind is DatabaseUnreadableError and (state == "57P01" or _CONNECTION_LOST.search(message)):
        message = f"the PostgreSQL server closed the connection (a restart, a failover or an administrator): {message}"
    return kind(message)


# libpq's and psycopg's words for a connection the server closed under a client (no SQLSTATE).
_CONNECTION_LOST = re.compile(r"the connection is closed|server closed the connection|connection to server was lost")


@contextmanager
def psycopg_errors() -> Iterator[None]:
    """The adapter's boundary: a psycopg error raised in the block leaves it as its :func:`store_error`."""
    try:
        yield
    except (psycopg.Error, PoolTimeout) as exc:
        raise store_error(exc) from exc
    except UnicodeEncodeError as exc:  # a parameter psycopg cannot send
        raise unstorable_text(exc) from exc


# Why a migration could not create its tables, and what to change (``SHOW search_path`` filled in).
_CANNOT_CREATE = {
    "42501": "the role may not create tables in its schema; run rem-cycle once as the database's owner "
             "(or GRANT CREATE ON SCHEMA to the role), then this role needs only rights on the tables",
    "3F000": "no schema of its search_path ({search_path}) exists with USAGE granted to the role; create "
             "it (CREATE SCHEMA), grant USAGE on it, or fix ?options=-csearch_path in REM_DATABASE_URL",
}


# ``INSERT INTO t(cols) VALUES (?, …) [ON CONFLICT …]``: one row of placeholders.
_SINGLE_ROW_INSERT = re.compile(
    r"^\s*(INSERT\s+INTO\s+\w+\s*\(([^)]*)\)\s*VALUES\s*)\((\s*\?\s*(?:,\s*\?\s*)*)\)(.*)$", re.IGNORECASE | re.DOTALL
)
_CONFLICT_UPDATE = re.compile(r"ON\s+CONFLICT\s*\(([^)]*)\)\s*DO\s+UPDATE", re.IGNORECASE)
_MAX_PARAMETERS = 30_000  # PostgreSQL takes 65,535 per statement


@dataclass(frozen=True, slots=True)
class _MultiRowPlan:
    """How ``executemany`` of a one-row INSERT becomes one statement per chunk of rows: a round trip
    per chunk instead of per row (most of a bulk write's cost on a server database)."""

    head: str
    width: int
    tail: str
    rows_per_statement: int
    key: tuple[int, ...]  # positions of the ON CONFLICT … DO UPDATE key, if any

    def statement(self, rows: int) -> str:
        """The statement for ``rows`` rows, in PostgreSQL's own ``$n`` placeholders."""
        return _multi_row_statement(self, rows)


@functools.lru_cache(maxsize=256)
def _multi_row_plan(sql: str) -> _MultiRowPlan | None:
    match = _SINGLE_ROW_INSERT.match(sql)
    if match is None or "?" in match.group(4) or "RETURNING" in match.group(4).upper():
        return None
    columns = [c.strip() for c in match.group(2).split(",")]
    width = match.group(3).count("?")
    conflict = _CONFLICT_UPDATE.search(match.group(4))
    key = tuple(columns.index(c.strip()) for c in conflict.group(1).split(",")) if conflict else ()
    return _MultiRowPlan(
        head=match.group(1), width=width, tail=" " + match.group(4).strip(),
        rows_per_statement=max(1, min(1_000, _MAX_PARAMETERS // width)), key=key,
    )


@functools.lru_cache(maxsize=64)
def _multi_row_statement(plan: _MultiRowPlan, rows: int) -> str:
    width = plan.width
    values = ", ".join("(" + ", ".join(f"${r * width + c + 1}" for c in range(width)) + ")" for r in range(rows))
    return plan.head + values + plan.tail


class _Cursor:
    """A cursor whose statements take ``?`` placeholders and whose failures are :mod:`store.errors`."""

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor
        self._rowcount: int | None = None  # of a multi-row executemany (several statements)

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        self._rowcount = None
        with psycopg_errors():
            self._cursor.execute(to_pyformat(sql), params)  # always formatted: a literal % was doubled
        return self

    def executemany(self, sql: str, params_seq: Any) -> _Cursor:
        rows = list(params_seq)
        with psycopg_errors():
            if not rows:
                self._cursor = self._cursor.connection.cursor()  # rowcount 0, like sqlite3
                return self
            plan = _multi_row_plan(sql)
            if plan is None:
                self._cursor.executemany(to_pyformat(sql), rows)
                return self
            affected = 0
            raw = psycopg.RawCursor(self._cursor.connection)  # $n placeholders: no client-side parsing
            for start in range(0, len(rows), plan.rows_per_statement):
                chunk = rows[start : start + plan.rows_per_statement]
                if plan.key and len({tuple(r[i] for i in plan.key) for r in chunk}) < len(chunk):
                    # A key twice in one statement is an error for DO UPDATE: row by row, as SQLite does.
                    self._cursor.executemany(to_pyformat(sql), chunk)
                    affected += max(0, self._cursor.rowcount)
                else:
                    raw.execute(plan.statement(len(chunk)), [value for row in chunk for value in row])
                    affected += max(0, raw.rowcount)
            self._rowcount = affected
        return self

    @property
    def rowcount(self) -> int:
        if self._rowcount is not None:
            return self._rowcount
        return max(0, self._cursor.rowcount)

    def fetchone(self) -> Any:
        with psycopg_errors():
            return self._cursor.fetchone() if self._cursor.description else None

    def fetchall(self) -> list[Any]:
        with psycopg_errors():
            return self._cursor.fetchall() if self._cursor.description else []

    def fetchmany(self, size: int = 1) -> list[Any]:
        with psycopg_errors():
            return self._cursor.fetchmany(size) if self._cursor.description else []

    def __iter__(self) -> Iterator[Any]:
        if not self._cursor.description:
            return
        while True:
            with psycopg_errors():
                rows = self._cursor.fetchmany(500)
            if not rows:
                return
            yield from rows


class _Connection:
    """What the stores call ``conn``: ``execute``/``executemany`` returning a :class:`_Cursor`.
    ``before_use`` runs first each time (the database's reconnect, :meth:`PostgresDatabase._revive`)."""

    def __init__(self, raw: psycopg.Connection[Any], *, before_use: Callable[[], None] = lambda: None) -> None:
        self.raw = raw
        self._before_use = before_use

    def cursor(self) -> _Cursor:
        self._before_use()
        with psycopg_errors():  # a connection the server closed refuses even a cursor
            return _Cursor(self.raw.cursor())

    def execute(self, sql: str, params: Any = (), /) -> _Cursor:
        return self.cursor().execute(sql, params)

    def executemany(self, sql: str, params_seq: Any, /) -> _Cursor:
        return self.cursor().executemany(sql, params_seq)


# --- pools -------------------------------------------------------------------------------
_pools: dict[str, ConnectionPool] = {}
_pools_lock = threading.Lock()
POOL_MAX_SIZE = 8
_STREAM_PAGE = 2_000


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.autocommit = True
    # Strings are sent as ``text`` (not psycopg's default "unknown"): a parameter then has a type
    # wherever it appears, and ``json_each(?)`` finds the schema's text function.
    conn.adapters.register_dumper(str, StrDumper)
    conn.row_factory = _row_factory  # type: ignore[assignment]


def _reset(conn: psycopg.Connection[Any]) -> None:
    # A connection comes back as it left: session settings (read-only, timeouts) do not leak to the
    # next borrower.
    conn.execute("RESET ALL")


def pool_for(url: str, *, timeout: float) -> ConnectionPool:
    """The process's pool for ``url`` (created on first use, after one direct connection showed
    the server answers: a pool would retry a refused connection until its timeout)."""
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            with psycopg_errors():
                psycopg.connect(url, connect_timeout=max(1, int(timeout))).close()
            # No ``check``: a connection handed out is checked by :func:`_live_connection`, which
            # sweeps the whole pool at the first dead one (the pool's own check tries them one by
            # one, waiting 1, 2, 4 … s between them).
            pool = ConnectionPool(
                url, min_size=1, max_size=POOL_MAX_SIZE, open=False, configure=_configure, reset=_reset,
                kwargs={"connect_timeout": max(1, int(timeout))}, name="rem-cycle", timeout=timeout,
            )
            pool.open(wait=False)
            _pools[url] = pool
        return pool


def _live_connection(pool: ConnectionPool, *, timeout: float) -> psycopg.Connection[Any]:
    """A connection from ``pool`` that answers. One the server dropped while it idled in the pool (a
    restart, a failover) is discarded; since a restart drops every idle connection at once, the
    first dead one makes the pool test all its idle connections now (``pool.check``), so the next
    is a live or a new one. The pool's own ``check`` would try the dead ones one by one with a
    growing pause (1 + 2 + 4 + … s: 15 s for five idle connections, past the timeout for eight)."""
    deadline = time.monotonic() + timeout
    swept = False
    while True:
        raw = pool.getconn(timeout=max(0.001, deadline - time.monotonic()))
        try:
            ConnectionPool.check_connection(raw)
            return raw
        except psycopg.Error:
            pool.putconn(raw)  # closed now: the pool discards it and opens another in the background
            if swept and time.monotonic() >= deadline:
                raise
            if not swept:
                pool.check()
                swept = True


def _one_line(exc: BaseException) -> str:
    """libpq's words on one line: its ``Connection refused\n\tIs the server running …`` made two
    lines of the one every command prints (``status``, ``restore``, ``backup``…)."""
    return " ".join(str(exc).split())


def _connection_refusal(url: str) -> DatabaseError | None:
    """Why a new connection to ``url`` (outside the pool) cannot be opened now, as its
    :func:`store_error` — the words (server down, ``too many connections``) that a pool's timeout
    hides — or None when it opens. Asked after the opener already waited its timeout, so an
    unanswering host costs at most 2 s more (libpq's shortest connect timeout)."""
    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.Error as exc:
        if _TOO_MANY_CONNECTIONS.search(str(exc)):  # a refused connection carries no SQLSTATE, only text
            return DatabaseBusyError(str(exc).strip())
        return store_error(exc)
    return None


# The server's words for its connection limits (max_connections, a role's or a database's CONNECTION LIMIT).
_TOO_MANY_CONNECTIONS = re.compile(r"too many (?:clients|connections)")


def _discard_pool(url: str) -> None:
    with _pools_lock:
        pool = _pools.pop(url, None)
    if pool is not None:
        pool.close(timeout=1.0)


def close_pools() -> None:
    """Close every pool (their connections and threads); a later open starts a new one."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


atexit.register(close_pools)


def redacted(url: str) -> str:
    """``url`` without its password (for messages and logs): the user part's, and a ``password``
    query parameter's (libpq takes either). Pure."""
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{netloc[-1]}")
    query = [f"{key}=***" if _is_password(key) else f"{key}={value}" if sep else key for key, sep, value in _query_items(parts.query)]
    return urlunsplit(parts._replace(query="&".join(query)))


def without_password(url: str) -> tuple[str, str | None]:
    """``url`` with neither form of password, and the password (percent-decoded), for a tool that
    must take the password from its environment rather than its command line. Pure."""
    parts = urlsplit(url)
    password = unquote(parts.password) if parts.password is not None else None
    if password is not None:
        credentials, host = parts.netloc.rsplit("@", 1)
        parts = parts._replace(netloc=f"{credentials.split(':', 1)[0]}@{host}")
    kept = []
    for key, sep, value in _query_items(parts.query):
        if _is_password(key):
            password = unquote(value)
        else:
            kept.append(f"{key}{sep}{value}")
    return urlunsplit(parts._replace(query="&".join(kept))), password


def _query_items(query: str) -> list[tuple[str, str, str]]:
    return [item.partition("=") for item in query.split("&")] if query else []


def _is_password(key: str) -> bool:
    return unquote(key) == "password"


# The tables where a turn's or session's text can be, which a forget deletes from or rewrites
# (:meth:`PostgresDatabase.erase_deleted`).
TEXT_TABLES = (
    "nodes", "edges", "node_points", "edge_points", "node_claims", "node_aliases", "recall_turns", "recall_sessions",
    "recall_node_docs", "chunk_results", "session_digests", "identity_candidates", "identity_verdicts", "lazy_edges",
    "lazy_edges_dead",
)


# Whether another session of this database (or a prepared transaction, or a replication slot) holds
# a snapshot, or is a transaction, from before the transaction id ``?`` (as text): ``VACUUM`` keeps
# the rows deleted before it that such a snapshot may read. ``backend_xmin`` and ``backend_xid`` are
# shown to every role; ``age`` compares transaction ids across wraparound. A plain ``VACUUM`` running
# elsewhere (autovacuum's: those in ``pg_stat_progress_vacuum``) shows a snapshot too, but the server
# lets no ``VACUUM`` keep rows for it: counted, it held every erase back while it ran (audit20).
_HOLDS_OLDER_SNAPSHOT = """
WITH others AS (
    SELECT backend_xmin, backend_xid FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid NOT IN (SELECT pid FROM pg_stat_progress_vacuum)
)
SELECT EXISTS (
    SELECT 1 FROM (
        SELECT backend_xmin AS x FROM others
        UNION ALL SELECT backend_xid FROM others
        UNION ALL SELECT transaction FROM pg_prepared_xacts WHERE database = current_database()
        UNION ALL SELECT xmin FROM pg_replication_slots WHERE database IS NULL OR database = current_database()
    ) AS holders WHERE x IS NOT NULL AND age(x) > age(CAST(? AS xid))
)
"""


class PostgresDatabase:
    """One pooled PostgreSQL connection shared by the stores, with the interface of
    :class:`store.db.Database`: ``transaction()`` nests (only the outermost block commits),
    ``query()``, ``conn``, ``schema_version``, ``migrate()``, ``close()``.

    Reads outside a transaction run in autocommit mode. ``readonly`` sessions refuse writes
    (``default_transaction_read_only``) and never migrate; ``timeout`` bounds waiting for a
    connection and for a lock. A database whose schema is newer than this code is refused
    (:class:`SchemaTooNewError`) before anything is written; migrations run under an advisory lock,
    so several workers starting at once apply each version once.
    """

    dialect: Dialect = POSTGRESQL

    def __init__(self, url: str, *, timeout: float = 30.0, readonly: bool = False, known_versions: int,
                 sqlite_migrations: Sequence[str] = ()) -> None:
        self.url = url
        self.location = redacted(url)
        self._known = known_versions
        # Written out only when a migration is due (migrate()): the scripts of the folding rule
        # read all of Unicode (store.textfold.postgres_functions, ~0.4 s a process).
        self._sqlite_migrations = tuple(sqlite_migrations)
        self._lock = threading.RLock()
        self._depth = 0
        self._closed = False
        self._timeout = timeout
        # Session settings, given again to a connection that replaces one the server closed.
        self._session = [f"SET lock_timeout = {int(timeout * 1000)}"] + (["SET default_transaction_read_only = on"] if readonly else [])
        raw = self._connect()
        self._raw: psycopg.Connection[Any] | None = raw
        self.conn = _Connection(raw, before_use=self._revive)
        try:
            self._refuse_newer_schema()
            if not readonly:
                self.migrate()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection from the pool, with this database's session settings; the
        :mod:`store.errors` class of why none could be had within the timeout."""
        timeout = self._timeout
        try:
            self._pool = pool_for(self.url, timeout=timeout)  # a new one if a server found down discarded it
            with psycopg_errors():
                raw = _live_connection(self._pool, timeout=timeout)
        except DatabaseBusyError as exc:  # no connection within the timeout: all in use, or none can be made
            refusal = _connection_refusal(self.url)
            if refusal is None:
                # This process's own connections were all in use (a burst of scrapes beside a cycle):
                # the server is fine, and the pool stays for the holders and the others waiting.
                raise ConnectionsExhaustedError(
                    f"all {POOL_MAX_SIZE} connections of this process to {self.location} stayed in use "
                    f"for {timeout:g} s (the server answers): {exc}"
                ) from exc
            if isinstance(refusal, DatabaseBusyError):  # too many connections (the server's or the role's limit)
                raise ConnectionsExhaustedError(
                    f"no connection to {self.location} within {timeout:g} s: the server refuses more: {refusal}"
                ) from exc
            _discard_pool(self.url)  # no pool left retrying in the background for a server that is down
            raise DatabaseUnreadableError(f"cannot connect to the PostgreSQL database {self.location}: {_one_line(refusal)}") from exc
        except DatabaseUnreadableError as exc:
            raise DatabaseUnreadableError(f"cannot connect to the PostgreSQL database {self.location}: {_one_line(exc)}") from exc
        try:
            with psycopg_errors():
                for statement in self._session:
                    raw.execute(statement)  # type: ignore[arg-type]  # fixed text, no parameters
        except BaseException:
            self._pool.putconn(raw)
            raise
        return raw

    def _revive(self) -> None:
        """Replace the connection when the server closed it (a restart, a failover) and no
        transaction is open on it: a holder that outlives the restart (a long drain, ``rem-cycle
        mcp``) goes on with its next transaction instead of failing every one after it. Inside a
        transaction the loss stands (what it wrote is gone: the caller must see the error)."""
        with self._lock:
            if self._closed or self._depth or not self.conn.raw.closed:
                return
            raw, self._raw = self._raw, None
            if raw is not None:  # (None: an earlier attempt found the server still down)
                self._pool.putconn(raw)  # the pool discards a closed connection
            self._raw = self.conn.raw = self._connect()
            log.warning("PostgreSQL connection replaced: the server had closed it", database=self.location)

    @contextmanager
    def transaction(self) -> Iterator[_Connection]:
        """Run the block in one transaction (``BEGIN`` at the outermost level). A nested block is a
        savepoint: when it fails, what it wrote is undone and the transaction stays usable, so a
        caller that handles the error goes on as on SQLite (where a failed statement is undone
        alone); PostgreSQL would otherwise refuse every later statement of the transaction."""
        with self._lock:
            outermost = self._depth == 0
            savepoint = f"rem_{self._depth}"
            if outermost:
                self._begin("BEGIN")
            else:
                self.conn.execute(f"SAVEPOINT {savepoint}")
            self._depth += 1
            try:
                yield self.conn
            except BaseException:
                self._depth -= 1
                if outermost:
                    self._rollback()
                else:
                    self.conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                raise
            self._depth -= 1
            self.conn.execute("COMMIT" if outermost else f"RELEASE SAVEPOINT {savepoint}")

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """Every read in the block sees one state of the database (``REPEATABLE READ``, read only),
        as a reader of several statements (an export) needs when a cycle commits meanwhile. Inside
        a transaction, that transaction is the snapshot."""
        with self._lock:
            if self._depth:
                yield
                return
            self._begin("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                self._rollback()

    def _begin(self, statement: str) -> None:
        """Open the outermost transaction; when the server had closed the connection while it idled
        (found only now, by this statement), open it on a new connection: nothing was lost yet."""
        try:
            self.conn.execute(statement)
        except DatabaseUnreadableError:
            if not self.conn.raw.closed:
                raise
            self._revive()
            self.conn.execute(statement)

    def _rollback(self) -> None:
        if self.conn.raw.closed:
            return  # the server closed the connection, and rolled the transaction back
        try:
            self.conn.execute("ROLLBACK")
        except DatabaseError:
            pass  # the connection broke: the server rolled back; the original error is what matters

    def query(self, sql: str, params: tuple | list | dict = ()) -> list[Any]:
        """Run a read and return all rows."""
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def query_seeking(self, sql: str, params: tuple | list | dict = ()) -> list[Any]:
        """Run a read whose ``ORDER BY … LIMIT`` seeks are each served by an index in that order,
        with sorting off for it (``SET LOCAL enable_sort``, set back before the block's end). Why:
        a seek correlated with another row (a recursive CTE's) is estimated at one row whatever
        the data, so the planner may as well take a smaller index without that order and sort —
        and then reads every row of the key to keep one: a popular edge's every point, per text of
        :meth:`store.provenance.ProvenanceStore.edge_texts` (RELIABILITY.md, day400d)."""
        with self.transaction() as conn:
            conn.execute("SET LOCAL enable_sort = off")
            rows = conn.execute(sql, params).fetchall()
            # A failed read leaves no setting: its savepoint or transaction is rolled back.
            conn.execute("SET LOCAL enable_sort TO DEFAULT")
            return rows

    def stream(self, sql: str, params: tuple | list | dict = ()) -> Iterator[Any]:
        """The rows of a read, fetched in pages from a server-side cursor as they are consumed
        (a client-side cursor would hold every row at once). ``WITH HOLD``: the cursor outlives
        the autocommit statement that opened it; it is closed when the iteration ends."""
        self._revive()
        with self._lock, psycopg_errors():
            cursor = self.conn.raw.cursor(name=f"rem_stream_{uuid.uuid4().hex}", withhold=True)
            cursor.execute(to_pyformat(sql), params)
        try:
            while True:
                with self._lock, psycopg_errors():
                    page = cursor.fetchmany(_STREAM_PAGE)
                if not page:
                    return
                yield from page
        finally:
            with self._lock:
                cursor.close()

    def write_locks_in_time(self, tables: Sequence[str]) -> bool:
        """Whether a writer gets its lock on each of ``tables`` (the one ``INSERT``, ``UPDATE`` and
        ``DELETE`` take) within the statement timeout, now; ``False`` when the lock request is
        stopped at that timeout (a table another session locked, a server too loaded to answer in
        time). A row another session holds does not stop it: that blocks one statement, not every
        writer. ``tables``: fixed names of the schema, never input."""
        try:
            with self.transaction() as conn:
                conn.execute(f"LOCK TABLE {', '.join(tables)} IN ROW EXCLUSIVE MODE")
        except QueryInterruptedError:
            return False
        return True

    def set_deadline(self, seconds: float) -> None:
        """Stop each later statement that runs longer than ``seconds`` (:class:`QueryInterruptedError`;
        PostgreSQL bounds statements one by one, where SQLite's deadline is one moment for all)."""
        statement = f"SET statement_timeout = {max(1, int(seconds * 1000))}"
        with self._lock, psycopg_errors():
            self.conn.raw.execute(statement)  # type: ignore[arg-type]  # fixed text, no parameters
            self._session.append(statement)

    def table_exists(self, name: str) -> bool:
        """``True`` when the schema has a table ``name`` (in the connection's search path)."""
        return bool(self.query("SELECT 1 WHERE to_regclass(?) IS NOT NULL", (name,)))

    @property
    def schema_version(self) -> int:
        if not self.table_exists("schema_version"):
            return 0
        return int(self.query("SELECT COALESCE(MAX(version), 0) FROM schema_version")[0][0])

    def _refuse_newer_schema(self) -> None:
        version = self.schema_version
        if version > self._known:
            raise SchemaTooNewError(
                f"{self.location} has schema version {version}, newer than this rem-cycle knows ({self._known}); "
                "upgrade rem-cycle (or restore a backup made by this version) — the database was not changed"
            )

    def migrate(self) -> None:
        """Apply every migration newer than the database's version, each in its own transaction,
        holding a transaction-scoped advisory lock (concurrent starters wait, then find it done).

        A database already at the newest version is only read: no lock, no ``CREATE`` — so a role
        with rights on the tables alone (no ``CREATE`` on the schema) runs every command once the
        owner has migrated, and an open costs one query instead of a transaction per version."""
        if not self._sqlite_migrations or self.schema_version >= len(self._sqlite_migrations):
            return
        try:
            for version, script in migrations(self._sqlite_migrations):
                with self.transaction() as conn:
                    # A migration is all or nothing: cut short by the operator's statement_timeout
                    # (the role's or the URL's) on a big table, it would fail at every start, for good.
                    conn.execute("SET LOCAL statement_timeout = 0")
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('rem-cycle schema'))")
                    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)")
                    if conn.execute("SELECT 1 FROM schema_version WHERE version >= ?", (version,)).fetchone():
                        continue
                    with psycopg_errors():
                        self.conn.raw.execute(script)  # type: ignore[arg-type]  # several statements, no parameters
                    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (version,))
        except DatabaseError as exc:
            raise self._migration_error(exc) from exc

    def _migration_error(self, exc: DatabaseError) -> DatabaseError:
        """What the operator must change when the tables cannot be created: the role's rights or
        the search path's schema (psycopg's own text quotes the failing statement)."""
        state = getattr(exc.__cause__, "sqlstate", None)
        if state not in _CANNOT_CREATE:
            return exc
        reason = _CANNOT_CREATE[state].format(search_path=self.query("SHOW search_path")[0][0])
        return DatabaseUnreadableError(
            f"cannot create or upgrade rem-cycle's tables in {self.location} (schema version "
            f"{self.schema_version}, this rem-cycle needs {len(self._sqlite_migrations)}): {reason}"
        )

    def erase_deleted(self) -> bool:
        """After a ``forget`` has committed (outside a transaction): ``VACUUM`` the tables where a
        forgotten turn's or session's text can be, so that the dead rows' space is reclaimed now
        — PostgreSQL keeps a deleted row in its page until then — instead of when autovacuum next
        finds enough dead rows there. What it does not reach (index pages, the server's WAL,
        replicas): README, "Forgetting". A role that does not own the tables is skipped by the
        server with a warning.

        ``VACUUM`` keeps, and succeeds all the same, the dead rows that a transaction of this
        database begun before their deletion may still read (an export's ``REPEATABLE READ``
        snapshot), as SQLite keeps its log for such a reader. So it first waits, up to the
        ``timeout`` (the wait SQLite gives that reader before it reports busy), until no
        transaction, prepared transaction or replication slot holds a snapshot from before now
        (:data:`_HOLDS_OLDER_SNAPSHOT`); returns ``False`` when one still does (the ``VACUUM`` runs
        all the same, and reclaims the rest)."""
        deadline = time.monotonic() + self._timeout
        pause = 0.1
        with self._lock:
            # Every deletion committed so far has a transaction id before this one's horizon.
            now = self.conn.execute("SELECT txid_snapshot_xmax(txid_current_snapshot()) % 4294967296").fetchone()[0]
        while True:
            with self._lock:  # not held while it sleeps: the process's other threads share the connection
                held = self.conn.execute(_HOLDS_OLDER_SNAPSHOT, (str(now),)).fetchone()[0]
            if not held or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            pause = min(2 * pause, 2.0)
        with self._lock:
            self.conn.execute(f"VACUUM {', '.join(TEXT_TABLES)}")
        return not held

    def integrity_check(self) -> str:
        """``"ok"`` when the server answers and the schema's tables are readable (PostgreSQL checks
        its pages itself; ``amcheck`` is the tool for a deeper look)."""
        self.query("SELECT COUNT(*) FROM schema_version")
        return "ok"

    @property
    def broken(self) -> bool:
        """Whether the server closed this connection (a restart, a failover): every later statement
        fails, so a holder should close this database and open it again."""
        return self._raw is None or self._raw.closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            raw, self._raw = self._raw, None
            if raw is not None:
                if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    try:
                        raw.rollback()
                    except psycopg.Error:
                        pass
                self._pool.putconn(raw)


def _graph_schema(url: str, env: dict[str, str]) -> str | None:
    """The schema holding rem-cycle's tables at ``url`` (the server resolves the URL's search path,
    whatever its spelling: quoted, mixed-case, several schemas), or None before the first cycle."""
    with psycopg_errors(), psycopg.connect(url, connect_timeout=10, password=env.get("PGPASSWORD")) as conn:
        row = conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass('schema_version')"
        ).fetchone()
    return None if row is None else str(row[0])


def _literal_pattern(name: str) -> str:
    """``name`` as a pg_dump pattern matching that name alone (quoted: case kept, ``*?.`` literal). Pure."""
    return '"' + name.replace('"', '""') + '"'


def backup_postgres(url: str, destination: str | Path) -> dict[str, object]:
    """Dump the database at ``url`` with ``pg_dump`` (custom format: ``pg_restore`` reads it) to
    ``destination``: written beside it and renamed into place only after ``pg_restore --list``
    read it back, so a failed backup never leaves a half-written file under that name. One
    consistent snapshot (pg_dump's own transaction), safe while cycles write. The password goes
    to pg_dump through its environment, never its command line. Returns ``{path, bytes, integrity}``;
    :class:`DatabaseError` when ``pg_dump`` is missing or fails (its message says what to do)."""
    pg_dump, pg_restore = shutil.which("pg_dump"), shutil.which("pg_restore")
    if pg_dump is None or pg_restore is None:
        raise DatabaseError(
            "backup of a PostgreSQL graph needs pg_dump and pg_restore on PATH (Debian/Ubuntu: apt-get install "
            "postgresql-client; use a version at least the server's), or back the database up with your "
            "PostgreSQL's own tools (pg_dump, pg_basebackup, your provider's snapshots)"
        )
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    partial.unlink(missing_ok=True)
    env = {**os.environ}
    url, password = without_password(url)
    if password is not None:
        env["PGPASSWORD"] = password
    schema = _graph_schema(url, env)
    # The graph's own schema alone, ``public`` too: other schemas may hold other deployments or
    # other applications' data, which the role may not even read (pg_dump then failed whole). A
    # backup of ``public`` carries CREATE SCHEMA public, which a database already has: restore it
    # with ``pg_restore --schema=public`` (``restore_postgres`` does).
    only = [f"--schema={_literal_pattern(schema)}"] if schema is not None else []
    # Neither owners nor grants: they name roles of this cluster, which the cluster a backup is
    # restored into may not have (pg_restore then fails on every GRANT); the restoring role owns
    # what it restores, and grants are the operator's to give again there.
    command = [pg_dump, "--format=custom", "--no-owner", "--no-privileges", f"--file={partial}", *only, f"--dbname={url}"]
    try:
        dumped = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600, check=False)
        if dumped.returncode != 0:
            raise DatabaseError(f"pg_dump failed: {dumped.stderr.strip() or dumped.returncode}")
        listed = subprocess.run([pg_restore, "--list", str(partial)], capture_output=True, text=True, timeout=600, check=False)
        if listed.returncode != 0 or "TABLE" not in listed.stdout:
            raise DatabaseUnreadableError(f"backup failed its check (pg_restore --list): {listed.stderr.strip()}")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(destination)
    return {"path": str(destination), "bytes": destination.stat().st_size, "integrity": "ok"}


# ``pg_restore --list`` names the archive's tables as ``<id>; <oid> <oid> TABLE <schema> <name> <owner>``.
_LISTED_SCHEMA = re.compile(r"^\d+; \d+ \d+ SCHEMA - (.+) \S+$", re.MULTILINE)
# A schema's name is printed as it is, spaces included.
_LISTED_VERSION_TABLE = re.compile(r"^\d+; \d+ \d+ TABLE (?!DATA )(.+) schema_version \S+$", re.MULTILINE)


def _archive_schema(pg_restore: str, source: Path) -> str:
    """The schema whose rem-cycle graph the ``pg_dump`` archive ``source`` holds; raises
    :class:`DatabaseUnreadableError` when it is no such archive."""
    listed = subprocess.run([pg_restore, "--list", str(source)], capture_output=True, text=True, timeout=600, check=False)
    if listed.returncode != 0:
        raise DatabaseUnreadableError(
            f"{source} cannot be read as a PostgreSQL backup (pg_restore --list: {listed.stderr.strip() or listed.returncode}): "
            "it is not an archive `rem-cycle backup` wrote, or this pg_restore is older than the pg_dump that wrote it"
        )
    match = _LISTED_VERSION_TABLE.search(listed.stdout)
    if match is None:
        raise DatabaseUnreadableError(f"{source} is a pg_dump archive but no rem-cycle graph (no schema_version table)")
    schema = match.group(1)
    others = set(_LISTED_SCHEMA.findall(listed.stdout)) - {schema}
    if schema != "public" and others:
        raise DatabaseUnreadableError(
            f"{source} holds other schemas besides the graph's ({', '.join(sorted(others))}), which a restore would put "
            "back too: it is not an archive `rem-cycle backup` wrote; restore what you need with pg_restore --schema"
        )
    return schema


def _archive_version(pg_restore: str, source: Path, schema: str) -> int:
    """The newest schema version recorded in the archive's ``schema_version`` rows (its ``COPY`` data)."""
    data = subprocess.run(
        [pg_restore, "--data-only", f"--schema={schema}", "--table=schema_version", "--file=-", str(source)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    rows = data.stdout.split(" FROM stdin;\n", 1)[-1].split("\n\\.", 1)[0] if " FROM stdin;\n" in data.stdout else ""
    versions = [int(line) for line in rows.splitlines() if line.strip().isdigit()]
    if data.returncode != 0 or not versions:
        raise DatabaseUnreadableError(f"{source} holds no schema version (pg_restore: {data.stderr.strip() or 'no rows'})")
    return max(versions)


# Other sessions holding a lock on a table (or index, sequence) of the schema %s.
_LOCK_HOLDERS = (
    "SELECT DISTINCT a.pid, a.application_name, a.state FROM pg_locks l "
    "JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE n.nspname = %s AND l.granted AND l.pid <> pg_backend_pid() ORDER BY a.pid"
)


# How long pg_restore may wait for a lock another session holds on what it replaces: its script
# sets ``lock_timeout = 0`` (overriding PGOPTIONS), so a transaction begun after restore's own
# check of the lock holders made it wait for ever, every reader of the graph queued behind it.
RESTORE_LOCK_WAIT_SECONDS = 30.0
# How often that wait is looked at.
_RESTORE_WATCH_SECONDS = 0.2
# pg_restore's backend (named by its application_name) waiting for a lock longer than %s seconds:
# its pid and the pids of the sessions it waits for.
_RESTORE_WAITING = (
    "SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity WHERE application_name = %s "
    "AND wait_event_type = 'Lock' AND clock_timestamp() - query_start > make_interval(secs => %s)"
)
_SESSIONS = "SELECT pid, application_name, state FROM pg_stat_activity WHERE pid = ANY(%s) ORDER BY pid"


def run_pg_restore(command: list[str], env: dict[str, str], *, url: str, password: str | None, location: str,
                   lock_wait_seconds: float) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (a ``pg_restore --single-transaction`` into ``url``) and watch its backend:
    once a statement of it has waited more than ``lock_wait_seconds`` for a lock, cancel it (its
    one transaction rolls back) and raise :class:`DatabaseBusyError` naming the sessions it waited
    for. Returns the finished process otherwise."""
    name = f"rem-cycle restore {uuid.uuid4().hex[:12]}"
    deadline = time.monotonic() + 3600
    process = subprocess.Popen(command, env={**env, "PGAPPNAME": name}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with psycopg_errors(), psycopg.connect(url, connect_timeout=10, password=password, autocommit=True) as watcher:
            while True:
                try:
                    out, err = process.communicate(timeout=_RESTORE_WATCH_SECONDS)
                    return subprocess.CompletedProcess(command, process.returncode, out, err)
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        raise DatabaseError("pg_restore ran for an hour: stopped (one transaction: the database was not changed)") from None
                waiting = watcher.execute(_RESTORE_WAITING, (name, lock_wait_seconds)).fetchone()
                if waiting is not None:
                    held_by = watcher.execute(_SESSIONS, (list(waiting[1]),)).fetchall()
                    watcher.execute("SELECT pg_cancel_backend(%s)", (waiting[0],))
                    process.communicate(timeout=60)
                    named = ", ".join(f"pid {pid} ({app or 'no application_name'}, {state})" for pid, app, state in held_by)
                    raise DatabaseBusyError(
                        f"pg_restore waited more than {lock_wait_seconds:g} s for locks other sessions took on the graph's "
                        f"tables at {location} after the restore began: {named or 'sessions since gone'}; stop them (or "
                        "pg_terminate_backend(pid)) and restore again — the database was not changed"
                    )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _search_path(setting: str) -> list[str]:
    """The schema names of a ``search_path`` setting (``"$user", "My Schema", x``), unquoted. Pure."""
    return [name.strip().removeprefix('"').removesuffix('"').replace('""', '"') for name in setting.split(",")]


def restore_postgres(url: str, source: str | Path, *, known_versions: int,
                     lock_wait_seconds: float = RESTORE_LOCK_WAIT_SECONDS) -> dict[str, object]:
    """Put the graph of the ``pg_dump`` archive ``source`` (``rem-cycle backup`` on PostgreSQL) in
    place of the graph at ``url``: ``pg_restore --clean --if-exists --single-transaction``, so the
    archive's tables, functions and rows replace the graph's in one transaction, or nothing changes.

    Checked first, with nothing changed when they fail: the file is a rem-cycle graph archive
    (:class:`DatabaseUnreadableError`), of a schema version this rem-cycle knows
    (:class:`SchemaTooNewError`), taken from the schema that ``url`` resolves to (an archive of
    schema ``a`` restores schema ``a``: a different search path would not see it), and the graph
    in place is not newer than the backup (its newer tables would outlive a restore). Neither
    owners nor grants are restored: the connecting role owns what it restores. A session that takes
    a lock on the graph's tables after that check is waited for ``lock_wait_seconds`` at most (see
    :func:`run_pg_restore`). Returns ``{path, bytes, integrity, schema_version}`` (``path``: the URL
    without its password)."""
    pg_restore = shutil.which("pg_restore")
    if pg_restore is None:
        raise DatabaseError("restore of a PostgreSQL graph needs pg_restore on PATH (Debian/Ubuntu: apt-get install "
                            "postgresql-client; use a version at least the server's)")
    source = Path(source)
    env = {**os.environ}
    bare, password = without_password(url)
    if password is not None:
        env["PGPASSWORD"] = password
    schema = _archive_schema(pg_restore, source)
    version = _archive_version(pg_restore, source, schema)
    location = redacted(url)
    if version > known_versions:
        raise SchemaTooNewError(f"{source} has schema version {version}, newer than this rem-cycle knows ({known_versions}); "
                                "upgrade rem-cycle to restore it — the database was not changed")
    with psycopg_errors(), psycopg.connect(bare, connect_timeout=10, password=password) as conn:
        target = _graph_schema(bare, env) or conn.execute("SELECT current_schema()").fetchone()[0]
        if target is None and schema in _search_path(conn.execute("SHOW search_path").fetchone()[0]):
            target = schema  # a new database: the archive creates the schema its search path names
        if target != schema:
            raise DatabaseError(
                f"{source} is a backup of schema {schema!r}, but {location} resolves to "
                f"{repr(target) if target else 'no existing schema'}: restore it with ?options=-csearch_path%3D{schema} "
                "in REM_DATABASE_URL (the database was not changed)"
            )
        in_place = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0] \
            if conn.execute("SELECT to_regclass('schema_version')").fetchone()[0] else 0
        holders = conn.execute(_LOCK_HOLDERS, (schema,)).fetchall()
    if holders:
        # pg_restore's DROPs would wait for them for ever (its script sets lock_timeout = 0), and
        # every reader of those tables (scrapes, MCP, status) would queue behind the DROPs meanwhile.
        named = ", ".join(f"pid {pid} ({name or 'no application_name'}, {state})" for pid, name, state in holders)
        raise DatabaseBusyError(
            f"other sessions hold locks on the graph's tables at {location}: {named}; the restore would wait for "
            "them and block every reader meanwhile: stop them (or pg_terminate_backend(pid)) and restore again — "
            "the database was not changed"
        )
    if in_place > version:
        raise DatabaseError(
            f"the graph at {location} has schema version {in_place}, newer than the backup's ({version}): its newer "
            "tables would outlive the restore; restore into an empty database or schema (DROP SCHEMA … CASCADE and "
            "CREATE SCHEMA first) — the database was not changed"
        )
    # A backup of ``public``: its objects without CREATE SCHEMA public (every database has it), and
    # an older backup held the whole database, whose other schemas must not be put back to the
    # backup's state. (A backup of another schema holds that schema alone, its CREATE SCHEMA
    # included, which ``--schema`` would leave out.)
    only = ["--schema=public"] if schema == "public" else []
    command = [pg_restore, "--clean", "--if-exists", "--single-transaction", "--exit-on-error", "--no-owner",
               "--no-privileges", *only, f"--dbname={bare}", str(source)]
    restored = run_pg_restore(command, env, url=bare, password=password, location=location, lock_wait_seconds=lock_wait_seconds)
    if restored.returncode != 0:
        raise DatabaseError(f"pg_restore failed (one transaction: the database was not changed): "
                            f"{restored.stderr.strip() or restored.returncode}")
    with psycopg_errors(), psycopg.connect(bare, connect_timeout=10, password=password) as conn:
        # Read back through the URL, as the workers will: the graph they find is the backup's.
        found = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    if found != version:
        raise DatabaseUnreadableError(f"after pg_restore, {location} reads schema version {found}, not the backup's {version}")
    return {"path": location, "bytes": source.stat().st_size, "integrity": "ok", "schema_version": version}
