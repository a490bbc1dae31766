"""The ``communities`` table: the graph's detected communities with their stable ids and labels.

One row per community of the latest detection. ``members`` is the JSON list of member node ids
(sorted); ``member_hash`` the sha256 of that list, so an unchanged community is recognised without
comparing lists; ``label_source`` says whether the label came from the model or is the default.
``community_names`` keeps each label the model gave, by member hash, as it is given (a worker
killed while naming does not pay for those again).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from store.db import Database, in_batches
from store.graph import dumps, utc_now


@dataclass(frozen=True, slots=True)
class CommunityRecord:
    """One community as stored (and as exported)."""

    id: str
    label: str
    members: tuple[str, ...]
    member_hash: str
    label_source: str = "default"


class CommunityStore:
    """Typed access to ``communities``."""

    def __init__(self, db: Database, *, clock: Callable[[], str] = utc_now) -> None:
        self.db = db
        self.clock = clock

    def all(self) -> list[CommunityRecord]:
        """Every stored community, largest first (then by id)."""
        rows = self.db.query(
            "SELECT id, label, label_source, members, member_hash FROM communities ORDER BY size DESC, id"
        )
        return [
            CommunityRecord(
                id=r["id"],
                label=r["label"],
                members=tuple(json.loads(r["members"])),
                member_hash=r["member_hash"],
                label_source=r["label_source"],
            )
            for r in rows
        ]

    def count(self) -> int:
        """How many communities are stored."""
        return int(self.db.query("SELECT COUNT(*) FROM communities")[0][0])

    def replace_all(self, communities: Iterable[CommunityRecord]) -> dict[str, int]:
        """Make the table hold exactly ``communities`` in one transaction. Rows whose content is
        unchanged are not touched (``updated_at`` included). Returns written/unchanged/removed counts."""
        now = self.clock()
        records = list(communities)
        rows = [
            (c.id, c.label, c.label_source, dumps(list(c.members)), c.member_hash, len(c.members), now, now)
            for c in records
        ]
        with self.db.transaction() as conn:
            keep = {c.id for c in records}
            stale = [r[0] for r in conn.execute("SELECT id FROM communities").fetchall() if r[0] not in keep]
            conn.executemany("DELETE FROM communities WHERE id = ?", [(i,) for i in stale])
            # The labels given for member sets no longer stored (bounded: the communities, plus
            # those named by a finalize that did not end).
            hashes = {c.member_hash for c in records}
            gone = [r[0] for r in conn.execute("SELECT member_hash FROM community_names").fetchall() if r[0] not in hashes]
            conn.executemany("DELETE FROM community_names WHERE member_hash = ?", [(h,) for h in gone])
            written = conn.executemany(
                "INSERT INTO communities(id, label, label_source, members, member_hash, size, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET label = excluded.label, "
                "label_source = excluded.label_source, members = excluded.members, "
                "member_hash = excluded.member_hash, size = excluded.size, updated_at = excluded.updated_at "
                "WHERE communities.label != excluded.label "
                "OR communities.label_source != excluded.label_source "
                "OR communities.member_hash != excluded.member_hash",
                rows,
            ).rowcount
        return {"written": written, "unchanged": len(rows) - written, "removed": len(stale)}

    def given_labels(self, hashes: Iterable[str]) -> dict[str, str]:
        """The labels the model gave for these member sets (by ``member_hash``), where it gave one."""
        found: dict[str, str] = {}
        for batch, marks in in_batches(hashes):
            rows = self.db.query(f"SELECT member_hash, label FROM community_names WHERE member_hash IN ({marks})", batch)
            found.update({r[0]: r[1] for r in rows})
        return found

    def keep_label(self, member_hash: str, label: str) -> None:
        """Keep the label the model just gave for a member set, in its own transaction."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO community_names(member_hash, label, named_at) VALUES (?,?,?) "
                "ON CONFLICT(member_hash) DO UPDATE SET label = excluded.label, named_at = excluded.named_at",
                (member_hash, label, self.clock()),
            )

    def holding(self, node_ids: Iterable[str]) -> list[CommunityRecord]:
        """The stored communities that have one of ``node_ids`` as a member. ``members`` has no
        index: this reads the communities table (one row per community of the latest detection,
        not the graph's history) once per batch of ids."""
        found: dict[str, CommunityRecord] = {}
        for batch, _ in in_batches(sorted(set(node_ids))):
            needles = [_like(json.dumps(node_id)) for node_id in batch]
            where = " OR ".join("members LIKE ? ESCAPE '!'" for _ in needles)
            for r in self.db.query(f"SELECT id, label, label_source, members, member_hash FROM communities WHERE {where}", needles):
                found[r["id"]] = CommunityRecord(id=r["id"], label=r["label"], members=tuple(json.loads(r["members"])),
                                                 member_hash=r["member_hash"], label_source=r["label_source"])
        return [found[key] for key in sorted(found)]

    def rewrite(self, old: CommunityRecord, new: CommunityRecord | None) -> None:
        """Store ``new`` in place of ``old`` (same id), or delete ``old`` when ``new`` is None; the
        label the model gave ``old``'s member set goes either way (inside the caller's transaction)."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM community_names WHERE member_hash = ?", (old.member_hash,))
            if new is None:
                conn.execute("DELETE FROM communities WHERE id = ?", (old.id,))
                return
            conn.execute(
                "UPDATE communities SET label = ?, label_source = ?, members = ?, member_hash = ?, size = ?, updated_at = ? WHERE id = ?",
                (new.label, new.label_source, dumps(list(new.members)), new.member_hash, len(new.members), self.clock(), old.id),
            )


def _like(text: str) -> str:
    """A LIKE pattern (escape ``!``) that matches ``text`` anywhere."""
    return "%" + text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"

