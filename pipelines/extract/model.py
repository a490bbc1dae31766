"""The data of extraction (pure): work units, the extractor contract, validated chunk extractions.

An extractor answers with the *model schema* in which turns are small local numbers (``1..n``
within the unit). The schema is one pydantic model, :class:`ExtractionSpec`: the prompt's example
(:func:`schema_example`), the JSON schema sent to the server (:func:`response_schema`) and the
fields :func:`validate_extraction` reads all come from it. Validation checks an answer, maps the
numbers back to Chroma memory ids, grounds every evidence quote in the turn text (or the turn's
speaker), rejects noise names and gives canonical node ids. Its result (:class:`ChunkExtraction`)
is what ``chunk_results.payload`` stores and what reduce reads.

Model schema (JSON)::

    {"summary": "…",
     "nodes": [{"id": "n1", "type": "CLASS", "name": "LazyEdgeQueue", "description": "…",
                "aliases": ["lazy edge queue"], "confidence": 0.9, "tags": ["queue"],
                "evidence": [{"turn": 3, "quote": "the LazyEdgeQueue drops lines"}]}],
     "edges": [{"source": "n1", "target": "n2", "relationship": "DEPENDS_ON",
                "justification": "…", "evidence": [{"turn": 3, "quote": "…"}]}]}
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache, lru_cache
from typing import Annotated, Any, Protocol, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from pipelines.identity import is_identifier, normal_path
from pipelines.lazy_edge import MAX_EDGE_KEY_BYTES
from store.graph import dumps
from store.ids import MAX_NODE_ID_LENGTH, InvalidIdError, normalize_graph_node_id

SCHEMA_VERSION = 1

FAILURE_KINDS: tuple[str, ...] = (
    "skip-over-band",
    "context-overflow",
    "truncated-output",
    "schema-failure",
    "timeout",
    "provider-error",
)

# The error of an empty answer from a server that says nothing of what it read: a context
# overflow by the earlier system's reading, but no sign of where the context ends, so its chunk is
# not asked in halves (pipelines/extract/map.py): a server that answers everything empty would be
# asked a whole tree of them.
EMPTY_ANSWER = "empty answer"

# A prompt of no more estimated tokens fits every context window servers use (2,048 tokens and
# up), even at the most real tokens an estimated one counted in real prompts (1.65,
# bench/prompt_tokens.py): 1,024 × 1.65 = 1,690.
FITS_EVERY_WINDOW = 1024


def prompt_cut(estimated_tokens: int, read_tokens: int) -> bool:
    """Whether a server that reports reading ``read_tokens`` of a prompt estimated at
    ``estimated_tokens`` (:func:`pipelines.chunker.estimate_tokens`: 3 bytes a token) cut it to its
    context window: it read fewer than 2 in 5 (0: it said nothing) of a prompt larger than
    :data:`FITS_EVERY_WINDOW` (a smaller one no window cuts: a server that counts only the tokens
    it had not cached, as some Ollama versions did, reports its shared system prompt unread). A
    prompt read whole reports 0.57 to 1.65 of its estimate (bench/prompt_tokens.py: real
    coding-agent and chat prompts under three tokenizers), so 2 in 5 leaves a margin below the
    fewest. Ollama, given a prompt longer than its window (4,096 tokens unless set), keeps about
    half the window from the end, answers that, and reports only what it kept: below 2 in 5 as
    soon as the prompt is over the window for text of up to 0.8 tokens an estimated one (most
    coding sessions), over 1.25 windows for 1.0."""
    return estimated_tokens > FITS_EVERY_WINDOW and 0 < read_tokens and read_tokens * 5 < estimated_tokens * 2


SEMANTIC_RELATIONSHIPS: tuple[str, ...] = (
    "IMPLEMENTS",
    "EXTENDS",
    "DEPENDS_ON",
    "BLOCKS",
    "RESOLVES",
    "CAUSES_ISSUE",
    "RELATES_TO",
    "FOLLOWS",
    "SUPPORTS",
)
DEFAULT_TYPE = "CONCEPT"
DEFAULT_RELATIONSHIP = "RELATES_TO"
# Types whose names are prose: their ids are lower-cased with separators unified, so "Map-Reduce"
# and "map reduce" are one CONCEPT. Identifier-like types (CLASS, FILE …) keep their case.
PROSE_TYPES: frozenset[str] = frozenset({"CONCEPT", "STRATEGY", "DECISION", "GUIDE"})
MAX_NAME_CHARS = 300
# The UTF-8 bytes of a semantic node id: an extracted edge's key (two ids and a relationship of
# SEMANTIC_RELATIONSHIPS) is one entry of the ``edges`` primary key, which PostgreSQL keeps on one
# page, and within the queue's bound of an edge key (MAX_EDGE_KEY_BYTES) it fits. The default
# types' longest ids (ORGANIZATION: and 300 characters of 4 bytes, 1,213 bytes) are within it; a
# longer REM_SEMANTIC_TYPES type of non-ASCII letters, or a prose name whose case folding makes
# more characters (``ΐ`` folds to three), made ids of up to ~1.5 kB, and the edge's commit failed
# on PostgreSQL at every cycle (audit28).
MAX_SEMANTIC_ID_BYTES = (MAX_EDGE_KEY_BYTES - max(len(r) for r in SEMANTIC_RELATIONSHIPS)) // 2
MAX_TEXT_CHARS = 2_000
# The most bytes the cut to MAX_SEMANTIC_ID_BYTES takes beyond it: a character cut in two (at most
# 3 of its 4 bytes) and the one white-space character before it (clean_text leaves single spaces).
_CUT_SLACK = 4


# --- the model schema: one definition -------------------------------------------------------
class EvidenceSpec(BaseModel):
    """Where something was said: a turn number and words copied from that turn."""

    model_config = ConfigDict(extra="ignore")

    turn: int = Field(description="the [n] number of the turn", examples=[3])
    quote: str = Field(description="a few words copied verbatim from that turn", examples=["verbatim words from turn 3"])


class NodeSpec(BaseModel):
    """One entity of the answer."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(description="a handle edges use to name this node", examples=["n1"])
    type: str = Field(description="one of the node types", examples=["CLASS"])
    name: str = Field(description="the entity's name as written", examples=["…"])
    description: str = Field("", examples=["…"])
    aliases: list[str] = Field(default_factory=list, examples=[["…"]])
    confidence: float = Field(0.5, ge=0.0, le=1.0, examples=[0.9])
    tags: list[str] = Field(default_factory=list, examples=[["…"]])
    evidence: list[EvidenceSpec]


