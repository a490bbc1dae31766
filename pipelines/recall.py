"""Recall: what an agent asks the consolidated memory — facts, the turns they came from, sessions.

The pure core over injected stores (:class:`RecallSource`, :class:`VectorSource`). Each signal
ranks turns on its own and is reported on its own:

- ``keyword`` — BM25 over turn text (FTS5); session titles/summaries are matched the same way;
- ``entities`` — nodes whose name, aliases or description match, expanded to the turns their
  provenance points cite, then to the turns of their 1-hop semantic neighbours;
- ``vector`` — the memory collection's nearest turns by its own embedding function (optional);
- ``context`` — the turns next to the keyword hits in their session (an answer is often the reply
  to the turn that names the topic, and shares none of its words);
- ``session`` — BM25 over whole sessions: a session is a document of its turns, so one whose turns
  between them hold most of the query's rare words ranks first even when no single turn holds
  more than one; its matching turns, then their neighbours, are listed session by session;
- ``recency`` — an explicit option: newer first among the candidates the others found.

They are fused by weighted reciprocal rank fusion: ``score(turn) = Σ weight_s / (k + rank_s)``,
plus the scene vote: keyword and the session signal each also rank sessions (by their first turn in
the signal's list), and a turn adds its session's ``Σ weight_s / (k + session rank_s)`` — RRF one
level up, so that the turns of the session both views put first are not scattered among single
hits of other sessions (see :func:`fuse`). Then the passage anchor: among the session signal's best
sessions, the turn that holds the most of the query's rare words, counting at half weight those its
neighbours hold (a passage of three turns, :func:`passage_ranking`), takes the first place: within
the right session RRF orders turns by how each view ranks them one by one, and BM25 over turns
prefers a short turn repeating one word to the answer whose words are spread over it and its
neighbours.
RRF needs no score calibration between BM25, graph walks and cosine distances, which live on
unrelated scales. RRF trusts every signal's top ranks alike on every query; without the session
signal the others were weak on most queries (they find nothing there, yet their first turns still
score high) and pushed keyword's answers down, hence the optional keyword anchor: when BM25 ranks
(the query has words rare enough, see :data:`MATCH_BUDGET`), keyword's first ``keyword_anchor``
turns keep the first places in keyword's order, and fusion decides the places after them. With the
session signal, a second strong view of the same words, plain RRF (anchor 0, the default) is better
(``bench/RESULTS.md``, "Recall"). The result is packed greedily into ``budget_tokens`` with the
project's token estimator; what did not fit is listed in ``omitted``.

Scope is the store's job (:class:`store.recall_index.Scope`): with ``user`` only that user's
sessions are visible; ``as_of`` hides what was not known yet. This module never sees anything else.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any, Protocol

from pipelines.asof import AsOfError, AsOfRefused, bare_year, before_the_epoch
from pipelines.asof import parse_as_of as iso_as_of
from pipelines.chunker import estimate_tokens
from pipelines.vocabulary import PROVENANCE_RELATIONSHIPS
from store.chroma import MAX_USER_ID_CHARS
from store.ids import InvalidIdError, has_forbidden_characters, row_id_given, session_node_id
from store.recall_index import FactRecord, Scope, SessionRecord, TurnRecord, term_match
from store.textfold import fold, spaceless
from store.textfold import words as words_of

MAX_QUERY_CHARS = 4_000
MAX_TERMS = 24
MAX_LIMIT = 100
MAX_BUDGET_TOKENS = 200_000
MAX_USER_CHARS = MAX_USER_ID_CHARS
SIGNALS: tuple[str, ...] = ("keyword", "entities", "vector", "context", "session", "recency")
# Candidates each signal contributes before fusion: deeper than ``limit`` so that a turn ranked
# modestly by two signals can overtake one ranked first by a single signal.
_DEPTH_FACTOR = 5
_MIN_DEPTH = 50
_MATCHED_NODES = 20
_NEIGHBOURS = 20
# A node with more provenance points than this (a chat's speaker is cited by every turn they say)
# is too common to say which turns answer a query, like a stop word: it is neither grounded nor
# walked from. And grounding stops once the kept nodes' points add up to the budget, which bounds
# a query's time (the 27,000 points of Friends' main characters took half a second to read).
COMMON_NODE_POINTS = 500
GROUNDING_BUDGET = 2_000
_EDGES_PER_FACT = 3
_MAX_FACTS = 5
_MAX_SESSIONS = 5
# The keyword hits whose neighbours the context signal ranks, and how far around each it looks.
_CONTEXT_HITS = 50
_CONTEXT_RADIUS = 2
# The session signal: BM25's textbook k1 and b (not tuned), how many sessions it lists, and how many
# best sessions by the score without length normalisation have their lengths read (on the 56
# tuning questions 100 gave the exact ranking for 55; reading every matching session's length
# cost ~10 ms at 100,000 turns).
SESSION_K1 = 1.2
SESSION_B = 0.75
_SESSIONS_RANKED = 5
_SESSIONS_MEASURED = 100
_SESSION_RADIUS = 1
# The signals whose rankings vote for sessions (the scene vote, :func:`scene_votes`): the two BM25
# views of the query's words. Context's sessions are keyword's (its turns are keyword hits'
# neighbours), a second vote for the same evidence; entities' and the vector's sessions, weak
# signals on chat, lowered the tuning data's MRR when they voted (bench/RESULTS.md, fourth round).
SCENE_VOTERS: tuple[str, ...] = ("keyword", "session")
# The passage anchor (:func:`passage_ranking`): a neighbour's words count at half weight, the same
# discount as a 1-hop neighbour's in :func:`entity_ranking`; at full weight the turn between two hits
# came first (tuning data MRR 0.17 instead of 0.28: bench/RESULTS.md, fifth round).
PASSAGE_NEIGHBOUR_FACTOR = 0.5
# A turn that does not fit whole is cut to the room left, if at least this much is left.
_MIN_TRUNCATED_TOKENS = 48

# Words too common to say anything about a turn. BM25's IDF weighs them low anyway, but every one
# of them matches most of the index and costs time. Every word PostgreSQL's 'english' configuration
# leaves out of its index is one (tests/test_searchfold_audit.py), so that no query word is matched
# on SQLite and dropped on PostgreSQL.
STOPWORDS: frozenset[str] = frozenset(
    """a about above after again all am an and any are as at be been before being below between both but by can
    could did do does doing done down during each few for from further had has have having he her here hers him his
    how i if in into is it its itself just me more most my no nor not now of off on once only or other our ours out
    over own same she should so some such than that the their theirs them then there these they this those through
    to too under until up very was we were what when where which while who whom why will with would you your yours
    know tell say said get got against because don herself himself myself ourselves s t themselves yourself
    yourselves""".split()
)
# BM25 scores every turn that contains any query word, so the time of a query grows with how many
# turns its words are in. Words are kept rarest first while the turns they are in add up to at most
# this many; the commoner ones say little about any one turn (BM25 weighs them low) and are left out.
# When even the rarest word is in more turns, the keyword signal lists the newest turns with it.
MATCH_BUDGET = 5_000


class RecallInputError(ValueError):
    """A recall request that cannot be answered as given (the message says why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallWeights:
    """Fusion weights, the RRF constant ``k`` and the keyword anchor (settings ``REM_RECALL_WEIGHT_*``,
    ``REM_RECALL_RRF_K``, ``REM_RECALL_KEYWORD_ANCHOR``)."""

    keyword: float = 1.0
    entities: float = 0.5
    vector: float = 0.5
    context: float = 0.2
    session: float = 1.0
    recency: float = 0.5
    rrf_k: float = 20.0
    keyword_anchor: int = 0
    # The scene vote (``REM_RECALL_SCENE_VOTE``): a multiplier of the votes :data:`SCENE_VOTERS` cast
    # for each turn's session; 0 = turn-level RRF only.
    scene_vote: float = 1.0
    # The passage anchor (``REM_RECALL_PASSAGE_ANCHOR``): the first N turns of :func:`passage_ranking`
    # take the first N places; 0 = off.
    passage_anchor: int = 1

    def of(self, signal: str) -> float:
        return float(getattr(self, signal))


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallRequest:
    """One question. ``as_of`` is ISO 8601 UTC (see :func:`parse_as_of`)."""

    query: str
    user: str | None = None
    session: str | None = None
    as_of: str | None = None
    limit: int = 10
    budget_tokens: int = 2_000
    recency: bool = False


class RecallSource(Protocol):
    """What recall reads (``store.recall_index.RecallIndex``)."""

    def sessions_of_user(self, user: str) -> frozenset[str]: ...
    def term_counts(self, terms: Sequence[str], *, cap: int, scope: Scope = ...) -> dict[str, int]: ...
    def keyword_turns(self, match: str, scope: Scope, *, limit: int, ranked: bool = True) -> list[str]: ...
    def keyword_sessions(self, match: str, scope: Scope, *, limit: int) -> list[str]: ...
    def adjacent_turns(self, memory_ids: Sequence[str], scope: Scope, *, radius: int) -> list[str]: ...
    def term_sessions(self, terms: Sequence[str], scope: Scope) -> dict[str, dict[str, int]]: ...
    def term_turns(self, terms: Sequence[str], scope: Scope, *, sessions: Sequence[str]) -> dict[str, list[tuple[str, str, int | None]]]: ...
    def session_lengths(self, session_ids: Sequence[str]) -> dict[str, int]: ...
    def index_size(self) -> tuple[int, int]: ...
    def matching_nodes(self, match: str, scope: Scope, *, limit: int) -> list[str]: ...
    def point_counts(self, node_ids: Sequence[str], scope: Scope, *, cap: int) -> dict[str, int]: ...
    def grounding_turns(self, node_ids: Sequence[str], scope: Scope) -> dict[str, list[tuple[str, int]]]: ...
    def neighbours(self, node_ids: Sequence[str], scope: Scope, *, exclude_relationships: Any, limit: int) -> list[str]: ...
    def turns(self, memory_ids: Sequence[str], scope: Scope) -> dict[str, TurnRecord]: ...
    def sessions(self, session_ids: Sequence[str], scope: Scope) -> dict[str, SessionRecord]: ...
    def facts(self, node_ids: Sequence[str], scope: Scope, *, exclude_relationships: Any, edges_per_node: int) -> list[FactRecord]: ...


class VectorUnavailableError(RuntimeError):
    """The vector store could not answer (down, or not within its time): recall answers without it."""


def vector_limit(request: RecallRequest) -> int:
    """How many nearest turns :func:`recall` asks the vector store for: deeper than the other
    signals read, as the store knows nothing of scope and recall keeps only what the scope shows."""
    return max(_MIN_DEPTH, request.limit * _DEPTH_FACTOR) * 4


class VectorSource(Protocol):
    """Nearest turns to a text (``memory:<id>`` ids, nearest first), unscoped: recall filters them.
    Raises :class:`VectorUnavailableError` when it cannot answer."""

    def nearest(self, text: str, *, limit: int) -> list[str]: ...


@dataclass(slots=True)
class RecallResult:
    """What recall answers; :meth:`as_dict` is the ``--json`` / MCP shape."""

    facts: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)
    omitted: list[dict[str, Any]] = field(default_factory=list)
    used_tokens: int = 0
    budget_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "facts": self.facts, "turns": self.turns, "sessions": self.sessions, "signals": self.signals,
            "omitted": self.omitted, "used_tokens": self.used_tokens, "budget_tokens": self.budget_tokens,
        }


