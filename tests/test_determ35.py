"""Determinism and redaction defects the thirty-fourth session left alone (determ35).

- The offline extractor's Python names (builtins, ``types``' classes, the built-in types'
  methods) were read from the running Python: a worker on 3.11 made a CLASS of 3.13's
  ``PythonFinalizationError``, one on 3.13 none, under one extractor version. They are frozen in
  the project now (:mod:`pipelines.python_names`), like the standard library's modules.
- An import shown in ``cat -n``'s gutter (a number and a tab: SWE-agent's file views) was not read
  as an import: ``from io import StringIO`` there left ``StringIO`` a node.
- An import's name before its ``as`` was counted as bound: ``from datetime import timezone as
  dt_timezone`` made ``timezone.get_current_timezone_name()`` (Django's module) the standard
  library's, and no node.
- A secret's head after a URL's percent escape (``%20sk-…``) was kept unmasked.
"""

from __future__ import annotations

import builtins
import types

import pytest

from config.redact import MASK, redact
from pipelines.python_names import BUILTIN_NAMES, BUILTIN_TYPE_METHODS, TYPES_CLASSES
from tests.test_extract import conversation, nodes_of

KEY = "sk-abcdef1234567890XYZ"


def coding_nodes(*turns: tuple[str, str]) -> set[str]:
    """The nodes of a coding chunk: a task, then ``turns``."""
    return set(nodes_of(conversation(("user", "Fix the `TruncDate` timezone bug in `DateTimeField`."), *turns)))


@pytest.mark.parametrize("name", ["PythonFinalizationError", "CapsuleType"])
def test_a_later_pythons_own_class_is_no_node_on_any_python(name: str) -> None:
    """3.13 added these (a builtin, a ``types`` class): read from a 3.11 worker's ``dir()``, each
    was a CLASS of the project."""
    said = f"The worker raised `{name}` while shutting down; `{name}` comes from Python itself."
    assert not any(node.endswith(f":{name}") for node in coding_nodes(("assistant", said)))


@pytest.mark.parametrize(("method", "kept"), [("from_number", False), ("scaled_value", True)])
def test_a_later_pythons_method_on_a_variable_is_the_language(method: str, kept: bool) -> None:
    """``float.from_number`` is 3.14's: called on a variable it is the language's method, as
    ``price.items()`` is; the project's own method on the same variable stays a node."""
    task = f"Fix it: `price.{method}()` fails in `DateTimeField`."
    edit = f"```python\nx = price.{method}(3)\n```"
    nodes = set(nodes_of(conversation(("user", task), ("assistant", edit), ("assistant", f"So `price.{method}()` is fixed."))))
    assert (f"METHOD:price.{method}" in nodes) is kept


def test_the_frozen_lists_hold_the_running_pythons_names() -> None:
    """A newer Python's new names show here, to be added with a new extractor version
    (``python -m pipelines.python_names`` prints them)."""
    assert set(dir(builtins)) <= BUILTIN_NAMES
    assert {n for n in dir(types) if n[:1].isupper()} <= TYPES_CLASSES
    assert {n for kind in (dict, list, str, set, bytes, tuple, int, float) for n in dir(kind) if not n.startswith("_")} <= BUILTIN_TYPE_METHODS
    assert {"PythonFinalizationError", "_IncompleteInputError"} <= BUILTIN_NAMES and "CapsuleType" in TYPES_CLASSES


@pytest.mark.parametrize("gutter", ["     1\t", "    12\t", "  3│", "  3: "])
def test_an_import_in_a_numbered_views_gutter_is_read(gutter: str) -> None:
    """``cat -n`` writes a number and a tab (SWE-agent's file views): the import after it is one."""
    view = f"{gutter}from io import StringIO\n{gutter[:-1]}2\tbuf = StringIO()"
    said = "The test writes into a `StringIO` buffer."
    assert "CLASS:StringIO" not in coding_nodes(("tool", view), ("assistant", said))


def test_a_name_imported_under_an_alias_binds_only_the_alias() -> None:
    """``timezone as dt_timezone`` binds no ``timezone``: ``timezone.get_current_timezone_name()``
    beside it is Django's ``django.utils.timezone``, the project's, and stays a node."""
    view = "```python\nfrom datetime import datetime, timezone as dt_timezone\nfrom django.utils import timezone\n```"
    said = "`TruncDate.as_sql` calls `timezone.get_current_timezone_name()` and ignores `self.tzinfo`."
    fix = "Replace `timezone.get_current_timezone_name()` with `self.get_tzname()`."
    assert "METHOD:timezone.get_current_timezone_name" in coding_nodes(("assistant", view), ("assistant", said), ("assistant", fix))


def test_the_alias_itself_is_still_the_standard_librarys() -> None:
    """What the import does bind is still the language's: ``dt_timezone.utc`` is no node."""
    edit = "```python\nfrom datetime import timezone as dt_timezone\nstamp = dt_timezone.utc\n```"
    said = "Now `dt_timezone.utc()` is the zone, and `dt_timezone.utc()` is cheap."
    assert "METHOD:dt_timezone.utc" not in coding_nodes(("assistant", edit), ("assistant", said))


@pytest.mark.parametrize(("text", "shown"), [
    ("POST /v1?key=a&note=bad%20sk-abcdef12…", f"POST /v1?key=a&note=bad%20{MASK}…"),
    ("form: auth%3Dsk-abcdef1234", f"form: auth%3D{MASK}"),
    ("value %22sk-abcdef1234567890%22 refused", f"value %22{MASK}%22 refused"),
])
def test_a_head_after_a_url_escape_is_masked(text: str, shown: str) -> None:
    """The escape's last hex digit (``0`` of ``%20``) stood before the head, which was taken for
    the end of a longer token and kept."""
    assert redact(text, also=[KEY]) == shown


def test_another_token_after_a_url_escape_is_kept() -> None:
    """A longer token that only begins like the secret is another one, after an escape too."""
    text = "build 100%20sk-abcdef12zz is another key"
    assert redact(text, also=[KEY]) == text