class EdgeSpec(BaseModel):
    """One relationship between two nodes of the answer (named by id, name or alias)."""

    model_config = ConfigDict(extra="ignore")

    source: str = Field(examples=["n1"])
    target: str = Field(examples=["n2"])
    relationship: str = Field(description="one of the relationships", examples=["DEPENDS_ON"])
    justification: str = Field("", examples=["…"])
    evidence: list[EvidenceSpec] = Field(default_factory=list)


class ExtractionSpec(BaseModel):
    """An extractor's answer for one work unit (the model schema)."""

    model_config = ConfigDict(extra="ignore")

    summary: str = Field(examples=["two sentences"])
    nodes: list[NodeSpec]
    edges: list[EdgeSpec]


def schema_example(spec: type[BaseModel] = ExtractionSpec) -> dict[str, Any]:
    """An example answer built from the fields' examples (what the prompt shows)."""
    example: dict[str, Any] = {}
    for name, info in spec.model_fields.items():
        inner = _list_item_model(info.annotation)
        example[name] = [schema_example(inner)] if inner is not None else (info.examples or [""])[0]
    return example


def response_schema(spec: type[BaseModel] = ExtractionSpec) -> dict[str, Any]:
    """The JSON schema sent to the server: the model's schema with its ``$defs`` inlined (some
    servers' grammar builders do not follow ``$ref``) and without titles and examples."""
    raw = spec.model_json_schema()
    definitions = raw.pop("$defs", {})

    def inline(value: Any) -> Any:
        if isinstance(value, dict):
            if "$ref" in value:
                return inline(definitions[value["$ref"].rsplit("/", 1)[-1]])
            return {k: inline(v) for k, v in value.items() if k not in ("title", "examples")}
        if isinstance(value, list):
            return [inline(v) for v in value]
        return value

    return inline(raw)


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    """``M`` when ``annotation`` is ``list[M]`` for a pydantic model ``M``."""
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item
    return None


@cache
def _field_adapter(spec: type[BaseModel], name: str) -> tuple[TypeAdapter[Any], bool]:
    """A strict validator of one field (of a list field: of one element), and whether it is a list."""
    info = spec.model_fields[name]
    if get_origin(info.annotation) is list:
        (item,) = get_args(info.annotation)
        return TypeAdapter(Any if _list_item_model(info.annotation) else item), True
    annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    return TypeAdapter(annotation), False