# --- input ---------------------------------------------------------------------------------
def query_terms(text: str) -> list[str]:
    """The searchable words of ``text`` (:func:`store.textfold.words`, lower-cased, in order, at most
    :data:`MAX_TERMS`); one of each spelling that folds alike (``Café``, ``cafe``: the index
    folds them to one word). Stop words are dropped — a query of nothing else has no words, as
    PostgreSQL's index holds none of them — and single letters unless nothing else is left (a
    single Chinese or Japanese character is a word)."""
    spellings: dict[str, str] = {}  # folded -> the first spelling, lower-cased
    for word in words_of(text):
        key = fold(word)
        if key and len(word) <= 64 and key not in STOPWORDS and key not in spellings:
            spellings[key] = word.lower()
    kept = [w for key, w in spellings.items() if len(key) > 1 or key.isdigit() or spaceless(key)]
    return (kept or list(spellings.values()))[:MAX_TERMS]


def selective_terms(terms: Sequence[str], counts: dict[str, int], budget: int = MATCH_BUDGET) -> tuple[list[str], bool]:
    """The words to match (in query order) and whether BM25 may rank them: the rarest words whose
    turn counts add up to at most ``budget``; when even the rarest is in more, that word alone and
    ``False`` (see :data:`MATCH_BUDGET`)."""
    kept: set[str] = set()
    total = 0
    for term in sorted(terms, key=lambda t: (counts.get(t, 0), t)):
        total += counts.get(term, 0)
        if total > budget:
            break
        kept.add(term)
    if not kept and terms:
        return [min(terms, key=lambda t: (counts.get(t, 0), t))], False
    return [t for t in terms if t in kept], True


