"""An attack on the thirty-fourth and thirty-fifth sessions' code (audit35).

- An import line ending in ``\\r\\n`` (a GitHub issue's text, as SWE-bench's task descriptions
  quote it) hid its last name: ``from io import StringIO\\r`` imported nothing, so ``StringIO``
  said beside it was a CLASS of the project, while the same line ending in ``\\n`` made it the
  standard library's.
"""

from __future__ import annotations

import pytest

from pipelines.extract.heuristic import _standard_library_imports
from tests.test_extract import conversation, nodes_of


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_an_import_line_ending_in_crlf_imports_its_last_name(newline: str) -> None:
    """The task's code block ends its lines as the issue's author typed them; the rule reads the
    same imports whatever the line ending (the ``\\n`` case is a guard: it passes on both)."""
    block = newline.join(["```python", "from io import StringIO", "from datetime import timezone as tz", "buf = StringIO()", "```"])
    task = f"Fix the bug in `DateTimeField`.{newline}{newline}{block}{newline}"
    said = "So `StringIO` and `tz.utc()` are read; `DateTimeField` breaks."
    nodes = set(nodes_of(conversation(("user", task), ("assistant", said))))
    assert "CLASS:StringIO" not in nodes and "METHOD:tz.utc" not in nodes
    assert "CLASS:DateTimeField" in nodes
    imported = _standard_library_imports(conversation(("user", task)))
    assert imported.named == {"StringIO", "timezone", "tz"} and imported.bound == {"StringIO", "tz"}
