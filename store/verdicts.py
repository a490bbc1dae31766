"""``identity_verdicts``: each identity verdict the model gave, by the question it answers.

The extraction's identity auditor (``REM_LLM_JUDGE``) settles ambiguous candidates before a
session's commit (pipelines/resolver.py). Each answer is kept here as it is given, in its own
transaction, keyed by :func:`pipelines.identity.audit_question` — a hash of everything the model was
shown — so that a worker killed before the commit, or any later cycle meeting the same question,
takes the answer instead of paying for it again. A row is one paid model call, read only by key, and
it lives until the session's commit has used it: the commit deletes the verdicts its extraction asked
for (:meth:`VerdictStore.settle`, in the commit's transaction), so the table holds the questions of
sessions still in flight — never the history of every question asked (bench/bench_verdicts_growth.py).
The same question after that commit is not met again: the commit put its answer in the graph (a link
gives the node the name, a new node is a node), so the name then matches without a question.
Forgetting a session deletes the verdicts of an extraction that never committed (store.tombstones),
and any forget those whose answer is a node it removed or re-keyed (:meth:`VerdictStore.withdraw_targets`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from store.db import Database, in_batches
from store.graph import utc_now


class VerdictStore:
    """Typed access to ``identity_verdicts``."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    def given(self, questions: Iterable[str]) -> dict[str, str | None]:
        """The answers given to these questions (``None``: "a new node"), where one was given."""
        found: dict[str, str | None] = {}
        for batch, marks in in_batches(sorted(set(questions))):
            rows = self.db.query(f"SELECT question_hash, target FROM identity_verdicts WHERE question_hash IN ({marks})", batch)
            found.update({r[0]: r[1] for r in rows})
        return found

    def keep(self, question: str, target: str | None, *, session: str) -> None:
        """Keep the answer the model just gave to a question ``session``'s extraction asked, in its
        own transaction (the latest answer wins)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO identity_verdicts(question_hash, target, session_id, asked_at) VALUES (?,?,?,?) "
                "ON CONFLICT(question_hash) DO UPDATE SET target = excluded.target, session_id = excluded.session_id, "
                "asked_at = excluded.asked_at",
                (question, target, session, self.clock()),
            )

    def withdraw_targets(self, node_ids: Iterable[str]) -> int:
        """Delete the verdicts whose answer is a node of ``node_ids`` (removed or re-keyed by a
        forget, in its transaction): the question named the node's id among its options, so it is
        not asked again while no node has that id, and the answer spells the id a forget took out.
        At worst the model is asked again. Reads the table, which holds only the verdicts of
        sessions in flight. Returns rows deleted."""
        deleted = 0
        with self.db.transaction() as conn:
            for batch, marks in in_batches(sorted(set(node_ids))):
                deleted += conn.execute(f"DELETE FROM identity_verdicts WHERE target IN ({marks})", batch).rowcount
        return deleted

    def settle(self, session: str) -> int:
        """Delete the verdicts ``session``'s extraction asked for: call inside its commit's
        transaction (a commit that rolls back keeps them for the next try). Returns rows deleted."""
        with self.db.transaction() as conn:
            return conn.execute("DELETE FROM identity_verdicts WHERE session_id = ?", (session,)).rowcount