def read_fields(spec: type[BaseModel], item: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of ``spec`` read from ``item`` on its own, so one bad field never costs the item:
    a value of the wrong type or out of the field's bounds is the field's default (``None`` for a
    required field); a list keeps its elements of the right type (of a list of models: its objects,
    read by the caller with this function again). Nothing raises."""
    fields: dict[str, Any] = {}
    for name, info in spec.model_fields.items():
        adapter, is_list = _field_adapter(spec, name)
        value = item.get(name)
        if is_list:
            elements = value if isinstance(value, list) else []
            if _list_item_model(info.annotation) is not None:
                fields[name] = [e for e in elements if isinstance(e, Mapping)]
            else:
                fields[name] = [e for e in elements if _valid(adapter, e)]
            continue
        if value is not None and _valid(adapter, value):
            fields[name] = value
        else:
            fields[name] = None if info.is_required() else info.get_default(call_default_factory=True)
    return fields


def _valid(adapter: TypeAdapter[Any], value: Any) -> bool:
    try:
        adapter.validate_python(value, strict=True)
    except (ValidationError, TypeError, ValueError, OverflowError):
        return False
    return True


class ExtractionFailure(Exception):
    """A chunk could not be extracted; ``kind`` is one of :data:`FAILURE_KINDS`. ``outage``: the
    model server could not be reached, or refused to work on any request (rate limit or quota,
    bad gateway, unavailable) — a failure that says nothing about the chunk. ``unsent``: an
    outage whose last request no model worked on (its connection refused, or no chat-completions
    endpoint at the configured URL) and that paid nothing: no try against the chunk
    (:func:`pipelines.extract.map.map_units` records none)."""

    def __init__(
        self, kind: str, message: str, *, tokens_in: int = 0, tokens_out: int = 0, outage: bool = False, unsent: bool = False
    ) -> None:
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.outage = outage or unsent
        self.unsent = unsent


@dataclass(frozen=True, slots=True)
class UnitTurn:
    """One turn as the extractor sees it: its local number, its memory and (part of) its text."""

    number: int
    memory_id: str
    text: str
    role: str | None = None


def turn_line(number: int, role: str | None, text: str) -> str:
    """How an extractor's prompt shows one turn: ``[N] (role) text`` (no role: ``[N] text``). The
    chunk planner sizes chunks by these lines, so a prompt fits the band it is checked against."""
    return f"[{number}] ({role}) {text}" if role else f"[{number}] {text}"


@dataclass(frozen=True, slots=True)
class WorkUnit:
    """What one extractor call sees: a chunk, or one part of an oversized turn."""

    unit_id: str
    session_id: str
    chunk_index: int
    turns: tuple[UnitTurn, ...]
    content_hash: str
    part: int | None = None  # of an oversized turn's parts, which one

    @property
    def is_empty(self) -> bool:
        return not any(t.text.strip() for t in self.turns)

    @property
    def text_hash(self) -> str:
        """:func:`unit_text_hash` of the unit: the same in every session that has its words."""
        return unit_text_hash(self.turns, part=self.part)

    @property
    def memory_ids(self) -> tuple[str, ...]:
        """The memories of the unit's turns, in turn order."""
        return tuple(t.memory_id for t in self.turns)


def unit_content_hash(session_id: str, turns: Sequence[UnitTurn], *, part: int | None = None) -> str:
    """sha256 over exactly what the extractor sees (session, memory ids, roles, texts)."""
    body = [session_id, part, [[t.number, t.memory_id, t.role, t.text] for t in turns]]
    return _sha256(body)


def unit_text_hash(turns: Sequence[UnitTurn], *, part: int | None = None) -> str:
    """sha256 over what the extractor sees of the turns whatever session holds them: the part, and
    each turn's number, role and text (no session, no memory ids). Units of two sessions with the
    same text hash get the same answer, its evidence on the memories at the same places
    (:func:`answer_moved_to`); the prompt's header line, which names the session, is the one thing
    shown that it leaves out (INTERNALS "Extraction, step by step" says why that is sound)."""
    return _sha256(["text", part, [[t.number, t.role, t.text] for t in turns]])


def _sha256(body: Any) -> str:
    return hashlib.sha256(dumps(body).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class ExtractorReply:
    """An extractor's answer in the model schema, with the tokens it cost."""

    raw: Any
    tokens_in: int = 0
    tokens_out: int = 0


class Extractor(Protocol):
    """Turns one work unit into a reply in the model schema, or raises :class:`ExtractionFailure`."""

    name: str

    @property
    def fingerprint(self) -> str:
        """Extractor name + model + prompt version + schema version (+ settings that change output)."""
        ...

    async def extract(self, unit: WorkUnit) -> ExtractorReply: ...


# --- validated output --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Evidence:
    memory_id: str
    quote: str


@dataclass(frozen=True, slots=True)
class ExtractedNode:
    id: str
    type: str
    name: str
    description: str = ""
    aliases: tuple[str, ...] = ()
    confidence: float = 0.5
    tags: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True, slots=True)
class ExtractedEdge:
    source: str
    target: str
    relationship: str
    justification: str = ""
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True, slots=True)
class Reference:
    """An explicit ``memory:``/``session:`` reference (``target``) written in a turn (``memory_id``)."""

    target: str
    memory_id: str
    quote: str


