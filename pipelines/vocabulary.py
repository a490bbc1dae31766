"""Names shared by the knowledge-quality pipelines (export, communities, identity, notes): which
labels are provenance anchors rather than knowledge, and which relationships are provenance."""

from __future__ import annotations

from store.provenance import DISCUSSED_IN, MENTIONED_IN

MEMORY_LABEL = "MEMORY"
SESSION_LABEL = "SESSION"
# An imported notes file: the provenance anchor of what ``import-notes`` extracted from it.
NOTE_LABEL = "NOTE"
ANCHOR_LABELS: frozenset[str] = frozenset({MEMORY_LABEL, SESSION_LABEL, NOTE_LABEL})

ORIGINATES_IN = "ORIGINATES_IN"
REFERENCED_BY = "REFERENCED_BY"
PROVENANCE_RELATIONSHIPS: frozenset[str] = frozenset({ORIGINATES_IN, MENTIONED_IN, DISCUSSED_IN, REFERENCED_BY})


def is_semantic_edge(relationship: str, source_label: str | None, target_label: str | None) -> bool:
    """``True`` for an edge between two knowledge nodes (not provenance, no anchor endpoint)."""
    return (
        relationship not in PROVENANCE_RELATIONSHIPS
        and source_label is not None
        and target_label is not None
        and source_label not in ANCHOR_LABELS
        and target_label not in ANCHOR_LABELS
    )
