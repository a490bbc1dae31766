"""Paid answers the database refused to store, kept from one process to the next.

An extract phase takes the answers the data dir's file holds (``Settings.held_answers_path``,
:class:`store.held_file.HeldAnswersFile`) into its :class:`HeldAnswers` and removes them from the
file, so that no other process on the data dir takes them too; the phase stores each at the next
attempt of its words, as one held in memory. Alone on the data dir it takes them all at its start;
beside other workers (``REM_SHARED_EXTRACT``) only those of the sessions it claims, as it claims
them, so that a session another worker claims finds its answers there. When the phase ends (completed, failed, stopped or cancelled) it
writes what it still holds back to the file, beside what another process wrote there meanwhile, and
holds nothing more: a ``--once`` run's answers, and a daemon's between its cycles, outlive the
process. Only a kill in the middle of a phase loses what that phase held (the model is asked again).

Forgotten or rewritten words do not stay in the file: the answers whose session or turns were
forgotten (a tombstone), whose turns are no longer all in a session the database knows, or whose
session was digested since, are dropped when a phase takes the file and when it writes it back
(under the file's lock, so a ``forget`` committed before the write is seen, and one committed after
it scrubs the file); and every withdrawal of what a forget
or a retraction took out, or a rewrite replaced (``worker.knowledge.withdraw_retracted``: the
forget itself, a cycle's ingest, a backfill, a drain), takes the answers quoting it out of the file
(:func:`drop_withdrawn_from_file`) — a rewritten turn keeps its id, so that takes its old words'
answer out at once, and the digest check when another process held it meanwhile. A line that
cannot be read is logged and dropped: its words are asked again. An answer of a session the
database does not know at all (a backup older than its ingest restored since) waits for its ingest;
one held past ``REM_HELD_ANSWER_MAX_AGE_DAYS`` is dropped whatever its session. Nothing here raises
for the file or the database but :func:`drop_withdrawn_from_file` (its caller reports it): the
phase goes on as if nothing were held.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta

from config import Settings
from pipelines.extract.inflight import HeldAnswers
from store.db import Database
from store.errors import StoreError
from store.held_file import HeldAnswersFile, HeldFileContent, held_answers_file
from store.library_log import get_logger
from store.runstate import RunStateStore
from store.tombstones import MEMORY, SESSION, TombstoneStore

log = get_logger(__name__)


def drop_taken_out(settings: Settings, held: HeldAnswers, db: Database) -> int:
    """Drop the answers ``held`` whose session or turns were forgotten (a tombstone) or retracted
    (a turn missing from a session the database knows) since they were held — by another process
    too (``rem-cycle forget``), which cannot reach this one's memory: forgetting takes the quotes
    out of it too, and a fork of the same words is asked again, as it is when the forgotten
    session's stored answers went with it —, those of a session digested since (by another
    process: a follower, a worker on another host), which no attempt takes again: each chunk of it
    has its answer stored, and the held one's words are among those (stored) or no longer in the
    session (a turn written again with other words keeps its id, so only this drops its old words'
    answer when another process held it while the rewrite's withdrawal ran), and those held longer
    than ``settings.held_answer_max_age_days``. An answer of a session the database does not know
    at all, with no tombstone, stays: a restored backup older than the session's ingest does not
    know it yet, and its next ingest brings it back (a session retracted whole since is not known
    either: the withdrawal of its retraction took its answers out of the file). A few reads of the
    tombstones and digests, and one per session held; none when nothing is (the usual case).
    Returns how many went; raises the database's :class:`StoreError`."""
    aged = held.drop_held_before(datetime.now(UTC) - timedelta(days=settings.held_answer_max_age_days))
    if aged:
        log.info("held answers dropped: no attempt of their words took them within REM_HELD_ANSWER_MAX_AGE_DAYS",
                 answers=aged, days=settings.held_answer_max_age_days)
    sessions = held.sessions()
    if not sessions:
        return aged
    tombstones = TombstoneStore(db)
    dropped = held.drop_quoting(sessions=tombstones.buried(SESSION, sessions), memories=tombstones.buried(MEMORY, held.turns()))
    known = {sid: memories for sid in held.sessions() if (memories := tombstones.session_memories(sid))}
    dropped += held.keep_only_present(known)
    digested = {sid for sid, record in RunStateStore(db).get_digests(held.sessions()).items() if record.state == "digested"}
    dropped += held.drop_quoting(sessions=digested, memories=())
    if dropped:
        log.info("held answers dropped: their session or turns were forgotten or retracted, or their session digested",
                 answers=dropped)
    return aged + dropped


def take_from_file(settings: Settings, held: HeldAnswers, sessions: Collection[str] | None = None) -> int:
    """Move the answers the data dir's file holds into ``held`` and remove them from the file (a
    blocking call: run it in a thread); ``sessions``: only the answers of those sessions — what a
    worker beside others on the data dir claimed, the rest being theirs to claim and store — else
    all of them. Returns how many were taken. No file: nothing to do, one ``stat``."""
    spill = held_answers_file(settings)
    if not spill.exists():
        return 0
    try:
        with spill.locked():
            content = spill.read()
            mine: list[dict[str, object]] = []
            rest: list[dict[str, object]] = []
            for record in content.records:
                sid = record.get("session_id")
                (mine if sessions is None or (isinstance(sid, str) and sid in sessions) else rest).append(record)
            problems = held.keep_records(mine, held_at=content.written_at)
            if mine or content.unreadable:
                spill.replace(rest)
    except OSError as exc:
        log.error("held answers file not taken: the answers not read from it are asked the model again",
                  path=str(spill.path), error=str(exc))
        return 0
    _report_damage(spill, content, problems)
    if taken := len(mine) - len(problems):
        log.info("held answers taken from the file", path=str(spill.path), answers=taken)
    return taken


def write_to_file(settings: Settings, held: HeldAnswers, db: Database) -> None:
    """Write what ``held`` holds to the data dir's file, beside the answers another process wrote
    there since, leaving out those whose session or turns were taken out since, and hold nothing
    more (a blocking call: run it in a thread). The file cannot be written: ``held`` keeps them
    (a daemon's next cycle stores them; a ``--once`` run loses them)."""
    if not len(held):  # a file another process wrote since the take stays as it wrote it
        return
    spill = held_answers_file(settings)
    try:
        with spill.locked():
            content = spill.read()
            problems = held.keep_records(content.records, held_at=content.written_at)
            try:
                drop_taken_out(settings, held, db)
            except StoreError as exc:  # the database is out: a forget cannot commit either, or its own scrub follows
                log.warning("held answers written without checking for forgotten turns: the database refused the read",
                            error=str(exc)[:300])
            spill.replace(held.records())
    except OSError as exc:
        log.error("held answers not written to their file: this process keeps them, and a run that ends now loses them",
                  path=str(spill.path), answers=len(held), error=str(exc))
        return
    _report_damage(spill, content, problems)
    log.info("held answers written for the next run", path=str(spill.path), answers=len(held), bytes=held.size())
    held.clear()


def drop_withdrawn_from_file(spill: HeldAnswersFile, *, sessions: Collection[str], memories: Collection[str]) -> None:
    """Take out of ``spill`` the answers of ``sessions`` or quoting a turn among ``memories``
    (memory ids: what a withdrawal record names, store/withdrawals.py — a turn rewritten with other
    words too, whose old answer no attempt takes again and :func:`drop_taken_out` keeps, its id
    being still there), and any line that cannot be read; a ``.part`` a killed writer left goes too.
    Raises ``OSError``."""
    if not spill.exists():
        return
    with spill.locked():
        content = spill.read()
        kept = HeldAnswers()
        problems = kept.keep_records(content.records, held_at=content.written_at)
        # A ``.part`` under the lock is a killed writer's (it may quote what was taken out): the
        # replace removes it, even when the file itself quotes nothing of it (or is not there).
        if kept.drop_quoting(sessions=sessions, memories=memories) or content.unreadable or problems or spill.part_path.exists():
            spill.replace(kept.records())
    _report_damage(spill, content, problems)


def _report_damage(spill: HeldAnswersFile, content: HeldFileContent, problems: list[str]) -> None:
    """Say in the log what of the file could not be read (and is gone from it)."""
    if content.unreadable or problems:
        log.error("held answers file damaged: the answers it could not read are dropped, and their words are asked "
                  "the model again", path=str(spill.path), unreadable=content.unreadable + len(problems),
                  error=content.problem or problems[0])