@dataclass(frozen=True, slots=True)
class ChunkExtraction:
    """One unit's validated extraction: canonical ids, memory ids, grounded evidence only."""

    unit_id: str
    summary: str = ""
    nodes: tuple[ExtractedNode, ...] = ()
    edges: tuple[ExtractedEdge, ...] = ()
    references: tuple[Reference, ...] = ()
    ungrounded: tuple[dict[str, Any], ...] = ()
    invalid_turn_refs: int = 0
    dropped_items: int = 0
    rejected: tuple[tuple[str, int], ...] = ()  # (reason, count) of the dropped items, sorted

    def to_payload(self) -> dict[str, Any]:
        """Plain JSON-ready data (``chunk_results.payload``)."""
        return asdict(self)

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> "ChunkExtraction":
        """Inverse of :meth:`to_payload`."""

        def ev(items: Sequence[Mapping[str, Any]]) -> tuple[Evidence, ...]:
            return tuple(Evidence(i["memory_id"], i["quote"]) for i in items)

        return cls(
            unit_id=data["unit_id"],
            summary=data.get("summary", ""),
            nodes=tuple(
                ExtractedNode(
                    n["id"], n["type"], n["name"], n["description"], tuple(n["aliases"]), n["confidence"],
                    tuple(n["tags"]), ev(n["evidence"]),
                )
                for n in data.get("nodes", ())
            ),
            edges=tuple(
                ExtractedEdge(e["source"], e["target"], e["relationship"], e["justification"], ev(e["evidence"]))
                for e in data.get("edges", ())
            ),
            references=tuple(Reference(r["target"], r["memory_id"], r["quote"]) for r in data.get("references", ())),
            ungrounded=tuple(dict(u) for u in data.get("ungrounded", ())),
            invalid_turn_refs=data.get("invalid_turn_refs", 0),
            dropped_items=data.get("dropped_items", 0),
            rejected=tuple((str(r), int(n)) for r, n in data.get("rejected", ())),
        )