def match_expression(terms: Sequence[str]) -> str | None:
    """An FTS5 query matching any of ``terms``, each a quoted string (so ``"``, ``*``, ``NEAR``,
    ``-`` or ``AND`` in a query are words, never syntax) in each of its spellings
    (:func:`store.recall_index.term_match`); ``None`` without terms."""
    return " OR ".join(term_match(t) for t in terms) or None


def parse_as_of(value: str | None) -> str | None:
    """``value`` as the graph's time format (ISO 8601 UTC with milliseconds, ``Z``): the one reading of
    ``as_of`` for every command (``recall``, ``show``, ``search``, ``export``) and MCP tool. An ISO 8601
    date or time is read first, by the ISO rule
    (:func:`pipelines.asof.parse_as_of`: ``20261101`` and ``2026-W44`` are dates, each the end of
    that day); also epoch seconds or milliseconds and the common written forms ("1 March 2026",
    "2026/03/01 10:00"), a date alone the end of that day. A time without zone is UTC. A written
    form that names no whole date ("Nov 2026", "10:00") or a zone by a name not understood
    ("PST") is refused: the parser took the missing day from today's date, and read the zone as UTC.
    So is a year alone (``2026``: :func:`pipelines.asof.bare_year`), which is no epoch time.
    ``UTC+2`` is +02:00 (:func:`_people_zone`); what could name another moment is refused: a day
    and month that do not tell themselves apart (``4/12/2026``), a year not written in full, a
    weekday the date is not, digits that also write a date (:func:`_digits_as_dates`), and a moment
    before 1970 (:func:`pipelines.asof.before_the_epoch`: ``-1``, a negative epoch)."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 100:
        raise RecallInputError(f"as_of {value[:40]!r} is not a date")
    if (year := bare_year(text)) is not None:
        raise RecallInputError(f"as_of {year}")
    try:
        return iso_as_of(text)
    except AsOfRefused as exc:
        raise RecallInputError(f"as_of {text[:40]!r}: {exc.detail}") from None
    except AsOfError:
        pass  # not ISO 8601 (or out of range: said below, in recall's words)
    date_only = False
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        if dates := _digits_as_dates(text):
            unit = "milliseconds" if abs(float(text)) >= 1e11 else "seconds"
            raise RecallInputError(f"as_of {text!r} reads as epoch {unit} and as {' or '.join(dates)}: write the "
                                   "moment in ISO 8601 (2026-12-04T10:00Z)")
        number = float(text)
        seconds = number / 1000 if abs(number) >= 1e11 else number
        try:
            moment = datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise RecallInputError(_out_of_range(text)) from exc
    else:
        moment, date_only = _written_date(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if date_only:  # its last millisecond (adding a day overflowed on 9999-12-31)
        moment = moment.replace(hour=23, minute=59, second=59, microsecond=999_000)
    try:
        moment = moment.astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise RecallInputError(_out_of_range(text)) from exc
    if (early := before_the_epoch(moment)) is not None:  # -1 was epoch second -1: an empty answer, no word
        raise RecallInputError(f"as_of {text[:40]!r}: {early}")
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _out_of_range(text: str) -> str:
    """The refusal of an ``as_of`` whose moment no date can hold, saying which dates can: a time
    that looks valid as typed (``9999-12-31T23:59:59-05:00``) leaves them only after its offset."""
    return f"as_of {text[:40]!r} is out of range: a moment must fall within the years 1-9999 in UTC"


# dateutil fills what a text leaves out from a default (today's date, by default): parsed with
# each of these, a text that names its year, month and day gives the same date twice, and one
# that names an hour the same hour ("12am" and "0000" name midnight without a colon). The days are
# more than a week apart: a weekday without a day ("Monday Aug 2026") moves each to the next such
# day, which was the same date from the 1st and the 2nd (the 3rd).
_WRITTEN_DEFAULTS = (datetime(2000, 1, 1), datetime(2001, 2, 16, 1))


# The dates written in digits alone that an epoch number can also be: day and month first
# (04122026, both orders), or a basic date-time without its T (2026120410, 202612041000, 20261204100000).
_DIGIT_LAYOUTS = {8: ("%d%m%Y", "%m%d%Y"), 10: ("%Y%m%d%H",), 12: ("%Y%m%d%H%M",), 14: ("%Y%m%d%H%M%S",)}


def _digits_as_dates(digits: str) -> list[str]:
    """The times of 1970-2099 that ``digits`` also writes (:data:`_DIGIT_LAYOUTS`), ISO 8601. As an
    epoch ``04122026`` was 1970-02-17 and ``202612041000`` (milliseconds) 1976-06-03; the 10-digit
    epochs that are such a date are after 2030, the 12- and 14-digit ones before 2002 or after 2600."""
    found = []
    for layout in _DIGIT_LAYOUTS.get(len(digits), ()):
        try:
            moment = datetime.strptime(digits, layout)  # its fields are of any width: the length is fixed above
        except ValueError:
            continue
        if 1970 <= moment.year <= 2099:
            found.append(moment.isoformat() if "%H" in layout else moment.date().isoformat())
    return found


# A zone name with an offset after it (UTC+2, GMT-05:00, CEST+2, Z+02:00). dateutil reads it the
# POSIX way, the sign turned (UTC+2 two hours behind UTC); people mean UTC+2 = +02:00, as the
# Windows zone list, JavaScript's "GMT+0200" and "Paris is UTC+1" write it. So UTC/GMT with an
# offset is read as that offset; any other name with one is refused (CEST+2 says two offsets).
_NAMED_OFFSET = re.compile(r"(?<![A-Za-z])(?P<name>[A-Za-z]+)\s*(?P<sign>[+-])\s*(?P<hours>\d{1,2})(?::?(?P<minutes>\d{2}))?(?!\d)")
# An offset dateutil reads as the zone: a sign after white space, a time (10:00) or am/pm. With two
# it kept the last one (10:00 +02:00 +03:00 was 07:00Z).
_OFFSET = re.compile(r"(?:(?<=\s)|(?<=\d:\d\d)|(?<=[AaPp][Mm]))[+-]\d")
# Three numbers naming a date (4/12/2026, 04.12.2026, 12-04-2026, 2026/12/04, 04 12 2026), apart by
# anything but a letter or a colon, mixed or doubled as dateutil reads them (4/12-2026, 4 / 12 / 2026,
# 4, 12, 2026, 4;12;2026): only a word or a time stands between a date's numbers.
_DATE_SEPARATOR = r"[^\w:]+|_"
_NUMERIC_DATE = re.compile(rf"(?<![\d.:,])(?P<a>\d{{1,4}})(?:{_DATE_SEPARATOR})(?P<b>\d{{1,2}})(?:{_DATE_SEPARATOR})(?P<c>\d{{1,4}})(?![\d:])")


def _people_zone(text: str) -> str:
    """``text`` with a ``UTC``/``GMT`` offset written as the offset alone (``UTC+2`` → ``+02:00``,
    what people mean by it); :class:`RecallInputError` for another zone name with an offset, an
    offset of 24 hours or more, or two offsets (see :data:`_NAMED_OFFSET`, :data:`_OFFSET`)."""
    from dateutil import parser as date_parser

    info = date_parser.parserinfo()

    def offset(match: re.Match[str]) -> str:
        name = match["name"]
        if any(found is not None for found in (info.month(name), info.weekday(name), info.ampm(name))) or info.jump(name):
            return match[0]  # Dec-04-2026, 10 PM -05:00: a word of the date, then a number or an offset
        if name not in ("UTC", "GMT"):
            raise RecallInputError(f"as_of {text[:40]!r} puts an offset after the zone name {name!r}, which is read "
                                   "two ways: write the offset alone (+02:00) or after UTC (UTC+2 = +02:00)")
        hours, minutes = int(match["hours"]), int(match["minutes"] or 0)
        if hours > 23 or minutes > 59:
            raise RecallInputError(f"as_of {text[:40]!r} names no offset of a zone (at most UTC+23:59)")
        return f" {match['sign']}{hours:02d}:{minutes:02d}"

    rewritten = _NAMED_OFFSET.sub(offset, text)
    if len(_OFFSET.findall(rewritten)) > 1:
        raise RecallInputError(f"as_of {text[:40]!r} names two offsets: give one (2026-03-01T10:00+02:00)")
    return rewritten


def _day_and_month_told(text: str) -> bool:
    """:class:`RecallInputError` when ``text`` writes a date in three numbers that do not tell the
    day from the month: ``4/12/2026`` is the 4th of December in most of the world and the 12th of
    April in the US (dateutil read the latter). ``13/4/2026``, ``4/13/2026``, ``4/4/2026`` and a
    year first (``2026/12/04``, year, month, day) are told; a year of two digits is refused once
    read (:func:`_written_date`). Returns whether ``text`` writes such a date year first."""
    year_first = False
    for match in _NUMERIC_DATE.finditer(text):
        first, middle, last = match["a"], int(match["b"]), match["c"]
        if len(first) == 4:
            year_first = True
            if middle > 12:
                raise RecallInputError(f"as_of {text[:40]!r}: a date that starts with its year goes on with its month "
                                       f"(there is no month {middle}): write it as 2026-12-04")
        elif len(last) == 4 and int(first) <= 12 and middle <= 12 and int(first) != middle:
            raise RecallInputError(f"as_of {text[:40]!r} does not tell the day from the month ({first} or {middle}): "
                                   f"write it as {last}-{middle:02d}-{int(first):02d} or {last}-{int(first):02d}-{middle:02d} (ISO 8601)")
    return year_first


def _written_zone(name: str | None, offset: int | None) -> tzinfo | None:
    """The zone of a written date, the same on every machine: an offset (``+02:00``; ``UTC``,
    ``GMT`` and ``Z`` are offset 0), none (UTC, said by the caller), else refused. Left to itself
    dateutil read a name of the machine's own zone (``CEST`` on a Paris laptop, ``EDT`` in New
    York) as that zone's offset on the date, not the one the name says, and refused it elsewhere."""
    from dateutil import parser as date_parser

    if offset is not None:
        return UTC if offset == 0 else timezone(timedelta(seconds=offset))
    if name is not None:
        raise date_parser.UnknownTimezoneWarning(name)
    return None


