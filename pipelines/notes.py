"""Notes import: Markdown / plain-text files through the same chunk → extract → reduce → commit path
as sessions, with the file itself as the provenance anchor.

- **Source id**: ``note:<first 16 hex digits of sha256(absolute path)>`` — deterministic, so
  re-importing the same file re-extracts against the same anchor (its old provenance points are
  replaced, exactly like a re-extracted session's). The anchor is a ``NOTE`` node whose name is the
  path as given and whose ``path`` property is the absolute path; it is what ``export`` lists in
  ``file_sources``. Extracted nodes point at it with ``DISCUSSED_IN``; their provenance points carry
  the note id in ``session`` and no ``memory`` (a file has no turns), plus the chunk and the
  verbatim evidence quote.
- **Turns**: the file's paragraphs (blank-line separated) play the part of turns, so chunking
  keeps paragraphs whole.
- **Cost**: an unchanged file (same content hash as its last successful import) is skipped before
  anything is planned: no model call, no write. A changed file re-extracts only the chunks whose
  text changed (``chunk_results`` reuse by content hash, as for sessions).
- **Fail-closed**: a file commits only when every chunk succeeded; a failure leaves the graph as
  it was (the NOTE node keeps its old hash, so the next import tries again).
- Explicit ``memory:``/``session:`` references written in notes link the referenced row to the
  file: ``memory:x REFERENCED_BY note:<hash>``. A row not in the graph yet goes to the lazy-edge
  queue, and the next drain back-fills it from Chroma (or dead-letters a reference to nothing).
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from config.redact import redact
from pipelines.extract.commit import CommitStats, commit_session
from pipelines.extract.map import map_units
from pipelines.extract.model import MAX_NAME_CHARS, Extractor
from pipelines.extract.reduce import reduce_session, said_texts
from pipelines.extract.units import SourceTurn, plan_units
from pipelines.lazy_edge import LazyEdgeSink, queue_superseding
from pipelines.ports import MergeRecorder, UnitOfWork
from pipelines.resolver import GraphResolver
from pipelines.vocabulary import NOTE_LABEL, REFERENCED_BY
from store.graph import Node
from store.ids import note_key

NOTE_SUFFIXES: tuple[str, ...] = (".md", ".markdown", ".mdown", ".txt", ".text")


@dataclass(frozen=True, slots=True)
class NoteFile:
    """One file to import: where it is, how the user named it, its text."""

    path: Path
    shown: str
    text: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(str(self.path).encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def note_id(self) -> str:
        """The anchor node id, ``note:<hash of the absolute path>``."""
        return f"note:{self.digest[:16]}"

    @property
    def key(self) -> str:
        """The session-like key of its chunks (``<key>:chunk:<N>``) and chunk results."""
        return note_key(self.digest)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()


_NOTE_ID = re.compile(r"note:([0-9a-f]{16})", re.IGNORECASE)


def note_anchor(given: str, *, cwd: Path | None = None) -> tuple[str, str]:
    """``(note id, chunk key)`` of an imported notes file named by its id — ``note:<16 hex>``, as
    ``import-notes``, ``show`` and ``export`` print it (any case) — or by its path (relative to
    ``cwd``, default the working directory). A file that was moved, deleted or imported from
    another directory is still named by its id; an id-shaped name is a path only when such a file
    exists."""
    base = cwd or Path.cwd()
    named = _NOTE_ID.fullmatch(given)
    if named is not None and not (base / given).exists():
        digest = named.group(1).lower()
        return f"note:{digest}", note_key(digest)
    file = NoteFile((base / given).resolve(), given, "")
    return file.note_id, file.key


# A notes file is read whole and extracted as one unit (its paragraphs are the turns); extraction
# holds some twenty times the text at once. A larger file (a log or a dump under a notes folder)
# is refused with a reason, never read.
NOTE_MAX_BYTES = 16 * 1024 * 1024


class NoteReadError(ValueError):
    """A notes file that cannot be imported (unreadable, not UTF-8, too large): the message says why."""


def find_note_paths(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[tuple[Path, str]], list[str]]:
    """The files named (any extension) and the Markdown/text files under the folders named
    (recursively, hidden entries skipped), each once, sorted by absolute path, as (absolute path,
    path as given); plus one error per path that is no file or folder. Nothing is read: a file's
    text is read by :func:`read_note` when its turn comes, so one file's text is held at a time."""
    found: dict[Path, str] = {}
    errors: list[str] = []
    for given in paths:
        root = Path(given)
        if root.is_dir():
            named = sorted(
                p for p in root.rglob("*")
                if p.suffix.lower() in NOTE_SUFFIXES and not p.is_dir() and not any(part.startswith(".") for part in p.relative_to(root).parts)
            )
            # A FIFO, device or socket named like a notes file is listed as one named itself is
            # (la33ops: it was passed over without a word).
            candidates = [p for p in named if p.is_file()]
            errors += [_not_regular(p) for p in named if not p.is_file() and p.exists()]
        elif root.is_file():
            candidates = [root]
        elif root.exists():
            errors.append(_not_regular(given))
            continue
        else:
            errors.append(f"{given}: no such file or folder")
            continue
        for candidate in candidates:
            found.setdefault(candidate.resolve(), str(candidate))
    return sorted(found.items()), errors