def answer_moved_to(
    extraction: ChunkExtraction, unit: WorkUnit, memory_ids: Sequence[str], *, session_id: str,
) -> ChunkExtraction | None:
    """An answer given for a unit of the same text hash in session ``session_id`` (``memory_ids``:
    that unit's turns' memories, in turn order) as ``unit``'s: each evidence moved to the memory at
    the same place of ``unit``, the references found in ``unit``'s turns (a turn naming its own
    memory names none), ``unit``'s id. ``None`` when the answer cites a memory ``memory_ids`` lacks,
    or the turn counts differ (a stored row that does not match its hash), or it names its session
    where the turns do not and that is not ``unit``'s (:func:`names_its_session`). Pure."""
    if len(memory_ids) != len(unit.turns):
        return None
    if session_id != unit.session_id and names_its_session(extraction, session_id, unit):
        return None
    place = dict(zip(memory_ids, unit.memory_ids))
    if not {e.memory_id for item in (*extraction.nodes, *extraction.edges) for e in item.evidence} <= place.keys():
        return None

    def moved(evidence: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
        return tuple(Evidence(place[e.memory_id], e.quote) for e in evidence)

    return replace(
        extraction,
        unit_id=unit.unit_id,
        nodes=tuple(replace(n, evidence=moved(n.evidence)) for n in extraction.nodes),
        edges=tuple(replace(e, evidence=moved(e.evidence)) for e in extraction.edges),
        references=find_references(unit),
    )


def joined_answer(unit: WorkUnit, halves: Sequence[ChunkExtraction]) -> ChunkExtraction:
    """The answers of ``unit``'s halves (:func:`pipelines.extract.units.halve_unit`, in order) as
    one answer of ``unit``: their items side by side (their evidence already names memories, and
    ids are canonical, so the reduce merges what both halves found as it merges across chunks),
    summaries joined, counts summed, references found in ``unit``'s turns. Pure."""
    rejected: dict[str, int] = {}
    for reason, count in (r for half in halves for r in half.rejected):
        rejected[reason] = rejected.get(reason, 0) + count
    return ChunkExtraction(
        unit_id=unit.unit_id,
        summary="\n".join(h.summary for h in halves if h.summary),
        nodes=tuple(n for h in halves for n in h.nodes),
        edges=tuple(e for h in halves for e in h.edges),
        references=find_references(unit),
        ungrounded=tuple(u for h in halves for u in h.ungrounded),
        invalid_turn_refs=sum(h.invalid_turn_refs for h in halves),
        dropped_items=sum(h.dropped_items for h in halves),
        rejected=tuple(sorted(rejected.items())),
    )


def names_its_session(extraction: ChunkExtraction, session_id: str, unit: WorkUnit) -> bool:
    """Whether the answer says ``session_id`` (case-insensitive, as a whole word) where ``unit``'s
    turns do not: a model may repeat the prompt's header (``Session <id>, …``: the one thing shown
    that :func:`unit_text_hash` leaves out) in a description, justification, name or summary. Such
    an answer is its session's, not its words': moved to another session it would show that
    session's id there — another user's, in a recall scoped to this one. An id the turns say
    themselves (a resumed conversation quoting it) is the words', as true of every copy."""
    needle = session_id.casefold()
    written = "\n".join(_model_texts(extraction)).casefold()
    if needle not in written:  # the common case, without a pattern
        return False
    said = re.compile(rf"(?<![0-9a-z]){re.escape(needle)}(?![0-9a-z])")
    return said.search(written) is not None and not any(said.search(t.text.casefold()) for t in unit.turns)


def _model_texts(extraction: ChunkExtraction) -> Iterator[str]:
    """What the model wrote in an answer (not its memory ids, unit id or references: the worker's)."""
    yield extraction.summary
    for node in extraction.nodes:
        yield from (node.id, node.name, node.description, *node.aliases, *node.tags, *(e.quote for e in node.evidence))
    for edge in extraction.edges:
        yield from (edge.source, edge.target, edge.relationship, edge.justification, *(e.quote for e in edge.evidence))
    for item in extraction.ungrounded:
        yield from (str(value) for value in item.values())


# --- names and ids -----------------------------------------------------------------------------
# Control characters, and lone surrogates (JSON "\\ud800" decodes to one; SQLite cannot store it).
_CONTROL = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
# What a name's key (:func:`canonical_name`) ignores around it: quotes, whatever the type; and
# between and around the words of a prose type, white space and these separators.
_NAME_QUOTES = "`'\""
_PROSE_SEPARATOR_CHARS = "_-–—→/"
_PROSE_SEPARATORS = re.compile(rf"[\s{re.escape(_PROSE_SEPARATOR_CHARS)}]+")


def clean_text(value: Any, *, limit: int = MAX_TEXT_CHARS) -> str:
    """A string with control characters turned into spaces, white space collapsed, clipped."""
    if not isinstance(value, str):
        return ""
    return " ".join(_CONTROL.sub(" ", unicodedata.normalize("NFC", value)).split())[:limit]


def clean_alias(node_type: str, value: Any) -> str:
    """An alias as a node of ``node_type`` keeps it: :func:`clean_text`, without what its key
    (:func:`canonical_name`) ignores at either end — quotes (``"Jane Doe"``), white space, and for a
    prose type its separators (``-Jane Doe``, ``— Jane Doe``). So the key's first word begins the
    alias's case fold, by which the alias index is read (:meth:`store.graph.GraphStore.aliases_with_words`,
    whether a name ``forget --node`` keeps out is another node's): said with them, such an alias
    was never found. The one place an extraction's aliases come in (:func:`validate_extraction`,
    whose node's name is among them). Pure."""
    ignored = " " + _NAME_QUOTES + (_PROSE_SEPARATOR_CHARS if node_type in PROSE_TYPES else "")
    return clean_text(value, limit=MAX_NAME_CHARS).strip(ignored)


def canonical_name(node_type: str, name: str) -> str:
    """The name part of a semantic node id: prose types lower-cased with separators unified."""
    cleaned = clean_text(name, limit=MAX_NAME_CHARS).strip(_NAME_QUOTES)
    if node_type in PROSE_TYPES:
        cleaned = " ".join(_PROSE_SEPARATORS.sub(" ", cleaned.casefold()).split())
    elif node_type == "FILE":
        cleaned = normal_path(cleaned)  # a/x.py, b/x.py, ./x.py and x.py are one file
    return cleaned


def identity_key(node_type: str, name: str) -> tuple[str, str]:
    """The (TYPE, normalised name) pair that deduplicates nodes across chunks and sessions; a code
    identifier keeps its case (``F`` is not ``f``, see :func:`pipelines.identity.is_identifier`)."""
    canonical = canonical_name(node_type, name)
    return node_type, canonical if is_identifier(node_type, canonical) else canonical.casefold()


def suppression_names(node_type: str, names: Iterable[str]) -> dict[str, str]:
    """The keys a node forgotten by ``rem-cycle forget --node`` is kept out by, under its type
    (store/suppressions.py), each with the first of ``names`` (its name, aliases, spellings) that
    makes it: the name's canonical name (:func:`canonical_name`: ``./a/x.py`` is ``a/x.py``), NFC
    and case folded as ``show``'s name look-up folds — a code identifier's other casing is kept out
    too. The spelling gives the id a node of that name has (:func:`semantic_node_id`). Pure."""
    keyed: dict[str, str] = {}
    for name in names:
        if name and (key := unicodedata.normalize("NFC", canonical_name(node_type, name)).casefold()):
            keyed.setdefault(key, name)
    return keyed


@lru_cache(maxsize=16384)  # a session names its few things in thousands of turns
def uncut_semantic_id(node_type: str, name: str) -> str | None:
    """``<TYPE>:<canonical name>`` cut to :data:`MAX_NODE_ID_LENGTH` characters only — the id
    :func:`semantic_node_id` gave before audit28 bounded it in bytes — or ``None`` when the name
    is empty or the id invalid."""
    canonical = canonical_name(node_type, name)
    if not canonical:
        return None
    node_id = f"{node_type}:{canonical}"[:MAX_NODE_ID_LENGTH].rstrip()
    try:
        normalized = normalize_graph_node_id(node_id)
    except InvalidIdError:
        return None
    # A name like "memory:x" would make a row-backed id; those are never semantic nodes.
    return normalized if normalized.partition(":")[0] == node_type else None


@lru_cache(maxsize=16384)
def semantic_node_id(node_type: str, name: str) -> str | None:
    """``<TYPE>:<canonical name>`` cut to :data:`MAX_NODE_ID_LENGTH` characters and
    :data:`MAX_SEMANTIC_ID_BYTES` bytes, or ``None`` when the name is empty or the id invalid."""
    whole = uncut_semantic_id(node_type, name)
    if whole is None:
        return None
    encoded = whole.encode()  # no lone surrogate: normalize_graph_node_id refuses them
    if len(encoded) <= MAX_SEMANTIC_ID_BYTES:
        return whole
    cut = encoded[:MAX_SEMANTIC_ID_BYTES].decode(errors="ignore").rstrip()  # a character cut in two is dropped whole
    return cut if cut.partition(":")[0] == node_type else None


def ids_before_cut(node_type: str, node_id: str, names: Iterable[str]) -> frozenset[str]:
    """The ids that ``names`` of the semantic node ``node_id`` made before audit28 cut ids to
    :data:`MAX_SEMANTIC_ID_BYTES` bytes, where they are longer than ``node_id`` (none for a node
    whose id was not cut). A graph written before the cut may hold a node under one of them (on
    SQLite any; on PostgreSQL one whose edges fitted): the commit folds it into ``node_id``
    (:func:`pipelines.extract.commit.before_cut`). Pure."""
    if len(node_id.encode()) < MAX_SEMANTIC_ID_BYTES - _CUT_SLACK:
        return frozenset()  # not cut: the common case costs no canonical name
    return frozenset(
        whole for name in names
        if (whole := uncut_semantic_id(node_type, name)) not in (None, node_id) and semantic_node_id(node_type, name) == node_id
    )


# Noise no extractor may turn into a node (each a ``rejected`` reason of its own).
_SHELL_PROMPT = re.compile(r"^(?:[$%#>]|>>>|\.\.\.|In \[\d*\]:|PS [A-Za-z]:\\\S*>|\S+@[\w.-]+:\S*[$#])(?:\s|$)")
_COLOUR = re.compile(r"^(?:#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})|(?:rgba?|hsla?)\(.*\))$")
_ISSUE_NUMBER = re.compile(r"^#?[1-9]\d*$")  # decimal, no leading zero: "#0a0" and "#000" are colours
_NUMBER = re.compile(r"^[#+-]?v?\d[\d.,:/_%x-]*$")
_HEX_BLOB = re.compile(r"^(?:0x|sha\d*[:-])?(?=[0-9a-fA-F-]*\d)(?=[0-9a-fA-F-]*[a-fA-F])[0-9a-fA-F-]{8,}$")
_TOKEN_BLOB = re.compile(r"^[A-Za-z0-9+/=_-]{16,}$")
_CODE_PUNCTUATION = re.compile(r"[;{}]")
# A sed script the agent ran (`s/old.py/new.py/`, `2476s/self.dataLim`): a command, not a path.
_EDIT_COMMAND = re.compile(r"^(?:(?:\d+(?:,\d+)?|\$)[sy]/|[sy]/[^/\s]+/)")
# In a base64 or random token about two characters in three change class (upper, lower, digit,
# other); in CamelCase and snake_case identifiers one in five or fewer.
_BLOB_CLASS_CHANGES = 0.45


def noise_reason(node_type: str, name: str) -> str | None:
    """Why ``name`` is noise rather than an entity, or ``None``: ``node-name-shell-prompt``,
    ``node-name-colour``, ``node-name-number``, ``node-name-blob`` (a hash, long hex, a base64 or
    random token, minified code) or ``node-name-edit-command`` (a sed expression read as a path).
    ``#123`` stays a valid ISSUE name."""
    if _SHELL_PROMPT.match(name):
        return "node-name-shell-prompt"
    if _EDIT_COMMAND.match(name):
        return "node-name-edit-command"
    if node_type == "ISSUE" and _ISSUE_NUMBER.match(name):
        return None
    if _COLOUR.match(name):
        return "node-name-colour"
    if _NUMBER.match(name):
        return "node-name-number"
    if _HEX_BLOB.match(name) or _CODE_PUNCTUATION.search(name) or (_TOKEN_BLOB.match(name) and _class_changes(name) >= _BLOB_CLASS_CHANGES):
        return "node-name-blob"
    return None


def _class_changes(token: str) -> float:
    """The share of neighbouring characters of a different class (upper, lower, digit, other)."""
    classes = [0 if c.isupper() else 1 if c.islower() else 2 if c.isdigit() else 3 for c in token]
    return sum(a != b for a, b in zip(classes, classes[1:])) / max(1, len(token) - 1)


def coerce_type(value: Any, semantic_types: Collection[str]) -> str:
    """The upper-cased type when it is in the vocabulary, else CONCEPT."""
    upper = clean_text(value, limit=64).upper().replace(" ", "_")
    return upper if upper in semantic_types else DEFAULT_TYPE


def coerce_relationship(value: Any) -> str:
    """The upper-cased relationship when it is a known semantic one, else RELATES_TO."""
    upper = clean_text(value, limit=64).upper().replace(" ", "_").replace("-", "_")
    return upper if upper in SEMANTIC_RELATIONSHIPS else DEFAULT_RELATIONSHIP


# --- explicit references -----------------------------------------------------------------------
# Ids may contain '.' and ':' (and end a sentence), so trailing '.', ':' and ')' are stripped.
_REFERENCE = re.compile(r"(?<![A-Za-z0-9_])(memory|session|MEMORY|SESSION|Memory|Session):([A-Za-z0-9_.:@+=-]+)")


def find_references(unit: WorkUnit) -> tuple[Reference, ...]:
    """Every explicit ``memory:<id>`` / ``session:<id>`` written in the unit's turns (pure)."""
    found: list[Reference] = []
    seen: set[tuple[str, str]] = set()
    for turn in unit.turns:
        for match in _REFERENCE.finditer(turn.text):
            suffix = match.group(2).rstrip(".:)")
            if not suffix:
                continue
            try:
                target = normalize_graph_node_id(f"{match.group(1)}:{suffix}")
            except InvalidIdError:
                continue
            if (target, turn.memory_id) not in seen and target != f"memory:{turn.memory_id}":
                seen.add((target, turn.memory_id))
                found.append(Reference(target, turn.memory_id, f"{match.group(1)}:{suffix}"))
    return tuple(found)


# --- validation --------------------------------------------------------------------------------
@dataclass(slots=True)
class _Grounding:
    turns: dict[int, UnitTurn]
    folded: dict[int, str]
    speakers: dict[int, str]
    ungrounded: list[dict[str, Any]] = field(default_factory=list)
    invalid_turn_refs: int = 0

    def ground(self, items: Any, owner: str) -> tuple[Evidence, ...]:
        """Grounded evidence of one node/edge; the rest is flagged in ``ungrounded``."""
        grounded: dict[Evidence, None] = {}  # ordered, and no list scan per quote (n² on a long chunk)
        for item in items:
            fields = read_fields(EvidenceSpec, item)
            quote = clean_text(fields["quote"], limit=500)
            number = fields["turn"]
            if number is not None and number not in self.turns:
                self.invalid_turn_refs += 1
                number = None
            memory_id = self._locate(quote, number) if quote else None
            if memory_id is None:
                # Only cleaned values are kept: this goes into the stored payload as JSON text.
                turn = item.get("turn")
                shown = clean_text(turn, limit=40) if isinstance(turn, str) else _plain_int(turn)
                self.ungrounded.append({"owner": owner, "turn": shown, "quote": quote})
            else:
                grounded.setdefault(Evidence(memory_id, quote))
        return tuple(grounded)

    def _locate(self, quote: str, number: int | None) -> str | None:
        needle = quote.casefold()
        if number is not None and (needle in self.folded[number] or needle == self.speakers.get(number)):
            return self.turns[number].memory_id
        # Models garble numbers more often than quotes: accept the quote in another turn.
        for other, text in self.folded.items():
            if needle in text:
                return self.turns[other].memory_id
        # A speaker is named by the turn's role, not its text: the quote is that name.
        for other, speaker in self.speakers.items():
            if needle == speaker:
                return self.turns[other].memory_id
        return None


def validate_extraction(raw: Any, unit: WorkUnit, *, semantic_types: Collection[str]) -> ChunkExtraction:
    """Check a reply in the model schema and turn it into a :class:`ChunkExtraction` (pure).

    Raises :class:`ExtractionFailure` ``schema-failure`` when the reply is not an object with a
    ``nodes`` list (a ``graph: {nodes, edges}`` wrapper, the earlier system's shape, is accepted).
    Items are read field by field from :class:`NodeSpec` / :class:`EdgeSpec` / :class:`EvidenceSpec`
    (:func:`read_fields`: a field of the wrong type is its default, never raised on). Bad items are
    dropped and counted by reason (``rejected``: ``node-not-an-object``, ``node-name-invalid``, the
    noise reasons of :func:`noise_reason`, ``edge-not-an-object``, ``edge-endpoint-unknown``,
    ``edge-self-loop``); evidence whose quote is neither in the chunk text nor a turn's speaker is
    flagged in ``ungrounded`` and never used as provenance; turn numbers outside the unit are
    counted.
    """
    if isinstance(raw, Mapping) and isinstance(raw.get("graph"), Mapping):
        raw = {**raw["graph"], "summary": raw.get("summary", "")}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("nodes"), list):
        raise ExtractionFailure("schema-failure", "reply is not an object with a 'nodes' list")
    edges_raw = raw.get("edges", [])
    if not isinstance(edges_raw, list):
        raise ExtractionFailure("schema-failure", "'edges' is not a list")
    grounding = _Grounding(
        turns={t.number: t for t in unit.turns},
        folded={t.number: clean_text(t.text, limit=len(t.text) + 1).casefold() for t in unit.turns},
        speakers={t.number: clean_text(t.role, limit=64).casefold() for t in unit.turns if t.role},
    )
    rejected: dict[str, int] = {}
    nodes: dict[str, ExtractedNode] = {}
    handles: dict[str, str] = {}  # what the reply may call a node (its id, name, aliases) -> node id
    for item in raw["nodes"]:
        node = _node(item, semantic_types, grounding)
        if isinstance(node, str):
            rejected[node] = rejected.get(node, 0) + 1
            continue
        if node.id in nodes:  # the same entity twice in one reply: keep one, merge its evidence
            first = nodes[node.id]
            node = ExtractedNode(
                first.id, first.type, first.name, max(first.description, node.description, key=len),
                _union(first.aliases, node.aliases), max(first.confidence, node.confidence),
                _union(first.tags, node.tags), _union(first.evidence, node.evidence),
            )
        nodes[node.id] = node
        for handle in (item.get("id"), item.get("name"), node.id, node.name, *node.aliases):
            if isinstance(handle, str) and handle.strip():
                handles.setdefault(handle.strip().casefold(), node.id)
    # An edge said twice with one justification is one edge; with two, two (the same key): each
    # justification stays with the evidence it came with, so forgetting a turn takes back its own.
    edges: dict[tuple[str, str, str, str], ExtractedEdge] = {}
    for item in edges_raw:
        edge = _edge(item, handles, grounding)
        if isinstance(edge, str):
            rejected[edge] = rejected.get(edge, 0) + 1
            continue
        key = (edge.source, edge.target, edge.relationship, edge.justification)
        if key in edges:
            edge = ExtractedEdge(*key, _union(edges[key].evidence, edge.evidence))
        edges[key] = edge
    return ChunkExtraction(
        unit_id=unit.unit_id,
        summary=clean_text(raw.get("summary")),
        nodes=tuple(nodes.values()),
        edges=tuple(edges.values()),
        references=find_references(unit),
        ungrounded=tuple(grounding.ungrounded),
        invalid_turn_refs=grounding.invalid_turn_refs,
        dropped_items=sum(rejected.values()),
        rejected=tuple(sorted(rejected.items())),
    )