def _written_date(text: str) -> tuple[datetime, bool]:
    """``text``, a date written as people write them ("1 March 2026", "2026/03/01 10:00"), read by
    dateutil, and whether it names no time of day; :class:`RecallInputError` unless it names a
    whole date, and any zone it names is an offset, ``Z``, ``UTC`` or ``GMT`` (:func:`_written_zone`)."""
    from dateutil import parser as date_parser

    year_first = _day_and_month_told(text)
    zoned = _people_zone(text)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", date_parser.UnknownTimezoneWarning)
            first, second = (date_parser.parse(zoned, default=default, tzinfos=_written_zone) for default in _WRITTEN_DEFAULTS)
            day_first = date_parser.parse(zoned, default=_WRITTEN_DEFAULTS[0], dayfirst=True, tzinfos=_written_zone)
    except date_parser.UnknownTimezoneWarning as exc:
        raise RecallInputError(f"as_of {text[:40]!r} names a time zone not understood: give an offset "
                               "(2026-03-01T10:00-08:00) or Z") from exc
    except (ValueError, OverflowError) as exc:
        raise RecallInputError(f"as_of {text[:40]!r} is not a date (try 2026-03-01 or 2026-03-01T10:00Z)") from exc
    if first.date() != second.date():
        raise RecallInputError(f"as_of {text[:40]!r} names no whole date (a year, a month and a day): "
                               "try 2026-03-01 or 2026-03-01T10:00Z")
    if not re.search(rf"(?<!\d){first.year}(?!\d)", text):
        # dateutil takes a year of one or two digits as the one nearest today: 26/12/04 was
        # 2004-12-26 (2026/12/04 written short?), Dec 4 04 2004, 1/2/3 2003-01-02.
        raise RecallInputError(f"as_of {text[:40]!r} does not write its year in full (read as {first.year}): "
                               "write the date as 2026-12-04")
    if not year_first and day_first.date() != first.date():
        # dateutil guesses month first wherever nothing tells them apart, also where words it skips
        # stand between the numbers (4th 12 2026, 4 of 12 2026): asked to guess day first, it reads another date.
        raise RecallInputError(f"as_of {text[:40]!r} does not tell the day from the month: write it as "
                               f"{day_first.date().isoformat()} or {first.date().isoformat()} (ISO 8601)")
    info = date_parser.parserinfo()
    # A day of the week that is not the date's (Mon Dec 4 2026, a Friday) says one of them is wrong.
    for word in re.findall(r"[A-Za-z]+", text):
        if (named := info.weekday(word)) is not None and named != first.weekday():
            raise RecallInputError(f"as_of {text[:40]!r}: {first.date().isoformat()} is a {first:%A}, not a "
                                   f"{info.WEEKDAYS[named][1]}")
    return first, first.hour != second.hour


