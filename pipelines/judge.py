"""The model's small jobs besides extraction (``REM_EXTRACTOR=openai`` only): naming a community
and settling an ambiguous identity. Both go through the openai extractor's transport (retries,
JSON mode), and both fail soft: an error or an unusable answer means "no label" / "create".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pipelines.extract.model import ExtractionFailure
from pipelines.identity import QUOTES_PER_NODE, AuditUnanswered, NodeRef, shown_aliases
from store.library_log import get_logger

if TYPE_CHECKING:  # the transport (httpx) is imported where an extractor is made, not by every command
    from pipelines.extract.llm import OpenAIExtractor

log = get_logger(__name__)

LABEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string"}},
    "required": ["label"],
}
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["link", "create"]}, "target": {"type": "string"}},
    "required": ["verdict"],
}
NAMER_PROMPT = (
    "You name clusters of a knowledge graph built from an AI agent's working sessions. Given the "
    "members of one cluster (most connected first), answer with a short label (2 to 5 words) for "
    'what they have in common, as JSON: {"label": "..."}.'
)
AUDITOR_PROMPT = (
    "You decide whether a newly extracted entity is the same thing as one of the existing entities "
    "of a knowledge graph. Same thing = the same class, file, issue, person, concept … written "
    "differently (spelling, abbreviation, paraphrase). Similar but distinct things are NOT the same. "
    "Each entity comes with quotes of the text where it is said. When the names alone do not settle "
    "it, decide from the quotes: a shorter name (a first name, a bare word) is the same entity as a "
    "longer one only if the quotes show the same one (the same person, file, thing) — a shared word "
    "is not enough. "
    'Answer as JSON: {"verdict": "link", "target": "<existing id>"} or {"verdict": "create"}.'
)


def _describe(node: NodeRef, quotes: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    return {
        "id": node.id, "type": node.type, "name": node.name, "aliases": shown_aliases(node),
        "quotes": list(quotes.get(node.id, ())[:QUOTES_PER_NODE]),
    }


class ModelJudge:
    """Community namer and identity auditor over an open :class:`OpenAIExtractor`."""

    def __init__(self, extractor: OpenAIExtractor) -> None:
        self.extractor = extractor

    async def _ask(self, system: str, payload: Any, *, schema_name: str, schema: dict[str, Any]) -> Any:
        """The model's parsed answer; ``None`` when it was not JSON. :class:`ExtractionFailure`
        when the call failed."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": json.dumps(payload, ensure_ascii=False)}]
        try:
            return await self.extractor.complete_json(messages, schema_name=schema_name, schema=schema)
        except ValueError as exc:
            log.warning("model answer is no JSON; falling back", job=schema_name, error=str(exc)[:200])
            return None

    async def name_community(self, names: Sequence[str]) -> str | None:
        """A short label for a community whose member names are given (most connected first)."""
        try:
            answer = await self._ask(NAMER_PROMPT, {"members": list(names[:30])}, schema_name="community_label", schema=LABEL_SCHEMA)
        except ExtractionFailure as exc:
            log.warning("model call failed; falling back", job="community_label", error=str(exc)[:200])
            return None
        label = answer.get("label") if isinstance(answer, dict) else None
        return label if isinstance(label, str) and label.strip() else None

    async def audit_identity(
        self, node: NodeRef, options: Sequence[NodeRef], *, quotes: Mapping[str, Sequence[str]] = {},
    ) -> str | None:
        """The id of the existing node ``node`` is, or ``None`` (a new node); each node is shown
        with its ``quotes`` (by node id, already bounded: :func:`pipelines.identity.node_quotes`;
        none when missing). :class:`AuditUnanswered` when the call failed or its answer is no
        verdict (no JSON, neither "link" to an id nor "create"): since a judge's "a new node"
        settles an ``extension-asked`` pair, a junk answer must not stand for one (audit31). The
        caller checks that a linked id is one of ``options`` (:func:`pipelines.identity.offered`)."""
        payload = {"new": _describe(node, quotes), "existing": [_describe(o, quotes) for o in options]}
        try:
            answer = await self._ask(AUDITOR_PROMPT, payload, schema_name="identity_verdict", schema=VERDICT_SCHEMA)
        except ExtractionFailure as exc:
            log.warning("model call failed; the candidate stays one", job="identity_verdict", error=str(exc)[:200])
            raise AuditUnanswered(str(exc)) from exc
        verdict = answer.get("verdict") if isinstance(answer, dict) else None
        if verdict == "create":
            return None
        target = answer.get("target") if verdict == "link" else None
        if not isinstance(target, str):
            log.warning("model answer is no identity verdict; the candidate stays one", job="identity_verdict")
            raise AuditUnanswered("the answer is no identity verdict")
        return target