def _node(item: Any, semantic_types: Collection[str], grounding: _Grounding) -> ExtractedNode | str:
    """The validated node, or the reason it is rejected."""
    if not isinstance(item, Mapping):
        return "node-not-an-object"
    fields = read_fields(NodeSpec, item)
    name, node_type, given_id = fields["name"], fields["type"], fields["id"] or ""
    if (name is None or not name.strip()) and ":" in given_id:
        node_type, _, name = given_id.partition(":")  # the earlier system's "Type:Name" ids
    node_type = coerce_type(node_type, semantic_types)
    node_id = semantic_node_id(node_type, name or "")
    if node_id is None:
        return "node-name-invalid"
    display = clean_text(name, limit=MAX_NAME_CHARS)
    noise = noise_reason(node_type, display)
    if noise is not None:
        return noise
    aliases = {clean_alias(node_type, a) for a in [display, *fields["aliases"]]}
    tags = [clean_text(t, limit=64).lower() for t in fields["tags"]]
    return ExtractedNode(
        id=node_id,
        type=node_type,
        name=display,
        description=clean_text(fields["description"]),
        aliases=tuple(sorted(aliases - {""})),
        confidence=round(float(fields["confidence"]), 4),
        tags=tuple(sorted({t for t in tags if t})),
        evidence=grounding.ground(fields["evidence"], node_id),
    )


def _edge(item: Any, handles: Mapping[str, str], grounding: _Grounding) -> ExtractedEdge | str:
    """The validated edge, or the reason it is rejected."""
    if not isinstance(item, Mapping):
        return "edge-not-an-object"
    fields = read_fields(EdgeSpec, item)
    source, target = (handles.get(v.strip().casefold()) if v is not None else None for v in (fields["source"], fields["target"]))
    if source is None or target is None:
        return "edge-endpoint-unknown"
    if source == target:
        return "edge-self-loop"
    relationship = coerce_relationship(fields["relationship"])
    return ExtractedEdge(
        source,
        target,
        relationship,
        clean_text(fields["justification"], limit=500),
        grounding.ground(fields["evidence"], f"{source} {relationship} {target}"),
    )


def _plain_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _union(first: Sequence[Any], second: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys([*first, *second]))