def validate(request: RecallRequest) -> list[str]:
    """Check ``request``; returns its query terms. Raises :class:`RecallInputError` with the reason."""
    if not isinstance(request.query, str) or not request.query.strip():
        raise RecallInputError("query is empty")
    if len(request.query) > MAX_QUERY_CHARS:
        raise RecallInputError(f"query is {len(request.query)} characters; at most {MAX_QUERY_CHARS}")
    check_count("limit", request.limit, MAX_LIMIT)
    check_count("budget_tokens", request.budget_tokens, MAX_BUDGET_TOKENS)
    if request.user is not None:
        check_user(request.user)
    if request.session is not None:
        session_anchor(request.session)
    return query_terms(request.query)


def check_count(name: str, value: object, most: int) -> None:
    """Raise :class:`RecallInputError` unless ``value`` (the argument ``name``) is a whole number
    1..``most``: a limit or a token budget of every reader (:func:`validate`, :func:`pack_entity`,
    :func:`pack_nodes`). A bool is an int to Python: ``True`` was a limit of 1; ``"500"`` failed
    as a ``TypeError``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise RecallInputError(f"{name} must be a whole number 1..{most}, not {value!r}")


def check_user(user: str) -> None:
    """Raise :class:`RecallInputError` unless ``user`` can be a user id (1-200 characters, not all
    white space, no control character or lone surrogate)."""
    if not user.strip() or len(user) > MAX_USER_CHARS:
        raise RecallInputError(f"user must be 1..{MAX_USER_CHARS} characters")
    if has_forbidden_characters(user):
        raise RecallInputError(f"invalid user {user[:80]!r}: control characters and lone surrogates are not allowed")


def session_anchor(session: str) -> str:
    """``session:<id>`` of a session given by its id or its node id (``session:``/``SESSION:``, any
    case, as ids are accepted everywhere). Raises :class:`RecallInputError` for an invalid id."""
    try:
        return session_node_id(row_id_given(session, "session"))
    except InvalidIdError as exc:
        raise RecallInputError(str(exc)) from exc


def resolve_scope(source: RecallSource, request: RecallRequest) -> Scope:
    """The sessions ``request`` may see (``None`` = all) and its ``as_of``."""
    sessions: frozenset[str] | None = None
    if request.user is not None:
        sessions = source.sessions_of_user(request.user)
    if request.session is not None:
        wanted = session_anchor(request.session)
        # A session the graph does not hold (a mistyped id) is no visible one: the answer is empty
        # either way, and ``signals.scope.sessions_visible`` said 1.
        held = sessions if sessions is not None else frozenset(source.sessions([wanted], Scope()))
        sessions = frozenset({wanted}) & held
    return Scope(sessions=sessions, as_of=request.as_of)


# --- ranking -------------------------------------------------------------------------------
def scene_votes(rankings: dict[str, Sequence[str]], weights: RecallWeights, scene_of: dict[str, str]) -> dict[str, float]:
    """Session → its vote: each of :data:`SCENE_VOTERS` ranks sessions by where their first turn
    comes in its ranking, and adds ``scene_vote × weight / (k + that session rank)`` — reciprocal
    rank fusion one level up, with the turn level's weights and ``k``."""
    votes: dict[str, float] = {}
    if weights.scene_vote <= 0:
        return votes
    for signal in SCENE_VOTERS:
        weight = weights.of(signal) * weights.scene_vote
        if signal not in rankings or weight <= 0:
            continue
        scenes = dict.fromkeys(scene_of[m] for m in rankings[signal] if m in scene_of)
        for rank, scene in enumerate(scenes, start=1):
            votes[scene] = votes.get(scene, 0.0) + weight / (weights.rrf_k + rank)
    return votes


def fuse(rankings: dict[str, Sequence[str]], weights: RecallWeights, *, anchor: Sequence[str] = (),
         scene_of: dict[str, str] | None = None) -> list[tuple[str, float, list[str]]]:
    """Weighted reciprocal rank fusion of ``rankings`` (signal → ids best first): ``[(id, score,
    signals that found it)]``, best first; ties by first appearance. With ``scene_of`` (id → its
    session), each id also gets its session's :func:`scene_votes`: a turn of the session that keyword
    and the session signal both rank first outranks one of a session only one of them lists, so
    the answer's session, once found, keeps its turns together near the top. The ids in ``anchor``
    (those of them that a ranking holds) come first, in their order, whatever their score."""
    scores: dict[str, float] = {}
    found_by: dict[str, list[str]] = {}
    for signal, ranked in rankings.items():
        weight = weights.of(signal)
        for rank, item in enumerate(dict.fromkeys(ranked), start=1):
            scores[item] = scores.get(item, 0.0) + weight / (weights.rrf_k + rank)
            found_by.setdefault(item, []).append(signal)
    if scene_of is not None:
        votes = scene_votes(rankings, weights, scene_of)
        for item in scores:
            scores[item] += votes.get(scene_of.get(item, ""), 0.0)
    order = {item: i for i, item in enumerate(found_by)}
    first = {item: i for i, item in enumerate(dict.fromkeys(a for a in anchor if a in scores))}
    return sorted(
        ((i, scores[i], found_by[i]) for i in scores),
        key=lambda x: (first.get(x[0], len(first)), -x[1], order[x[0]]),
    )


def specific_nodes(nodes: Sequence[str], points: dict[str, int], *, budget: int = GROUNDING_BUDGET) -> tuple[list[str], list[str]]:
    """``(kept, common)``: ``nodes`` in order, without those cited by more than
    :data:`COMMON_NODE_POINTS` points, while the kept ones' points add up to at most ``budget``;
    ``common`` are the ones left out as too common."""
    kept: list[str] = []
    common: list[str] = []
    for node in nodes:
        count = points.get(node, 0)
        if count > COMMON_NODE_POINTS:
            common.append(node)
        elif count <= budget:
            kept.append(node)
            budget -= count
    return kept, common