def _not_regular(path: str | os.PathLike[str]) -> str:
    """The error of a path that exists and is no regular file or folder: never opened, since
    reading a FIFO would wait for a writer."""
    return f"{path}: not a regular file or folder (a device, a FIFO or a socket); not read"


def vanished(notes: Iterable[Node], folders: Iterable[Path], found: Iterable[Path], *, exists: Callable[[str], bool]) -> list[dict[str, str]]:
    """The imported notes files (``notes``: NOTE nodes) that were under one of ``folders`` (absolute),
    are not among the files ``found`` there now and do not ``exist`` (deleted, moved, renamed):
    ``[{note_id, path}]`` by path. A file named on its own (another suffix, a hidden one) is not
    gone while it is there. Their facts stay until they are forgotten."""
    roots = [str(folder) for folder in folders]
    here = {str(path) for path in found}
    gone = []
    for node in notes:
        path = node.properties.get("path")
        if (isinstance(path, str) and path not in here and any(path.startswith(os.path.join(root, "")) for root in roots)
                and not exists(path)):
            gone.append({"note_id": node.id, "path": path})
    return sorted(gone, key=lambda g: g["path"])


def read_note(path: Path, shown: str) -> NoteFile:
    """The notes file at ``path`` (absolute; ``shown``: as the user named it), read as UTF-8.
    Raises :class:`NoteReadError` saying why it cannot be imported."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:  # the graph stores the path (the NOTE node's name and ``path``)
        raise NoteReadError(
            f"{shown}: the file name is not UTF-8 (written by a system of another encoding); rename it to import it"
        ) from None
    try:
        size = path.stat().st_size
        if size > NOTE_MAX_BYTES:
            raise NoteReadError(f"{shown}: {size} bytes, a notes file is at most {NOTE_MAX_BYTES} (split it); not read")
        # utf-8-sig: the byte order mark Windows editors write first is no text of the note. NFC: an
        # accent written as a combining mark (e + U+0301) is the same letter as é, and a name holding
        # it must not be cut in two (the mark is no word character); names and quotes are NFC.
        return NoteFile(path, shown, unicodedata.normalize("NFC", path.read_text(encoding="utf-8-sig")))
    except (OSError, UnicodeDecodeError) as exc:
        raise NoteReadError(f"{shown}: {exc}") from exc


def note_turns(note: NoteFile) -> list[SourceTurn]:
    """The file's paragraphs as turns (pure)."""
    paragraphs = [p.strip() for p in note.text.replace("\r\n", "\n").split("\n\n")]
    return [SourceTurn(f"{note.key}-p{n}", text) for n, text in enumerate(p for p in paragraphs if p)]


def note_name(shown: str) -> str:
    """A NOTE node's name: the path as the user gave it, or its last :data:`MAX_NAME_CHARS`
    characters ("…" and the file's name and nearest folders) when longer. Pure. A node's name is
    indexed (``nodes_label_name``), and PostgreSQL keeps an index entry on one page (2,704
    bytes): a path of up to PATH_MAX (4,096 bytes) failed its import there, not on SQLite
    (pghostile). The whole absolute path stays the node's ``path`` property."""
    return shown if len(shown) <= MAX_NAME_CHARS else "…" + shown[1 - MAX_NAME_CHARS:]


def note_node(note: NoteFile, *, content_hash: str | None) -> Node:
    """The NOTE anchor node; ``content_hash`` is set once the file's extraction is committed."""
    properties: dict[str, Any] = {"path": str(note.path), "chars": len(note.text)}
    if content_hash is not None:
        properties["contentHash"] = content_hash
    return Node(note.note_id, NOTE_LABEL, note_name(note.shown), properties)


@dataclass(frozen=True)
class NotesEnv:
    """What a notes import works with (the same stores and extractor as the cycle's extract phase)."""

    # The graph and chunk results, and the transaction a file's commit runs in.
    unit: UnitOfWork
    extractor: Extractor
    semantic_types: Sequence[str]
    budget_tokens: int | None
    concurrency: int
    retry_base_seconds: float
    retry_max_seconds: float
    now: datetime
    resolver: GraphResolver
    queue: LazyEdgeSink
    merges: MergeRecorder | None = None
    run_id: str | None = None


# The status of a file whose import began but did not reach its commit (the command was stopped).
NOT_IMPORTED = "not imported"


