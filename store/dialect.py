"""What the SQL of the stores says differently on SQLite and on PostgreSQL, in one place.

The stores write one statement for both engines wherever the engines share the SQL (``ON CONFLICT``,
``IS DISTINCT FROM``, ``RETURNING``; PostgreSQL gets SQLite's ``json_each`` over an array and
``json_group_array`` as functions of its schema, see :mod:`store.postgres`). The few fragments that
cannot be shared are methods of a :class:`Dialect`; a store reads ``self.db.dialect``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Dialect:
    """The SQL fragments one engine writes its own way."""

    name: str
    # LIKE as SQLite's (case-insensitive for ASCII): PostgreSQL's LIKE is case-sensitive.
    like_nocase: str
    # Full-text rows are written by the store (SQLite's external-content FTS5 tables); PostgreSQL's
    # tsvector columns are generated from the row itself.
    fts_rows_written: bool

    def json_flag(self, document: str, key: str) -> str:
        """A boolean expression, never NULL: the JSON object in the text column ``document`` has
        ``key`` set to ``true`` (or ``1``). ``key`` is a constant of the caller, never user input."""
        if self.name == "postgresql":
            return f"COALESCE(({document})::jsonb -> '{key}' IN ('true'::jsonb, '1'::jsonb), false)"
        return f"COALESCE(json_extract({document}, '$.{key}') = 1, 0)"


SQLITE = Dialect("sqlite", like_nocase="LIKE", fts_rows_written=True)
POSTGRESQL = Dialect("postgresql", like_nocase="ILIKE", fts_rows_written=False)