def entity_ranking(matched: Sequence[str], neighbours: Sequence[str], grounding: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Turns ranked by the nodes they ground: each matched node adds ``1 / (its match rank + 1)``, a
    neighbour half of what the node it neighbours would; so the turns of the best-matching node
    come first, and among them those that also ground other entities of the query. Ties by first
    appearance."""
    scores: dict[str, float] = {}
    ranked = [*((n, 1.0, r) for r, n in enumerate(matched)), *((n, 0.5, len(matched) + r) for r, n in enumerate(neighbours))]
    for node_id, factor, rank in ranked:
        for memory_id, _ in grounding.get(node_id, []):
            scores[memory_id] = scores.get(memory_id, 0.0) + factor / (rank + 1)
    order = {m: i for i, m in enumerate(scores)}
    return sorted(scores, key=lambda m: (-scores[m], order[m]))


def bm25_idf(documents: int, containing: int) -> float:
    """BM25's inverse document frequency of a word ``containing`` of ``documents`` hold (never negative)."""
    return math.log((documents - containing + 0.5) / (containing + 0.5) + 1)


@dataclass(slots=True)
class SessionMatches:
    """The query words seen session by session (:func:`session_matches`)."""

    frequencies: dict[str, dict[str, int]]  # session → word → how many of its turns hold the word
    idf: dict[str, float]  # word → BM25 idf over sessions


def session_matches(per_word: dict[str, dict[str, int]], *, sessions_total: int) -> SessionMatches:
    """Turn ``per_word`` (word → ``{session: turns holding it}``) around, with each word's idf over
    ``sessions_total`` sessions."""
    frequencies: dict[str, dict[str, int]] = {}
    idf: dict[str, float] = {}
    for word, sessions in per_word.items():
        idf[word] = bm25_idf(max(sessions_total, len(sessions)), len(sessions))
        for session_id, n in sessions.items():
            frequencies.setdefault(session_id, {})[word] = n
    return SessionMatches(frequencies, idf)


def session_scores(matches: SessionMatches, sessions: Sequence[str], *, lengths: dict[str, int] | None = None, average_length: float = 1.0) -> dict[str, float]:
    """BM25 of each of ``sessions`` as one document: a word's frequency is how many of the session's
    turns hold it, the session's length its number of turns (``lengths``; ``None``: no length
    normalisation, every session of the average length), k1 and b the textbook 1.2 and 0.75."""
    scores: dict[str, float] = {}
    for session_id in sessions:
        norm = 1.0
        if lengths is not None:
            norm = 1 - SESSION_B + SESSION_B * lengths.get(session_id, average_length) / average_length
        scores[session_id] = sum(matches.idf[w] * f * (SESSION_K1 + 1) / (f + SESSION_K1 * norm)
                                 for w, f in matches.frequencies[session_id].items())
    return scores


def turn_words(rows: dict[str, list[tuple[str, str, int | None]]], counts: dict[str, int], *, turns_total: int) -> dict[str, dict[str, float]]:
    """Each turn of ``rows`` (word → ``[(memory_id, session_id, turn_index)]``) → the query words it
    holds, each with its BM25 idf over turns (from ``counts``)."""
    held: dict[str, dict[str, float]] = {}
    for word, hits in rows.items():
        word_idf = bm25_idf(max(turns_total, counts.get(word, len(hits))), counts.get(word, len(hits)))
        for memory_id, _, _ in hits:
            held.setdefault(memory_id, {})[word] = word_idf
    return held


def informative_first(rows: dict[str, list[tuple[str, str, int | None]]], held: dict[str, dict[str, float]]) -> dict[str, list[str]]:
    """Each session's turns holding a query word (``rows``: word → ``[(memory_id, session_id,
    turn_index)]``), ordered by the summed idf of the words each holds (``held``, from
    :func:`turn_words`), then by their place in the session."""
    weight = {memory_id: sum(words.values()) for memory_id, words in held.items()}
    place = {memory_id: (session_id, turn_index if turn_index is not None else 0)
             for hits in rows.values() for memory_id, session_id, turn_index in hits}
    turns: dict[str, list[str]] = {}
    for memory_id in sorted(weight, key=lambda m: (-weight[m], place[m][1], m)):
        turns.setdefault(place[memory_id][0], []).append(memory_id)
    return turns


@dataclass(slots=True)
class SessionRanking:
    """The session signal's answer (:func:`session_ranking`)."""

    turns: list[str]  # its ranking: session by session, turns holding query words, then their neighbours
    sessions: list[str]  # its best sessions, best first
    words: dict[str, dict[str, float]]  # each of those turns holding query words → {word: idf over turns}


def passage_ranking(words: dict[str, dict[str, float]], records: dict[str, TurnRecord], sessions: Sequence[str], *,
                    radius: int = _SESSION_RADIUS) -> list[str]:
    """The turns of ``records`` in ``sessions`` ranked as passages: a turn scores the idf of each query
    word in it (``words``: turn → ``{word: idf}``) or, at :data:`PASSAGE_NEIGHBOUR_FACTOR`, in a turn
    within ``radius`` of it (a word counts once, at its best). Best first; ties by the session's
    place in ``sessions``, then the turn's. An answer is often the turn with the question's rarest
    words and the reply or question next to it holding the others."""
    session_rank = {session_id: i for i, session_id in enumerate(sessions)}
    at = {(r.session_id, r.turn_index): m for m, r in records.items() if r.session_id in session_rank and r.turn_index is not None}
    best: dict[str, dict[str, float]] = {}
    for memory_id, held in words.items():
        record = records.get(memory_id)
        if record is None or record.turn_index is None or record.session_id not in session_rank:
            continue
        for offset in range(-radius, radius + 1):
            near = at.get((record.session_id, record.turn_index + offset))
            if near is None:
                continue
            factor = 1.0 if offset == 0 else PASSAGE_NEIGHBOUR_FACTOR
            scores = best.setdefault(near, {})
            for word, word_idf in held.items():
                scores[word] = max(scores.get(word, 0.0), factor * word_idf)
    total = {m: sum(scores.values()) for m, scores in best.items()}
    return sorted(total, key=lambda m: (-total[m], session_rank[records[m].session_id], records[m].turn_index, m))


def session_ranking(source: RecallSource, words: Sequence[str], counts: dict[str, int], scope: Scope) -> SessionRanking:
    """The session signal: the :data:`_SESSIONS_RANKED` best sessions by BM25 over whole sessions and,
    session by session, their turns holding query words, then those turns' neighbours (and the
    words each turn holds). ``words`` must be rare enough to list (see :data:`MATCH_BUDGET`)."""
    turns_total, sessions_total = source.index_size()
    if scope.sessions is not None:
        sessions_total = len(scope.sessions)
    matches = session_matches(source.term_sessions(words, scope), sessions_total=sessions_total)
    rough = session_scores(matches, list(matches.frequencies))
    # Length normalisation moves a session by a bounded factor: only the best by the rough score can
    # end up first, so only their lengths are read.
    measured = sorted(rough, key=lambda s: (-rough[s], s))[:_SESSIONS_MEASURED]
    average = max(1.0, turns_total / sessions_total) if sessions_total else 1.0
    exact = session_scores(matches, measured, lengths=source.session_lengths(measured), average_length=average)
    best = sorted(exact, key=lambda s: (-exact[s], s))[:_SESSIONS_RANKED]
    rows = source.term_turns(words, scope, sessions=best)
    held = turn_words(rows, counts, turns_total=turns_total)
    hits = informative_first(rows, held)
    ranking: list[str] = []
    for session_id in best:
        found = hits.get(session_id, [])
        ranking += [*found, *source.adjacent_turns(found, scope, radius=_SESSION_RADIUS)]
    return SessionRanking(list(dict.fromkeys(ranking)), best, held)


def recall(
    request: RecallRequest,
    *,
    source: RecallSource,
    vector: VectorSource | None = None,
    weights: RecallWeights = RecallWeights(),
    signals: Sequence[str] = SIGNALS,
) -> RecallResult:
    """Answer ``request`` from ``source`` (and ``vector`` when given). ``signals`` restricts which
    signals rank (the benchmark measures each alone); recency also needs ``request.recency``."""
    terms = validate(request)
    scope = resolve_scope(source, request)
    # Counted in the caller's scope: the counts choose the words and are reported (``terms``).
    counts = source.term_counts(terms, cap=MATCH_BUDGET, scope=scope) if terms else {}
    used, ranked = selective_terms(terms, counts) if terms else ([], True)
    match = match_expression(used)
    depth = max(_MIN_DEPTH, request.limit * _DEPTH_FACTOR)
    rankings: dict[str, list[str]] = {}
    report: dict[str, Any] = {
        "terms": {"used": used, "common": [t for t in terms if t not in used], "bm25": ranked},
        # The session as the answer's sessions and ``show`` name it, however it was given.
        "scope": {"user": request.user, "session": None if request.session is None else session_anchor(request.session),
                  "as_of": request.as_of,
                  "sessions_visible": None if scope.sessions is None else len(scope.sessions)},
        "weights": {s: weights.of(s) for s in SIGNALS} | {"rrf_k": weights.rrf_k, "keyword_anchor": weights.keyword_anchor,
                                                          "scene_vote": weights.scene_vote, "passage_anchor": weights.passage_anchor},
    }
    empty_scope = scope.sessions is not None and not scope.sessions
    matched: list[str] = []
    keyword_sessions: list[str] = []
    by_session: SessionRanking | None = None
    if match and not empty_scope:
        if "keyword" in signals or "context" in signals:
            hits = source.keyword_turns(match, scope, limit=depth, ranked=ranked)
            if "keyword" in signals:
                rankings["keyword"] = hits
                keyword_sessions = source.keyword_sessions(match, scope, limit=_MAX_SESSIONS)
            if "context" in signals:
                rankings["context"] = source.adjacent_turns(hits[:_CONTEXT_HITS], scope, radius=_CONTEXT_RADIUS)[:depth]
        # Weight 0 switches the session signal off, and its cost (~5 ms a query at 100,000 turns) with it.
        if "session" in signals and ranked and weights.session > 0:
            by_session = session_ranking(source, used, counts, scope)
            rankings["session"] = by_session.turns[:depth]
            report["session"] = {"sessions": by_session.sessions}
        if "entities" in signals:
            matched = source.matching_nodes(match, scope, limit=_MATCHED_NODES)
            points = source.point_counts(matched, scope, cap=COMMON_NODE_POINTS + 1)
            specific, common = specific_nodes(matched, points)
            near = source.neighbours(specific, scope, exclude_relationships=PROVENANCE_RELATIONSHIPS, limit=_NEIGHBOURS)
            left = GROUNDING_BUDGET - sum(points.get(n, 0) for n in specific)
            near, common_near = specific_nodes(near, source.point_counts(near, scope, cap=COMMON_NODE_POINTS + 1), budget=left)
            grounding = source.grounding_turns([*specific, *near], scope)
            rankings["entities"] = entity_ranking(specific, near, grounding)[:depth]
            report["entities"] = {"nodes": matched, "neighbours": near, "common": [*common, *common_near]}
    if vector is not None and "vector" in signals and not empty_scope:
        # The vector store knows nothing of scope: ask deeper, keep only what the scope shows.
        try:
            nearest = vector.nearest(request.query, limit=vector_limit(request))
        except VectorUnavailableError as exc:  # an optional signal: the graph still answers
            report["vector"] = {"error": str(exc)}
        else:
            visible = source.turns(nearest, scope)
            rankings["vector"] = [m for m in nearest if m in visible][:depth]
    candidates = {m for ranked in rankings.values() for m in ranked}
    records = source.turns(sorted(candidates), scope)
    rankings = {s: [m for m in ranked if m in records] for s, ranked in rankings.items()}
    if request.recency and "recency" in signals and records:
        rankings["recency"] = sorted(records, key=lambda m: (records[m].created_at or "", m), reverse=True)[:depth]
    for signal in SIGNALS:
        report[signal] = {**report.get(signal, {}), "turns": len(rankings.get(signal, [])),
                          "enabled": signal in rankings}
    # The anchor holds only where BM25 ranked: a list of the newest turns with a common word is no
    # evidence that its first turns answer anything.
    anchor = rankings.get("keyword", [])[: weights.keyword_anchor] if ranked else []
    report["keyword_anchor"] = len(anchor)
    # The passage anchor goes before keyword's: over the turns the session signal ranks (so that an
    # anchored turn is one a ranking holds), the best passage of its best sessions comes first.
    passage: list[str] = []
    if by_session is not None and "session" in rankings and weights.passage_anchor > 0:
        listed = {m: records[m] for m in rankings["session"]}
        passage = passage_ranking(by_session.words, listed, by_session.sessions)[: weights.passage_anchor]
        anchor = [*passage, *anchor]
    report["passage_anchor"] = passage
    fused = fuse({s: rankings[s] for s in SIGNALS if s in rankings}, weights, anchor=anchor,
                 scene_of={m: record.session_id for m, record in records.items()})[: request.limit]
    report["candidates"] = len(records)
    facts = source.facts(matched[:_MAX_FACTS], scope, exclude_relationships=PROVENANCE_RELATIONSHIPS, edges_per_node=_EDGES_PER_FACT)
    session_ids = list(dict.fromkeys([*keyword_sessions, *(records[m].session_id for m, _, _ in fused)]))[:_MAX_SESSIONS]
    sessions = source.sessions(session_ids, scope)
    result = RecallResult(signals=report, budget_tokens=request.budget_tokens)
    _pack(
        result,
        facts=[fact_item(f) for f in facts],
        turns=[turn_item(records[m], score, found) for m, score, found in fused],
        sessions=[session_item(sessions[s]) for s in session_ids if s in sessions],
    )
    return result


# --- output --------------------------------------------------------------------------------
def fact_item(fact: FactRecord) -> dict[str, Any]:
    """A fact as readers get it; each quote with its turn (``memory_id``) and its ``session_id``: the
    session, or the notes file (``note:<id>``, which has no turns) it came from."""
    return {
        "id": fact.node_id, "label": fact.label, "name": fact.name, "description": fact.description,
        "evidence": fact.evidence, "memory_id": fact.memory_id or None, "session_id": fact.anchor or None,
        "edges": [
            {"source": e.source, "relationship": e.relationship, "target": e.target, "other": e.other_name,
             "strength": e.places, "evidence": e.evidence, "memory_id": e.memory_id or None, "session_id": e.anchor or None}
            for e in fact.edges
        ],
    }


def turn_item(turn: TurnRecord, score: float, found_by: Sequence[str]) -> dict[str, Any]:
    return {
        "memory_id": turn.memory_id, "session_id": turn.session_id, "turn_index": turn.turn_index,
        "role": turn.role, "created_at": turn.created_at, "text": turn.text, "score": round(score, 6),
        "signals": list(found_by),
    }


def session_item(session: SessionRecord) -> dict[str, Any]:
    return {"id": session.session_id, "title": session.title, "summary": session.summary, "created_at": session.created_at}


def compact_json(value: Any) -> str:
    """``value`` as the JSON an answer is read in (no indentation, no escaped non-ASCII): the text
    its budget is estimated on (:func:`item_tokens`) and the MCP tools' text content."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def item_tokens(item: dict[str, Any]) -> int:
    """What an item costs in the context it is packed into: the estimate of its compact JSON."""
    return estimate_tokens(compact_json(item))


def pack_entity(fact: dict[str, Any], turns: list[dict[str, Any]], *, budget_tokens: int) -> dict[str, Any]:
    """One entity (``fact``) and the turns it was mentioned in, packed into ``budget_tokens`` as
    :func:`recall` packs its answer: the entity whole, then the turns in order, a turn that does not
    fit cut to the room left, the rest listed in ``omitted``. An entity that alone exceeds the
    budget is a :class:`RecallInputError` saying how much it takes."""
    check_count("budget_tokens", budget_tokens, MAX_BUDGET_TOKENS)
    result = RecallResult(budget_tokens=budget_tokens)
    _pack(result, facts=[fact], turns=turns, sessions=[])
    if not result.facts:
        raise RecallInputError(f"{fact['id']} alone takes {item_tokens(fact)} tokens, more than budget_tokens "
                               f"{budget_tokens}: ask with a larger budget")
    return {**fact, "turns": result.turns, "omitted": result.omitted, "used_tokens": result.used_tokens,
            "budget_tokens": budget_tokens}


def pack_nodes(nodes: list[dict[str, Any]], *, budget_tokens: int) -> dict[str, Any]:
    """Entities (``fact_item`` dicts, best first) packed into ``budget_tokens`` as :func:`recall`
    packs its facts: each whole, in order, while it fits; one that does not is listed in
    ``omitted`` (``kind`` ``node``, ``id``, ``tokens``) and a smaller one after it may still fit."""
    check_count("budget_tokens", budget_tokens, MAX_BUDGET_TOKENS)
    result = RecallResult(budget_tokens=budget_tokens)
    _pack(result, facts=nodes, turns=[], sessions=[])
    return {"nodes": result.facts, "omitted": [{**o, "kind": "node"} for o in result.omitted],
            "used_tokens": result.used_tokens, "budget_tokens": budget_tokens}


def _pack(result: RecallResult, *, facts: list[dict[str, Any]], turns: list[dict[str, Any]], sessions: list[dict[str, Any]]) -> None:
    """Greedy packing in priority order — the best fact, then turns and facts alternating by rank,
    then sessions — into ``result.budget_tokens``. A turn that does not fit whole is cut to fit
    (``truncated: true``) when enough room is left; anything else that does not fit is omitted."""
    queue: list[tuple[str, dict[str, Any]]] = []
    for i in range(max(len(facts), len(turns))):
        if i < len(facts):
            queue.append(("facts", facts[i]))
        if i < len(turns):
            queue.append(("turns", turns[i]))
    queue += [("sessions", s) for s in sessions]
    left = result.budget_tokens
    for kind, item in queue:
        cost = item_tokens(item)
        if cost > left and kind == "turns" and left >= _MIN_TRUNCATED_TOKENS:
            item, cost = _truncated(item, left)
        if cost <= left:
            getattr(result, kind).append(item)
            left -= cost
        else:
            # A turn is named by its memory_id; a fact (whose memory_id is its quote's turn) and a session by their id.
            result.omitted.append({"kind": kind[:-1], "id": item["memory_id"] if kind == "turns" else item["id"], "tokens": cost})
    result.used_tokens = result.budget_tokens - left


def _truncated(item: dict[str, Any], room: int) -> tuple[dict[str, Any], int]:
    """``item`` with its text cut (on a character boundary, with "…") so that it costs at most ``room``."""
    overhead = item_tokens({**item, "text": "", "truncated": True})
    text = item["text"]
    # Each character costs at most 4 bytes / 3 per token; a JSON escape can cost 6 bytes.
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if overhead + estimate_tokens(json.dumps(text[:mid] + "…", ensure_ascii=False)) <= room:
            low = mid
        else:
            high = mid - 1
    cut = {**item, "text": text[:low] + "…", "truncated": True}
    return cut, item_tokens(cut)