@dataclass(slots=True)
class NoteResult:
    """What importing one file did."""

    note_id: str
    path: str
    status: str  # imported | unchanged | failed | not imported (begun, stopped before its commit)
    chunks: int = 0
    chunks_reused: int = 0
    nodes_written: int = 0
    edges_written: int = 0
    merges_recorded: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The result as ``import-notes`` prints it (``--json`` too), its error's secrets masked: a
        failed chunk's error may quote the model server's answer, which may quote the key."""
        shown = {k: getattr(self, k) for k in ("note_id", "path", "status", "chunks", "chunks_reused", "nodes_written", "edges_written", "merges_recorded")}
        return {**shown, "error": redact(self.error)}


async def import_note(note: NoteFile, env: NotesEnv, result: NoteResult | None = None) -> NoteResult:
    """Extract one notes file and commit it (see the module docstring). ``result``, when given, is
    filled in place and returned: ``imported`` is set in the commit's own thread once it committed,
    so a caller cancelled while the commit ran (a command stopped by a signal) still counts it."""
    result = result or NoteResult(note.note_id, note.shown, NOT_IMPORTED)
    existing = await anyio.to_thread.run_sync(env.unit.graph.get_node, note.note_id)
    if existing is not None and existing.properties.get("contentHash") == note.content_hash:
        result.status = "unchanged"
        return result
    units = plan_units(note.key, note_turns(note), budget_tokens=env.budget_tokens)
    outcomes = await map_units(
        units, extractor=env.extractor, store=env.unit.chunks, semantic_types=env.semantic_types,
        limiter=anyio.CapacityLimiter(env.concurrency), now=env.now, run_id=env.run_id,
        retry_base_seconds=env.retry_base_seconds, retry_max_seconds=env.retry_max_seconds,
    )
    result.chunks = len(outcomes)
    result.chunks_reused = sum(1 for o in outcomes if o.status == "reused")
    failed = [o for o in outcomes if o.extraction is None]
    if failed:
        result.status = "failed"
        now_failed = [o for o in failed if o.status == "failed"]
        if now_failed:
            first = now_failed[0]
            result.error = f"{len(failed)}/{len(outcomes)} chunks failed; {first.unit.unit_id}: {first.error_kind}: {first.error}"
        else:  # no call was made: say so, not the old failure as if it happened again
            first = failed[0]
            result.error = (
                f"{len(failed)}/{len(outcomes)} chunks waiting to retry after {first.error_kind}: {first.error} "
                f"(next attempt after {first.retry_at}; after rem-cycle retry --session {note.key} the next "
                f"import-notes of it tries them at once)"
            )
        return result
    reduced = reduce_session(note.key, [o.extraction for o in outcomes if o.extraction is not None], anchor=note.note_id)
    # The anchor must exist when the commit plans its DISCUSSED_IN edges; its content hash is
    # only written inside the commit, so a failed commit leaves the file "not yet imported".
    pending = existing.properties.get("contentHash") if existing is not None else None
    await anyio.to_thread.run_sync(env.unit.graph.upsert_node, note_node(note, content_hash=pending))
    keep = [u.content_hash for u in units]
    referenced = {ref.target for ref in reduced.references}

    def on_commit() -> None:
        env.unit.graph.upsert_node(note_node(note, content_hash=note.content_hash))
        env.unit.chunks.prune_session(note.key, keep)
        env.unit.verdicts.settle(note.note_id)
        # A reference the file no longer writes goes, as its points do (only the file links rows to itself).
        env.unit.graph.delete_edges(
            (e.source, e.target, e.relationship) for e in env.unit.graph.edges_of(note.note_id)
            if e.relationship == REFERENCED_BY and e.target == note.note_id and e.source not in referenced
        )

    # forget --note takes its verdicts; a file has no turns: the auditor reads its nodes' evidence.
    await env.resolver.prepare(reduced.nodes, session=note.note_id, said=lambda: said_texts(reduced, {}))

    def commit() -> CommitStats:
        committed = commit_session(
            reduced, unit=env.unit, graph_index=None, on_commit=on_commit,
            # A file imported before may have queued these lines already: the new ones stand in for them.
            queue_append=env.queue.append if pending is None else partial(queue_superseding, env.queue),
            matcher=env.resolver, merges=env.merges,
            # A file has no turns: its points are observed when it is imported.
            observed_at={u.unit_id: env.now.isoformat(timespec="milliseconds").replace("+00:00", "Z") for u in units},
        )
        result.status = "imported"
        result.nodes_written, result.edges_written = committed.nodes_written, committed.edges_written
        result.merges_recorded = committed.merges_recorded
        return committed

    committed = await anyio.to_thread.run_sync(commit)
    if committed.nodes_removed or committed.nodes_folded:
        env.resolver.reset()  # its index still knows the removed or folded nodes
    return result
