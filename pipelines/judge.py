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


def verdict_schema(options: Sequence[NodeRef]) -> dict[str, Any]:
    """The JSON schema of the answer to one identity question: a verdict, and a target that can
    only be one of the ``options``' ids. A server that decodes to the schema (llama.cpp's grammar,
    vLLM, structured outputs) then cannot name an id it was not offered, nor run on inside the
    string until the output limit — what a small model did with a free string (bench/RESULTS.md
    "A real model on this machine": 104 of 1,222 questions unanswered so)."""
    return {
        "type": "object",
        "properties": {"verdict": {"type": "string", "enum": ["link", "create"]},
                       "target": {"type": "string", "enum": [o.id for o in options]}},
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


# The judge's check (judgecheck37): two questions of the auditor's own kind whose answers no
# reading model can miss — a first name whose quote says the full name (the same person) and the
# same first name whose quote says it is someone else. A model that answers either wrong answers
# by rote (always "a new node", always a link): measured on a real small model, every one of 846
# answers was "a new node", and as the judge it took true pairs off the review list
# (bench/RESULTS.md "A real model on this machine").
_HOPPER = NodeRef("PERSON:grace hopper", "PERSON", "Grace Hopper")
_KELLY = NodeRef("PERSON:grace kelly", "PERSON", "Grace Kelly")
_GRACE = NodeRef("PERSON:grace", "PERSON", "Grace")
_KNOWN = {
    _HOPPER.id: ("Grace Hopper wrote the first compiler, A-0, in 1952.",),
    _KELLY.id: ("Grace Kelly starred in Rear Window in 1954.",),
}
JUDGE_CHECK: tuple[tuple[Mapping[str, Sequence[str]], str | None], ...] = (
    ({**_KNOWN, _GRACE.id: ("Grace Hopper found a moth in a relay of the Mark II and taped it into the log.",)}, _HOPPER.id),
    ({**_KNOWN, _GRACE.id: ("My sister Grace starts at the bakery on Monday; she turned nineteen in May.",)}, None),
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
            answer = await self._ask(AUDITOR_PROMPT, payload, schema_name="identity_verdict", schema=verdict_schema(options))
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

    async def failed_check(self) -> str | None:
        """Why the judge cannot be trusted with identity (it answered a question of
        :data:`JUDGE_CHECK` wrong), or ``None`` when it answered both right. Two calls through
        :meth:`audit_identity` — the same prompt, schema and answer handling — whose
        :class:`AuditUnanswered` (a failed call, no verdict) is raised: no answer, no finding."""
        for quotes, right in JUDGE_CHECK:
            answer = await self.audit_identity(_GRACE, (_HOPPER, _KELLY), quotes=quotes)
            if answer != right:
                said = "a new node" if answer is None else f"a link to {answer}"
                return (f"it answered {said} where the quotes say {'the same person' if right else 'someone else'} "
                        f"(\"{quotes[_GRACE.id][0]}\")")
        return None
