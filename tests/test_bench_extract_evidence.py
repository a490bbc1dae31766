"""The seventh round's evidence features (bench/extract_evidence.py) on real-looking agent turns."""

from __future__ import annotations

from bench.extract_evidence import unit_evidence
from pipelines.extract.message_parts import agent_zones
from pipelines.extract.model import UnitTurn, WorkUnit, unit_content_hash


def conversation(*turns: tuple[str, str]) -> WorkUnit:
    unit_turns = tuple(UnitTurn(n, f"m{n}", text, role) for n, (role, text) in enumerate(turns, start=1))
    return WorkUnit("s:chunk:0", "s", 0, unit_turns, unit_content_hash("s", unit_turns))


def kind_of(text: str, word: str) -> str:
    at = text.index(word)
    return next((kind for start, end, kind in agent_zones(text) if start <= at < end), "prose")


def test_a_mini_swe_agent_message_is_prose_a_command_line_and_a_heredoc_edit() -> None:
    text = ("THOUGHT: `Query.get_group_by` drops the ordering.\n\n```bash\ngrep -n \"def set_group_by\" django/db/models/sql/query.py"
            " && cat <<'EOF' > reproduce_issue.py\nfrom django.db.models import Count\nprint(Foo.objects.annotate(Count('pk')).ordered)\nEOF\n```")
    assert kind_of(text, "Query.get_group_by") == "prose"
    assert kind_of(text, "set_group_by") == "command"
    assert kind_of(text, "Foo.objects") == "edit"


def test_an_aider_search_replace_block_splits_changed_lines_from_context() -> None:
    text = ("I'll call `self.coder.event()` in `run`.\n\naider/commands.py\n```python\n<<<<<<< SEARCH\n    def run(self, inp):\n"
            "        res = self.matching_commands(inp)\n=======\n    def run(self, inp):\n        self.coder.event(\"command\")\n"
            "        res = self.matching_commands(inp)\n>>>>>>> REPLACE\n```\n\n```python\nprint(PromptSession)\n```")
    assert kind_of(text, "self.matching_commands") == "edit-context"
    assert kind_of(text, 'self.coder.event("') == "edit"
    assert kind_of(text, "PromptSession") == "quote"
    # A whole file written out under its name (aider's whole format) is an edit too.
    whole = "Here is the new file:\n\naider/spinner.py\n```python\nclass Spinner:\n    pass\n```"
    assert kind_of(whole, "Spinner:") == "edit"


def test_unit_evidence_counts_the_names_of_a_turn_and_where_an_import_comes_from() -> None:
    listing = "\n".join(f"class Model{n}Admin(ModelAdmin): pass" for n in range(30))
    found = unit_evidence(conversation(
        ("user", "Fix `ChatChunks` in aider/coders/base_coder.py"),
        ("assistant", "```python\nfrom prompt_toolkit import PromptSession\nfrom aider.io import InputOutput\n```"),
        ("tool", listing),
    ))
    assert found["CLASS:ChatChunks"].kinds == {"user"}
    assert found["CLASS:Model7Admin"].kinds == {"tool"} and found["CLASS:Model7Admin"].salience > 30
    assert found["CLASS:PromptSession"].library_import and not found["CLASS:InputOutput"].library_import
