"""The offline, deterministic extractor (the default): patterns instead of a model.

It finds code identifiers (CamelCase classes, ``func()`` methods, ``test_*`` tests), file paths,
URLs and issue references (``#123``) in every turn, and in what people and the assistant wrote
(never in tool output, in documents a command pasted into a message, nor in documents the agent
writes out under their file name) the names of people, places, works and organisations: speakers
whose role is a person's name become PERSON nodes, capitalised names inside sentences become nodes once greetings,
interjections, contractions and dates are stripped off them ("Hey John" → John, "Last Friday" →
nothing), and a word glued before a speaker's name is dropped ("To Monica" → Monica). The
scaffolding of a standalone script (``django.setup()``, ``TestCase``, ``ReproduceAppConfig``) is no
node, nor is a name the chunk imports from the standard library, nor a sed substitution's pattern.
In a coding session a prose name or a call on a local variable shown in one turn only makes no
node, nor does a name shown once in a turn of more than 20 names that no edit of the agent writes
(measured: mostly noise). The entities of one turn are linked with ``RELATES_TO``. Evidence is always the matched
text (or, for a speaker, the turn's role), so everything it says is grounded. Explicit
``memory:``/``session:`` references are found for every extractor by
:func:`pipelines.extract.model.find_references`.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from collections import Counter
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import combinations
from typing import Any

from pipelines.extract.message_parts import EDIT_KINDS, agent_zones, zone_at
from pipelines.extract.model import ExtractorReply, UnitTurn, WorkUnit, clean_text, semantic_node_id
from pipelines.identity import normal_path
from pipelines.python_names import BUILTIN_NAMES, BUILTIN_TYPE_METHODS, STANDARD_LIBRARY_MODULES, TYPES_CLASSES

HEURISTIC_VERSION = 15
# Entities of one turn linked pairwise: the first few only, so a long tool dump does not turn
# into a clique of hundreds of edges.
MAX_LINKED_PER_TURN = 6
DESCRIPTION_CHARS = 240
# A name seen only in tool output (file listings, code views, logs) must be seen in this many tool
# turns of the unit to become a node. Measured on 100 labelled tool-only nodes of real coding-agent
# sessions (bench/RESULTS.md, tuning split): 4 % are useful; kept from 2 tool turns on, precision
# 0.2 with half the useful ones; from 3 on, 0.5 with a quarter; from 6 on, none is left. On the
# labelled node samples of both old splits (issue 11, second round), going from 3 to 4 dropped 9
# noise nodes and 2 useful ones, from 4 to 5 another 3 noise and 1 useful, beyond 5 nothing more.
#
# Repetition alone is not enough (issue 11, fourth round): boilerplate repeats too (the same page
# header in every answer, the same listing after every command). A name seen only in tool output
# must also be *defined* there (``class OrderedSet``, ``def _fetch_all``): the agent has looked at
# the code of it. A file, URL or issue seen only in tool output is therefore never a node.
TOOL_ONLY_MIN_TURNS = 5
TOOL_ROLES = frozenset({"tool", "function", "ipython"})
# The agent's own roles: what it writes is its own (its `<source>` edit blocks, the HTML it writes),
# never text pasted into its message.
_AGENT_ROLES = frozenset({"assistant", "ai", "bot", "model", "agent"})
# Roles that are no person's name.
_SYSTEM_ROLES = frozenset({"user", "assistant", "system", "tool", "function", "ipython", "human", "ai", "bot", "model", "developer", "agent"})

_URL = re.compile(r"https?://[^\s`'\"<>()\[\]{}\0]+")
# Hidden markup is no text: an HTML comment (the instructions of an issue template, which nobody
# reads in the rendered issue), a doctype or a processing instruction (the XHTML doctype a fetched
# page repeats: `W3C`, the DTD's URL).
_HIDDEN_MARKUP = re.compile(r"<!--.*?-->|<![A-Za-z][^<>]*>|<\?[A-Za-z][^<>]*\?>", re.S)
# A block on lines of its own, `<doc>` … `</doc>`. The same tag used for two blocks or more in one
# message is a list of pasted documents (aider's `/help` pastes pages of its documentation under
# the question as `<doc>` blocks; retrieval contexts look alike): tool output, not the person's words.
_BLOCK = re.compile(r"^[ \t]*<([A-Za-z][\w:-]*)(?:[ \t][^<>\n]*)?>[ \t]*\n.*?^[ \t]*</\1>[ \t]*$", re.S | re.M)
# A document the agent writes out under its file name (aider's whole-file and search/replace
# blocks: `HISTORY.md` on a line, then a fenced block): the names in it are the document's text —
# its links and product names — not what the agent discusses. Read like tool output.
_DOCUMENT_BLOCK = re.compile(
    r"^[ \t]*[\w./-]+\.(?:md|markdown|rst|txt|adoc|html?)[ \t]*\n[ \t]*```[^\n]*\n.*?(?:^[ \t]*```|\Z)", re.S | re.M | re.I
)
_PATH = re.compile(r"(?<![\w/.@:-])(?:[\w.-]+/)+[\w.-]*[A-Za-z0-9_-]\.[A-Za-z][A-Za-z0-9]{0,7}\b")
# A path segment of three or more dots: an elision (`.../pkg/__init__.py`), not a directory.
_ELIDED = re.compile(r"(?:^|/)\.{3,}/")
# A quoted sed substitution, ``sed -i 's/self.x.add(/self.x.update(/'``: its ``s/`` is the command,
# not a folder. Issue 11, fourteenth round: 31 of mini-swe-agent's 12,639 nodes, every labelled one
# noise.
_SED_SUBSTITUTION = re.compile(r"""['"`]s/""")
_BARE_FILE = re.compile(
    r"(?<![\w/.-])[\w-]+\.(?:py|pyi|ts|tsx|js|jsx|mjs|md|json|jsonl|ya?ml|toml|sql|go|rs|java|kt|rb|c|h|cc|cpp|hpp|sh|ini|cfg|lock)\b"
)
_METHOD = re.compile(r"(?<![\w.])((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*)\(\)")
_TEST = re.compile(r"(?<![\w.])test_[A-Za-z0-9_]+\b")
_CLASS = re.compile(r"(?<![\w.])[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b")
# "McCartney", "DeMarco", "LeBlanc": CamelCase that is a surname, not a class.
_SURNAME = re.compile(r"(?:Mc|Mac|De|Di|Da|Du|La|Le|Van|Von|O)[A-Z][a-z]{2,}")
_ISSUE = re.compile(r"(?<![\w&#/])#(\d{1,7})\b")
# A colour written in decimal digits is no issue: `color="#555"`, `stroke:#333`, a quoted "#333333".
# Its key begins a word or a camelCase part (`fillColor`, `bg_color`; not `Backfill`, `subgraph`,
# `cfg`), and it has as many digits as a CSS colour (`#RGB`, `#RGBA`, `#RRGGBB`; audit33).
_COLOUR_LEAD = re.compile(
    r"""(?:(?<![A-Za-z])(?i:colou?r|fill|stroke|background|bg|fg)|(?<=[a-z])(?:Colou?r|Fill|Stroke|Background|Bg|Fg))"""
    r"""[\w-]*["']?[ \t]*[=:][ \t]*["']?$"""
)
_COLOUR_DIGITS = frozenset({3, 4, 6})
# Python's own names: builtins, and the types module's (`NoneType`); the project's lists, the same
# on every Python (pipelines/python_names.py, determ35).
_BUILTINS = BUILTIN_NAMES | TYPES_CLASSES
# Methods of Python's built-in types and file objects, and the built-in functions: called on a
# variable (`seen.items()`, `f.readlines()`, `a.all()`) they are the language, not the project.
_BUILTIN_METHODS = BUILTIN_TYPE_METHODS | frozenset("read readline readlines write writelines close seek tell flush".split()) | frozenset(
    name for name in BUILTIN_NAMES if name.islower() and not name.startswith("_")
)
# A method of the class at hand (`self.add()`) is the project's, whatever its name.
_OWN_RECEIVERS = frozenset({"self", "cls"})
# A name written like a test but set to a value (`test_cmd: []` in a settings dump, `test_file =
# Path(...)`): a setting or a variable, not a test.
_TEST_VALUE = re.compile(r"[ \t]*(?::[ \t]*(?:[\[{'\"\d-]|True|False|None)|=(?!=))")
# A throwaway instance of a script: a short name numbered (`q1`, `qs2`, `df2`), whose methods are
# the library's (`q1.deconstruct()`), not the project's.
_NUMBERED_RECEIVER = re.compile(r"[a-z]{1,3}\d+")
# The standard library's test doubles (`unittest.mock`): their API on any mock
# (`mock_prompt.assert_called_once()`, `m.reset_mock()`), their classes, and the stand-ins a test
# names after what it patches (`patch(...) as MockRepoMap`) are the test's scaffolding, not the
# project (issue 11, sixth round: 7 labelled noise nodes of the tuning material, no useful one).
_MOCK_API = frozenset(
    "assert_called assert_called_once assert_called_with assert_called_once_with assert_any_call "
    "assert_has_calls assert_not_called assert_awaited assert_awaited_once assert_awaited_with "
    "assert_awaited_once_with assert_any_await assert_has_awaits assert_not_awaited reset_mock "
    "Mock MagicMock AsyncMock NonCallableMock NonCallableMagicMock PropertyMock".split()
)
_MOCK_STAND_IN = re.compile(r"Mock[A-Z]\w*")
# What makes a standalone script run rather than what it tests: Django's set-up calls, the test
# framework's base class, and the app a reproduction script declares (`class ReproduceAppConfig`,
# any name ending in `AppConfig`). Issue 11, eighth round: 7 labelled noise nodes of the tuning
# material, 1 useful (`django.setup` in one session).
_SCRIPT_SCAFFOLDING = frozenset({"django.setup", "settings.configure", "TestCase"})
# A turn that yields more names than this is a dump or a long answer (a whole document rewritten,
# a long chain of reasoning, a file's imports): a name it shows once, and that no edit of the agent
# writes, is incidental (issue 11, seventh round: on the tuning material 19 labelled noise nodes
# removed for 3 useful ones; from 15 names on 25 for 6, the step from 20 to 15 only 2 to 1).
BUSY_TURN_NAMES = 20
# Prose names: said once in a coding session they are mostly a heading or a phrase of a dump
# (`Config File`, `Warm Up`, `Change the CharField`), see :func:`_said_once_in_passing`.
_PROSE_TYPES = frozenset({"CONCEPT", "PERSON", "PLACE", "ORGANIZATION", "WORK"})
# ``from pkg.mod import A, B as C`` on one line (a diff's +/- or a numbered view's gutter before it:
# `12│`, `12:`, or `cat -n`'s number and tab, as SWE-agent's file views show it, determ35);
# the names it brings in, up to a ``;`` that ends the statement (audit33) or the line's end, a
# ``\r\n`` one too (a GitHub issue's text: its ``\r`` hid the last name, audit35).
_FROM_IMPORT = re.compile(r"^[ \t+-]*(?:\d+(?:[│|:][ \t]*|\t))?from[ \t]+([A-Za-z_][\w.]*)[ \t]+import[ \t]+\(?([^\r\n#;]*)", re.M)
# The names an import line says, aliases included (`PurePath` and `PP` of `PurePath as PP`) …
_IMPORTED_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?=[ \t]*(?:,|\)|$|[ \t]as\b))|(?<=\bas[ \t])[A-Za-z_]\w*")
# … and those it binds: a name, or the alias after its ``as`` — ``timezone as dt_timezone`` binds
# no ``timezone``, and ``timezone.now()`` beside it is another module's (determ35).
_BOUND_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?=[ \t]*(?:,|\)|$))")
# A Python file's path, tried only where a run of path characters begins: one pass over the text.
_PYTHON_FILE = re.compile(r"(?<![\w./\\-])[\w./-]*\.py(?![\w.-])")
# Where a module shadows the standard library's of its name: at the top of the project's tree
# (`./secrets.py`, a git diff's `a/secrets.py`, `secrets/__init__.py`), or of its `src` layout.
# Deeper (`sphinx/builders/gettext.py`, `src/_pytest/pathlib.py`) it is a package's module, and
# `from gettext import …` is the standard library's still.
_TOP_LEVEL_FOLDERS = frozenset({"", "src"})
# A keyword that defines the name written right after it (`class X`, `def x`, `function x`).
_DEFINITION_LEAD = re.compile(r"\b(?:class|def|function|func|fn|interface|struct|type)[ \t]+$")
# Every script has a `main()`: alone it is no function in particular (`cli.main()` is one).
_GENERIC_CALLS = frozenset({"main"})
# Names of programming languages and databases written CamelCase (`JavaScript`, `MySQL`): the
# language, not a class of the project.
_LANGUAGE_NAMES = frozenset(
    "JavaScript TypeScript CoffeeScript ActionScript PostScript PowerShell GraphQL MySQL PostgreSQL MariaDB "
    "MongoDB NoSQL".split()
)
# A temporary file: under the system's temporary folders, or named like Python's `tempfile`
# makes it (`tmplacu1lv7.png`); it is gone after the session.
_TEMPORARY_PATH = re.compile(r"(?:^|/)(?:private/)?var/folders/|(?:^|/)tmp[a-z0-9_]{6,8}(?:\.[A-Za-z0-9]+)?$")
_PLACEHOLDERS = frozenset(
    "filename newfile foo bar baz qux quux spam eggs something somethingelse myfile my_file mymodule "
    "my_module yourfile your_file xyz".split()
)
# A test named by its kind, in an explanation of how tests are named ("a method `test_method`"),
# as the whole name (`test_case.test_reproduction()` calls a test on a variable so named).
_TEST_PLACEHOLDERS = frozenset(
    "test_method test_methods test_name test_func test_function test_case test_something test_example".split()
)
# File names every project or package has: alone, without their directory, they name no file in
# particular (a repository has dozens of `__init__.py`; the agent's instructions name
# `pyproject.toml` in every session). With a directory they do (`django/forms/__init__.py`).
_CONVENTIONAL_FILES = frozenset(
    "__init__.py __main__.py setup.py setup.cfg pyproject.toml tox.ini conftest.py requirements.txt "
    "package.json tsconfig.json makefile readme.md changelog.md contributing.md code_of_conduct.md "
    "license.md utils.py util.py helpers.py common.py constants.py config.py settings.py models.py tests.py "
    "manage.py pytest.ini mypy.ini noxfile.py".split()
)
# Fenced blocks and inline code spans of Markdown.
_CODE_SPAN = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.S)

# --- names in prose ------------------------------------------------------------------------------
# A name word: "Paris", "O'Brien", "U.S.S.", "Phoebe's"; runs of them, joined by a few lower-case
# particles ("Museum of Natural History", "Days of Our Lives", "Barnes & Noble").
_UPPER, _LOWER = "A-ZÀ-ÖØ-Þ", "a-zß-öø-ÿ"
_WORD = rf"(?:[{_UPPER}][{_LOWER}]+(?:['’][A-Za-z]+)?|[{_UPPER}]['’][{_UPPER}][{_LOWER}]+|(?:[A-Z]\.){{1,4}}|[{_UPPER}][{_LOWER}]*[{_UPPER}][{_LOWER}]+|I['’][a-z]+)"
_CONNECTORS = frozenset("of the de da del van von le la &".split())
# Not after a backtick, @, #, / or a dot: `Value` in Markdown code and a.b.C are code, not names.
_NAME_RUN = re.compile(rf"(?<![\w'’@#/.`-]){_WORD}(?:[ \t]+(?:(?:{'|'.join(_CONNECTORS)})[ \t]+)*{_WORD})*(?![\w@/`-])")
_QUOTED_TITLE = re.compile(r"[\"“]([A-Z][^\"“”\n]{0,80}?)[,.?!]*[\"”]")
# Spanish opens a question or an exclamation with ¿ / ¡: a sentence starts after them ("¿Puedes …").
_SENTENCE_END = re.compile(r"(?:^|[.!?¿¡:;…\"“”(\[*#>-]|\n)\s*$")
_NEW_YEAR = re.compile(r"(?:Happy[ \t]+)?New[ \t]+Year(?:['’]s)?(?:[ \t]+(?:Eve|Day))?$")
_LIST_ITEM = re.compile(r"\n[ \t]*(?:\d{1,2}[.)]|[-*•])[ \t]+$")
_LOWER_CASE_WORD = re.compile(r"(?<![\w'’])[a-z][a-z'’-]*")
_CONTRACTION = re.compile(r"^(.+?)['’](m|re|ve|ll|d|t|s)$", re.I)

_GREETINGS = frozenset(
    "hey hi hello hiya howdy yo bye goodbye goodnight thanks thank dear congratulations "
    "congrats welcome sorry cheers".split()
)
_INTERJECTIONS = frozenset(
    "oh ooh ohh ah ahh aah uh uhh um umm hmm huh wow whoa woah well look listen wait ok okay yeah yes yep no nope "
    "nah alright right so hmmm god gosh geez jeez man dude boy girl sweetie honey please ugh eww oops ha haha hah "
    "aw aww wh ew mm mmm shh yay hooray gee golly damn c'mon come y'know happy merry".split()
)
_STOPWORDS = frozenset(
    "a an and but for if in it its my no not of on or so the then this that these those we you i he she they "
    "our your their yes ok okay sure thanks please also let next now here there what why how when which who "
    "after before because while with without me him her them us is are was were be been being do does did "
    "have has had will would can could should shall may might must just only even still maybe actually "
    "apparently sometimes always never ever really very too all any some every each both either neither one "
    "two three first second last another other such same again once anyway besides however though although "
    "until unless whether whatever whoever wherever where everyone everybody someone somebody anyone anybody "
    "nobody nothing something anything everything guys mom dad mommy daddy mum grandma grandpa sir ma'am madam "
    "mister miss mr mrs ms dr true false none null note warning error todo fixme see also example i'm i'll "
    "i've i'd".split()
)
_DATE_WORDS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday tonight weekend january "
    "february march april may june july august september october november december christmas thanksgiving "
    "halloween easter hanukkah valentine's valentines year year's eve birthday anniversary".split()
)
# Stripped only when nothing else is left ("Tomorrow Night" is a date, "the Night Shift" a name).
_TIMES_OF_DAY = frozenset("morning afternoon evening night".split()
)
_RELATIVE_DATE_LEADS = frozenset("last next this past coming early late mid every".split())
_TITLES = frozenset("mr mr. mrs mrs. ms ms. dr dr. miss uncle aunt auntie grandma grandpa professor prof prof. sir lady lord dame".split())
# Verbs after a name that make it a person's. The second line (issue 11, eighth round): what a
# person does in a ticket or a review ("Jonas Weber suggested …", "Kim wants …").
_PERSON_VERBS = frozenset(
    "met meets said says told tells asked asks married marries dated dates loves loved kissed kisses thinks "
    "thought knows knew hates hated "
    "suggested suggests reported reports wrote writes wants wanted mentioned mentions noted notes replied "
    "replies commented comments proposed proposes agreed agrees approved approves".split()
)
# What can type a name PERSON (``_Mention.evidence``): a speaker's name or first name, a stripped
# greeting, title or "I'm" before it, a person verb after it, a chat or coding lead before it.
PERSON_EVIDENCE = ("speaker", "greeting", "title", "i'm", "verb", "lead", "coding-lead")
# Not "called": a band, a road or a game is called something as often as a person is (issue 11,
# ninth round: on the chat tuning split, 6 names typed PERSON after it, none a person's).
_PERSON_LEADS = frozenset("met meet meeting with and named marry married date dating kiss kissed love loved tell told ask asked call".split())
# Words before a name of two words or more that make it a person's in a coding session's prose
# ("Bug report from Jonas Weber", "tag Jonas Weber", "cc Ravi Iyer"): before one word they name
# too much else there ("from Django"), and the chat leads too ("with Docker Compose").
_CODING_PERSON_LEADS = frozenset("from tag ping cc ask asked thanks thank".split())
_PLACE_LEADS = frozenset("in at from to near into toward towards around outside inside across".split())
_PLACE_VERBS = frozenset("visit visiting visited visits".split())
_WORK_LEADS = frozenset("movie film book novel song album show series play musical opera poem magazine newspaper painting episode read reading watch watching watched".split())
_PLACE_WORDS = frozenset(
    "city street st avenue ave road rd park square island islands river lake mountain mountains beach bay county "
    "hall museum hotel airport station bridge center centre church hospital zoo plaza village heights falls "
    "valley harbor harbour coast state states kingdom republic".split()
)
_ORGANIZATION_WORDS = frozenset(
    "inc inc. corp corp. corporation company co co. ltd ltd. llc university college school institute foundation "
    "association agency bank group airlines records studios bureau department committee council club society "
    "party times news quartet band orchestra barn hut".split()
)
# Roles that describe someone rather than name them ("Old Woman", "Ticket Counter Attendant").
_ROLE_WORDS = frozenset(
    "man woman men women guy guys girl girls boy boys lady ladies kid kids child people person crowd all both "
    "everyone together attendant waiter waitress nurse doctor clerk customer officer cop priest minister "
    "voice announcer narrator host interviewer director receptionist driver student teacher professor "
    "manager assistant secretary stranger friend friends other others speaker unknown user the a an with "
    "his her old young little tall short".split()
)
_PERSON_ROLE = re.compile(r"^(?:(?:Mr|Mrs|Ms|Dr|Miss)\.?[ ])?[A-Z][A-Za-z'’-]*(?:[ ](?:[A-Z][A-Za-z'’-]*|[A-Z]\.))*$")

# What is not prose, so never a description: a log line (timestamp or level first), a shell or
# REPL prompt, a stack frame, a diff or table row.
_NOT_PROSE = re.compile(r"^(?:\d{2,4}[-/:.]\d|\[?(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL)\b|[$>#|+-]\s|File \"|at \S+\()")
_MIN_PROSE_WORDS = 4
_MIN_PROSE_LETTERS = 0.6
# What ends the sentence a description is read from: a full stop before a space, a line's end.
_FULL_STOP = re.compile(r"\. ")
_LINE_END = re.compile(r"\n")

_CONFIDENCE = {
    "FILE": 0.8, "ISSUE": 0.8, "METHOD": 0.7, "TEST": 0.7, "CLASS": 0.6, "PERSON": 0.6, "PLACE": 0.55,
    "ORGANIZATION": 0.55, "WORK": 0.55, "CONCEPT": 0.4,
}
_SPEAKER_CONFIDENCE = 0.7
# A name said in several turns, or by more than one speaker, outranks a one-off.
_REPEAT_BONUS = 0.1
_MAX_REPEATS_COUNTED = 3
_MAX_CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class _Mention:
    start: int
    end: int
    node_type: str
    name: str
    quote: str
    tags: tuple[str, ...] = ()
    pasted: bool = False  # in text a command pasted into a message: counts as tool output
    # What typed a name PERSON (one of ``PERSON_EVIDENCE``); "" when nothing did. Not written to
    # the node: the benchmark reads it to see why a name became a person.
    evidence: str = ""


@dataclass(slots=True)
class _Name:
    """A capitalised name found in prose, before the unit decides whether and how to keep it."""

    start: int
    end: int
    name: str
    quote: str
    person_cue: str = ""  # the stripped word that made it a person's ("Hey John": greeting)


class HeuristicExtractor:
    """Pattern-based extraction; no network, same input → same output."""

    name = "heuristic"

    @property
    def fingerprint(self) -> str:
        return f"heuristic:v{HEURISTIC_VERSION}:t{TOOL_ONLY_MIN_TURNS}"

    async def extract(self, unit: WorkUnit) -> ExtractorReply:
        return ExtractorReply(raw=extract_heuristic(unit))


@lru_cache(maxsize=4096)
def speaker_name(role: str | None) -> str | None:
    """The person a turn's role names ("Monica Geller", "Mr. Treeger"), or ``None`` for ``user``,
    ``assistant``, ``tool``, "Speaker 1" and roles that describe someone ("Old Woman")."""
    if not role:
        return None
    cleaned = clean_text(role, limit=64)
    if cleaned.casefold() in _SYSTEM_ROLES or not _PERSON_ROLE.match(cleaned):
        return None
    words = [w.casefold().rstrip(".") for w in cleaned.split()]
    if any(w in _ROLE_WORDS for w in words):
        return None
    return cleaned


def extract_heuristic(unit: WorkUnit, *, tool_only_min_turns: int = TOOL_ONLY_MIN_TURNS) -> dict[str, Any]:
    """The model-schema reply for ``unit`` (pure). ``tool_only_min_turns``: how many tool turns
    must name something seen only in tool output (the benchmark varies it)."""
    speakers = {t.number: name for t in unit.turns if (name := speaker_name(t.role))}
    coding = _is_coding_unit(unit)
    per_turn = mentions_per_turn(unit, speakers=speakers, coding=coding)
    nodes: dict[str, dict[str, Any]] = {}
    seen_in: dict[str, dict[int, str]] = {}  # node id -> turn number -> role
    evidence = _EvidenceIndex()
    written_at: dict[tuple[str, int], list[int]] = {}  # (node id, turn) -> offsets the agent wrote it at
    linked_per_turn: list[tuple[UnitTurn, list[str]]] = []
    described = _Descriptions()
    for turn, mentions in per_turn:
        linked: dict[str, None] = {}  # the turn's nodes in the order said (a list's `in` was quadratic, audit35)
        for mention in mentions:
            node_id = semantic_node_id(mention.node_type, mention.name)
            if node_id is None:
                continue
            node = nodes.get(node_id)
            if node is not None and not node["description"]:
                # Only while it has none: finding the sentence scans the turn, which may be huge.
                node["description"] = described(turn, mention)
            if node is None:
                node = nodes[node_id] = {
                    "id": node_id, "type": mention.node_type, "name": mention.name,
                    "description": described(turn, mention), "aliases": [],
                    "confidence": _CONFIDENCE.get(mention.node_type, 0.5), "tags": list(mention.tags), "evidence": [],
                }
            evidence.add(node, turn.number, mention.quote)
            roles = seen_in.setdefault(node_id, {})
            if roles.get(turn.number, "tool") in TOOL_ROLES:  # said in the turn outranks pasted there
                roles[turn.number] = "tool" if mention.pasted else turn.role or ""
            if not mention.pasted and (turn.role or "") in _AGENT_ROLES:
                written_at.setdefault((node_id, turn.number), []).append(mention.start)
            linked.setdefault(node_id)
        linked_per_turn.append((turn, list(linked)))
    for number, name in speakers.items():
        node_id = semantic_node_id("PERSON", name)
        if node_id is None:
            continue
        node = nodes.setdefault(node_id, {
            "id": node_id, "type": "PERSON", "name": name, "description": "", "aliases": [],
            "confidence": _SPEAKER_CONFIDENCE, "tags": ["speaker"], "evidence": [],
        })
        node["confidence"] = max(node["confidence"], _SPEAKER_CONFIDENCE)
        if "speaker" not in node["tags"]:
            node["tags"].append("speaker")
        evidence.add(node, number, name)
        seen_in.setdefault(node_id, {})[number] = name
    kept = {
        node_id for node_id, turns in seen_in.items()
        if any(role not in TOOL_ROLES for role in turns.values())
        or (len(turns) >= tool_only_min_turns and _defined_in(nodes[node_id], unit, turns))
    }
    if coding:
        busy = _BusyTurns(linked_per_turn, written_at)
        imported = _standard_library_imports(unit)
        kept = {
            node_id for node_id in kept
            if not _said_once_in_passing(nodes[node_id], seen_in[node_id], unit)
            and not busy.shows_only_in_passing(nodes[node_id], seen_in[node_id])
            and not _imported_from_standard_library(nodes[node_id], imported)
        }
    for node_id in kept:
        turns = seen_in[node_id]
        voices = {role for role in turns.values() if role not in TOOL_ROLES}
        repeats = min(len(turns), _MAX_REPEATS_COUNTED) - 1 + (1 if len(voices) > 1 else 0)
        node = nodes[node_id]
        node["confidence"] = round(min(_MAX_CONFIDENCE, node["confidence"] + _REPEAT_BONUS * repeats), 4)
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    for turn, linked in linked_per_turn:
        linked = [n for n in linked if n in kept]
        for source, target in combinations(linked[:MAX_LINKED_PER_TURN], 2):
            source, target = sorted((source, target))
            edge = edges.setdefault(
                (source, target),
                {"source": source, "target": target, "relationship": "RELATES_TO",
                 "justification": "mentioned together in one turn", "evidence": []},
            )
            quote = evidence.first_quote.get((source, turn.number))
            if quote and len(edge["evidence"]) < 3:
                edge["evidence"].append({"turn": turn.number, "quote": quote})
    return {"summary": "", "nodes": [n for i, n in nodes.items() if i in kept], "edges": list(edges.values())}


def mentions_per_turn(
    unit: WorkUnit, *, speakers: Mapping[int, str] | None = None, coding: bool | None = None
) -> list[tuple[UnitTurn, list[_Mention]]]:
    """Each turn of ``unit`` with the mentions found in it (types agreed across the unit), before
    the unit decides which become nodes. ``speakers`` and ``coding`` are computed when not given."""
    if speakers is None:
        speakers = {t.number: name for t in unit.turns if (name := speaker_name(t.role))}
    if coding is None:
        coding = _is_coding_unit(unit)
    people = _people_index(speakers.values())
    capitalised = _capitalised_words(unit)
    per_turn = [(turn, _turn_mentions(turn, people, capitalised, coding=coding)) for turn in unit.turns]
    return _agree_on_types(_without_phrase_persons(per_turn, unit))


@dataclass(frozen=True)
class _StandardImports:
    """What a unit imports by name from the standard library: every name its import lines say
    (``PurePath`` of ``PurePath as PP`` too: the class is the language's whatever the file calls
    it), and the names they bind, which a call is made on (``PP.cwd()``; ``PurePath.x()`` beside
    that import is some other ``PurePath``'s, determ35)."""

    named: frozenset[str] = frozenset()
    bound: frozenset[str] = frozenset()


def _imported_from_standard_library(node: Mapping[str, Any], imported: _StandardImports) -> bool:
    """A class or call whose name the unit imports from the standard library (``from io import
    StringIO``, ``from pathlib import Path`` → ``Path.home()``) is the language, not the project,
    as a standard-library module's own function already is (:func:`_is_language`). Issue 11,
    thirteenth round: on the coding tuning material 8 labelled noise nodes and 1 useful
    (``TextIOBase``, a bug's base class)."""
    if node["type"] not in ("CLASS", "METHOD"):
        return False
    receiver, dot, _ = node["name"].partition(".")
    return receiver in (imported.bound if dot else imported.named)


def _standard_library_imports(unit: WorkUnit) -> _StandardImports:
    """Names the unit's text imports by name from a standard-library module (any turn: a file's
    import lines shown by a command say where its names come from as well as an edit does) — the
    project's list of them (:data:`STANDARD_LIBRARY_MODULES`, the same on every Python), unless
    the unit shows the project owns a module of that name (:func:`_project_modules`): ``from
    secrets import Vault`` beside the project's ``secrets.py`` imports the project's ``Vault``."""
    imported: dict[str, list[str]] = {}
    for turn in unit.turns:
        if "import" not in turn.text:
            continue
        for match in _FROM_IMPORT.finditer(turn.text):
            if (module := match.group(1).partition(".")[0]) in STANDARD_LIBRARY_MODULES:
                imported.setdefault(module, []).append(match.group(2))
    if not imported:
        return _StandardImports()
    own = _project_modules(unit)
    lines = [line for module, lines in imported.items() if module not in own for line in lines]
    return _StandardImports(
        named=frozenset(n for line in lines for n in _IMPORTED_NAME.findall(line) if n != "*"),
        bound=frozenset(n for line in lines for n in _BOUND_NAME.findall(line) if n != "*"),
    )


def _project_modules(unit: WorkUnit) -> set[str]:
    """The top-level modules whose file the unit shows by a path (``./secrets.py``,
    ``src/secrets.py``, ``secrets/__init__.py``; :data:`_TOP_LEVEL_FOLDERS`): the project's, though
    named like one of the standard library, and the one ``from secrets import …`` imports
    (determ34). A traceback's ``/usr/lib/python3.11/secrets.py`` is no top of the project's tree,
    and a relative import (``from .typing import …``) shows a package's module, which shadows
    nothing (on the coding material both kept ``ClassVar``, ``PurePath``, ``NullTranslations``)."""
    modules: set[str] = set()
    for turn in unit.turns:
        if ".py" not in turn.text:
            continue
        for match in _PYTHON_FILE.finditer(turn.text):
            if "/" not in match.group(0):
                continue  # a bare `pathlib.py`: a listing's (`ls src/_pytest`), a file's short name
            folder, _, file = normal_path(match.group(0))[:-3].rpartition("/")
            if file == "__init__":
                folder, _, file = folder.rpartition("/")
            if folder in _TOP_LEVEL_FOLDERS:
                modules.add(file)
    return modules


def _without_phrase_persons(per_turn: list[tuple[UnitTurn, list[_Mention]]], unit: WorkUnit) -> list[tuple[UnitTurn, list[_Mention]]]:
    """A name typed PERSON only by the word before it (``lead``: "and", "with", "met") is a phrase,
    not a person's name, when the unit writes one of its words in lower case: "the Metropolitan
    Museum of Art", "we call Ross Lingers In The Bathroom", "Fears and Pet Peeves" beside "pet
    peeves". Its vote becomes CONCEPT (the word rules before the lead found no other type); a
    speaker, title, greeting or person verb still types it. Issue 11, ninth round: on the chat
    tuning split 8 labelled mistypes no longer PERSON, none of 336 lead-typed persons lost."""
    if not any(m.evidence == "lead" for _, mentions in per_turn for m in mentions):
        return per_turn  # the unit's words are read only when a lead typed a name
    lower = _lower_case_words(unit)

    def phrase(mention: _Mention) -> bool:
        return mention.evidence == "lead" and any(w.casefold() in lower for w in mention.name.split())

    return [
        (turn, [replace(m, node_type="CONCEPT", evidence="") if phrase(m) else m for m in mentions])
        for turn, mentions in per_turn
    ]


def _lower_case_words(unit: WorkUnit) -> frozenset[str]:
    """Words the unit's prose writes in lower case (no tool output)."""
    return frozenset(
        word for turn in unit.turns if (turn.role or "") not in TOOL_ROLES for word in _LOWER_CASE_WORD.findall(turn.text)
    )


def _agree_on_types(per_turn: list[tuple[UnitTurn, list[_Mention]]]) -> list[tuple[UnitTurn, list[_Mention]]]:
    """One type per name in a unit: PERSON when any mention says so, else the most frequent other
    type, else CONCEPT ("met Ross" makes every "Ross" of the unit a person)."""
    votes: dict[str, Counter[str]] = {}
    for _, mentions in per_turn:
        for m in mentions:
            if "proper-noun" in m.tags:
                votes.setdefault(m.name.casefold(), Counter())[m.node_type] += 1
    chosen: dict[str, str] = {}
    for name, counts in votes.items():
        typed = Counter({t: n for t, n in counts.items() if t != "CONCEPT"})
        chosen[name] = "PERSON" if "PERSON" in typed else (min(typed, key=lambda t: (-typed[t], t)) if typed else "CONCEPT")
    return [
        (turn, [replace(m, node_type=chosen[m.name.casefold()]) if "proper-noun" in m.tags else m for m in mentions])
        for turn, mentions in per_turn
    ]


class _EvidenceIndex:
    """Adds a node's aliases and evidence without repeats, and remembers each node's first quote per
    turn. Sets, not list scans: a name said thousands of times in one chunk must not cost n²."""

    def __init__(self) -> None:
        self.first_quote: dict[tuple[str, int], str] = {}
        self._aliases: set[tuple[str, str]] = set()
        self._evidence: set[tuple[str, int, str]] = set()

    def add(self, node: dict[str, Any], turn: int, quote: str) -> None:
        node_id = node["id"]
        if (node_id, quote) not in self._aliases:
            self._aliases.add((node_id, quote))
            node["aliases"].append(quote)
        if (node_id, turn, quote) not in self._evidence:
            self._evidence.add((node_id, turn, quote))
            node["evidence"].append({"turn": turn, "quote": quote})
            self.first_quote.setdefault((node_id, turn), quote)


def _people_index(speakers: Iterable[str]) -> dict[str, str]:
    """Folded full names and unambiguous first names of the speakers → the speaker's name."""
    index: dict[str, str] = {}
    first: dict[str, set[str]] = {}
    for name in speakers:
        index[name.casefold()] = name
        words = [w for w in name.split() if w.casefold().rstrip(".") not in _TITLES]
        if len(words) > 1:
            first.setdefault(words[0].casefold(), set()).add(name)
    for word, names in first.items():
        if len(names) == 1 and word not in index:
            index[word] = next(iter(names))
    return index


def _defined_in(node: dict[str, Any], unit: WorkUnit, turns: Mapping[int, str]) -> bool:
    """Whether the turns a node is seen in define it (``class Name``, ``def name``): the only
    evidence that makes a name seen nowhere but in tool output a node."""
    if node["type"] not in ("CLASS", "METHOD", "TEST"):
        return False
    return _defines((t for t in unit.turns if t.number in turns), str(node["name"]).rsplit(".", 1)[-1])


def _defines(turns: Iterable[UnitTurn], name: str) -> bool:
    """Whether one of ``turns`` defines ``name`` (``class Name``, ``def name``, ``function name``).
    Each place the name is written is checked for a keyword before it: no pattern is compiled per
    name (a chunk asks for dozens)."""
    for turn in turns:
        text = turn.text
        at = text.find(name)
        while at >= 0:
            end = at + len(name)
            whole = end == len(text) or not (text[end].isalnum() or text[end] == "_")
            if whole and _DEFINITION_LEAD.search(text, max(0, at - 40), at):
                return True
            at = text.find(name, end)
    return False


def _said_once_in_passing(node: Mapping[str, Any], turns: Mapping[int, str], unit: WorkUnit) -> bool:
    """Whether a coding unit shows a node in one turn only, with nothing else saying what it is:
    a prose name (`Config File`, `Warm Up`), or a call on a local variable whose method the unit
    never defines (`pager.run()`, `ctx.fillText()`, `mock_prompt.reset_mock()`; `self.x()`,
    `Book.objects.all()` and a method the unit defines stay). Measured on the labelled tuning
    material (issue 11, sixth round): prose names 9 noise / 3 useful, calls on a variable 11 / 3;
    a class or any method said once is a coin toss (16 / 15, 16 / 26) and stays."""
    if len(turns) != 1 or "speaker" in node["tags"]:
        return False
    if node["type"] in _PROSE_TYPES:
        return True
    receiver, dot, method = str(node["name"]).rpartition(".")
    if node["type"] != "METHOD" or not dot or receiver.partition(".")[0] in _OWN_RECEIVERS:
        return False
    return all(part.lstrip("_")[:1].islower() for part in receiver.split(".")) and not _defines(unit.turns, method)


class _BusyTurns:
    """Which nodes a coding unit shows once, in a turn of many names, outside every edit of the
    agent (:data:`BUSY_TURN_NAMES`). A message is cut into its parts only when asked, once."""

    def __init__(self, linked_per_turn: list[tuple[UnitTurn, list[str]]], written_at: Mapping[tuple[str, int], list[int]]) -> None:
        self._turns = {turn.number: (turn, len(linked)) for turn, linked in linked_per_turn}
        self._written_at = written_at
        self._zones: dict[int, list[tuple[int, int, str]]] = {}

    def shows_only_in_passing(self, node: Mapping[str, Any], turns: Mapping[int, str]) -> bool:
        """Whether ``node`` is seen in one turn only, that turn yields more than
        :data:`BUSY_TURN_NAMES` names, and no edit the agent writes there holds it (a speaker stays)."""
        if len(turns) != 1 or "speaker" in node["tags"]:
            return False
        number = next(iter(turns))
        turn, names = self._turns[number]
        if names <= BUSY_TURN_NAMES:
            return False
        offsets = self._written_at.get((node["id"], number), [])
        if offsets and number not in self._zones:
            self._zones[number] = agent_zones(turn.text)
        return not any(zone_at(self._zones[number], offset) in EDIT_KINDS for offset in offsets)


def _pasted_spans(text: str) -> list[tuple[int, int]]:
    """The parts of a message that a command or a tool pasted into it: blocks of a tag used for
    two blocks or more (``<doc>`` … ``</doc>`` twice)."""
    if "</" not in text:
        return []
    blocks = [(m.group(1), m.start(), m.end()) for m in _BLOCK.finditer(text)]
    tags = Counter(tag for tag, _, _ in blocks)
    return [(start, end) for tag, start, end in blocks if tags[tag] > 1]


def _is_coding_unit(unit: WorkUnit) -> bool:
    """Whether a unit is a coding session's: it holds tool output or Markdown code. There, prose
    with no code in it is still about code ("the package installer for Python"), not conversation."""
    return any((t.role or "") in TOOL_ROLES or "`" in t.text for t in unit.turns)


def _turn_mentions(turn: UnitTurn, people: Mapping[str, str], capitalised: frozenset[str], *, coding: bool = False) -> list[_Mention]:
    """A turn's mentions: code entities always, names only in what a person or the assistant wrote;
    what a command pasted into a message is read like tool output (and marked ``pasted``)."""
    role = turn.role or ""
    if role in _AGENT_ROLES:  # its own words, its own comments; the documents it writes out are not
        if "```" not in turn.text:
            return find_mentions(turn.text, people=people, capitalised_elsewhere=capitalised, coding=coding)
        return _said_and_pasted(turn.text, _document_spans(turn.text), people, capitalised, chat=False, coding=coding)
    text = _HIDDEN_MARKUP.sub(lambda m: "\0" * len(m.group(0)), turn.text) if "<!" in turn.text or "<?" in turn.text else turn.text
    if role in TOOL_ROLES:
        return find_mentions(text, prose=False)
    return _said_and_pasted(text, _pasted_spans(text), people, capitalised, chat=speaker_name(turn.role) is not None, coding=coding)


def _said_and_pasted(
    text: str, spans: list[tuple[int, int]], people: Mapping[str, str], capitalised: frozenset[str], *, chat: bool, coding: bool
) -> list[_Mention]:
    """The mentions of a message whose ``spans`` were pasted into it: those read like tool output
    (and marked ``pasted``), the rest as the writer's own words."""
    if not spans:
        return find_mentions(text, chat=chat, people=people, capitalised_elsewhere=capitalised, coding=coding)
    said, pasted = _split_text(text, spans)
    mentions = find_mentions(said, chat=chat, people=people, capitalised_elsewhere=capitalised, coding=coding)
    mentions += [replace(m, pasted=True) for m in find_mentions(pasted, prose=False)]
    return sorted(mentions, key=lambda m: m.start)


def _document_spans(text: str) -> list[tuple[int, int]]:
    """The fenced blocks of a message that write out a document under its file name; the name's
    line stays the writer's (the file is what it works on)."""
    return [(m.start() + m.group(0).index("```"), m.end()) for m in _DOCUMENT_BLOCK.finditer(text)]


def _split_text(text: str, spans: Iterable[tuple[int, int]]) -> tuple[str, str]:
    """``text`` twice, offsets kept: once without the spans, once with only them (NUL elsewhere,
    so that no match joins text across a cut)."""
    said: list[str] = []
    pasted: list[str] = []
    at = 0
    for start, end in sorted(spans):
        start = max(start, at)
        if end <= start:
            continue
        said += [text[at:start], "\0" * (end - start)]
        pasted += ["\0" * (start - at), text[start:end]]
        at = end
    said.append(text[at:])
    pasted.append("\0" * (len(text) - at))
    return "".join(said), "".join(pasted)


def find_mentions(
    text: str,
    *,
    prose: bool = True,
    chat: bool = False,
    people: Mapping[str, str] | None = None,
    capitalised_elsewhere: frozenset[str] | None = None,
    coding: bool = False,
) -> list[_Mention]:
    """Entity mentions in one turn, in text order, overlapping matches resolved (longest first).

    ``prose``: look for names of people, places, works and organisations too (not in tool output).
    ``chat``: the turn is a person's (its role is their name), or has no code at all: weaker cues
    count there — a lone untyped capitalised word, a preposition before a place, a quoted title. In
    an agent's prose about code those are too often code ("in Django", "the Query").
    ``people``: folded names (and first names) of the speakers → their full name.
    ``capitalised_elsewhere``: folded words written capitalised inside a sentence somewhere in the
    unit; a lone capitalised word at a sentence start counts only if it is among them.
    ``coding``: the turn is part of a coding session (:func:`_is_coding_unit`): prose without code
    there is not read as conversation.
    """
    candidates: list[_Mention] = []
    for match in _URL.finditer(text):
        url = match.group(0).rstrip(".,;:!?")
        # The page, not the request: `file.pl?flag` and `file.pl?/flag` are one node, `file.pl`.
        page = url.partition("?")[0]
        candidates.append(_Mention(match.start(), match.start() + len(url), "FILE", page, url, ("url",)))
    for match in _PATH.finditer(text):
        if _ELIDED.search(match.group(0)):
            continue  # `.../tests/__init__.py`: part of the path left out, so no file in particular
        if match.start() and _SED_SUBSTITUTION.match(text, match.start() - 1):
            continue
        # The name without a diff's a/ or b/ or a ./ (one file, one node); the quote as written.
        candidates.append(_Mention(match.start(), match.end(), "FILE", normal_path(match.group(0)), match.group(0)))
    for match in _BARE_FILE.finditer(text):
        if match.group(0).casefold() not in _CONVENTIONAL_FILES:
            candidates.append(_Mention(match.start(), match.end(), "FILE", match.group(0), match.group(0)))
    for match in _TEST.finditer(text):
        if _TEST_VALUE.match(text, match.end()):
            continue
        candidates.append(_Mention(match.start(), match.end(), "TEST", match.group(0), match.group(0)))
    for match in _METHOD.finditer(text):
        # ``RetryPolicy()`` constructs a class; ``load()`` / ``time.monotonic()`` call a method.
        kind = "CLASS" if _CLASS.fullmatch(match.group(1)) else "METHOD"
        candidates.append(_Mention(match.start(), match.end(), kind, match.group(1), match.group(0)))
    for match in _ISSUE.finditer(text):
        if _is_colour(text, match.start(), match.end()):
            continue
        candidates.append(_Mention(match.start(), match.end(), "ISSUE", match.group(0), match.group(0)))
    for match in _CLASS.finditer(text):
        if not (chat and _SURNAME.fullmatch(match.group(0))):
            candidates.append(_Mention(match.start(), match.end(), "CLASS", match.group(0), match.group(0)))
    # Python's own names (ValueError, super(), object(), seen.items(), traceback.print_exc()) are
    # the language, not the project; the placeholders of examples and instructions (filename.py,
    # foo(), SomethingElse) name nothing.
    candidates = [
        m for m in candidates
        if not (m.node_type in ("CLASS", "METHOD") and (_is_language(m.name) or _is_incidental(m.name) or _is_script_scaffolding(m.name)))
        and not _is_placeholder(m.name)
        and not (m.node_type == "FILE" and _TEMPORARY_PATH.search(m.name))
    ]
    if prose:
        # Prose with no code in it reads as conversation even from a user or an assistant.
        # Blanked text (pasted, hidden markup) was no conversation either.
        conversational = chat or (not coding and not candidates and "`" not in text and "\0" not in text)
        prose_text = _mask_code(text)  # comments in code are no prose
        names = _name_mentions(prose_text, people or {}, capitalised_elsewhere or frozenset(), chat=conversational)
        candidates.extend(m for m in names if m.name not in _BUILTINS)  # "a SyntaxError" in prose
    # Longest match wins an overlap (a path beats the CamelCase file name inside it).
    candidates.sort(key=lambda m: (m.start, -(m.end - m.start)))
    chosen: list[_Mention] = []
    taken_until = -1
    for mention in candidates:
        if mention.start >= taken_until:
            chosen.append(mention)
            taken_until = mention.end
    return chosen


def _is_colour(text: str, start: int, end: int) -> bool:
    """Whether the ``#123`` at ``start``:``end`` is a colour: set as one (``color="#555"``,
    ``stroke:#333``) or a quoted string of its own (``"#333333"``). Issue 11, fourteenth round:
    both labelled such issues were colours (45 in the coding sessions)."""
    if end - start - 1 not in _COLOUR_DIGITS:
        return False
    quote = text[start - 1:start] if start else ""
    return (quote in ("'", '"') and text[end:end + 1] == quote) or _COLOUR_LEAD.search(text, max(0, start - 40), start) is not None


def _mask_code(text: str) -> str:
    """``text`` with its code spans blanked out, offsets kept. NUL, not spaces: a name run must not
    join the words on either side of a span ("John `x` John" is no "John John" quote)."""
    return _CODE_SPAN.sub(lambda m: "\0" * len(m.group(0)), text)


def _is_language(name: str) -> bool:
    """A builtin (``ValueError``, ``NoneType``), a language's name (``JavaScript``), a built-in
    type's method or a dunder called on a variable (``seen.items``, ``f.readlines``,
    ``self.temp_dir.__enter__``; not ``self.add``), a standard-library module's function
    (``traceback.print_exc``, ``os.path.join``), or the standard library's mocks (``MagicMock``,
    ``m.assert_called_once``, a patched stand-in ``MockRepoMap``)."""
    if name in _BUILTINS or name in _LANGUAGE_NAMES:
        return True
    receiver, dot, method = name.rpartition(".")
    if method in _MOCK_API or _MOCK_STAND_IN.fullmatch(name.partition(".")[0]):
        return True
    if not dot:
        return False
    if method in _BUILTIN_METHODS and receiver.lstrip("_")[:1].islower() and receiver not in _OWN_RECEIVERS:
        return True
    # A dunder on a variable is the language's protocol (`self.temp_dir.__enter__`); on a class it
    # is that class's method (`Message.__init__`).
    variable = receiver.rpartition(".")[2]
    if method.startswith("__") and method.endswith("__") and variable.lstrip("_")[:1].islower() and receiver not in _OWN_RECEIVERS:
        return True
    module = receiver.split(".")
    return module[0] in STANDARD_LIBRARY_MODULES and all(part.islower() for part in module)


def _is_script_scaffolding(name: str) -> bool:
    """What makes a standalone script run (:data:`_SCRIPT_SCAFFOLDING`): ``django.setup``,
    ``settings.configure``, ``TestCase``, an app declared for it (``ReproduceAppConfig``)."""
    return name in _SCRIPT_SCAFFOLDING or name.endswith("AppConfig")


def _is_incidental(name: str) -> bool:
    """A call that names no function in particular: a bare ``main()``, or a method of a numbered
    throwaway instance (``q1.deconstruct``, ``qs2.first``)."""
    receiver, dot, _ = name.rpartition(".")
    return name in _GENERIC_CALLS or (bool(dot) and _NUMBERED_RECEIVER.fullmatch(receiver.rpartition(".")[2]) is not None)


@lru_cache(maxsize=16384)  # pure, and asked of every mention: a session repeats its names
def _is_placeholder(name: str) -> bool:
    """``filename.py``, ``obj.foo``, ``SomethingElse``: a name made of an example's placeholder."""
    return name in _TEST_PLACEHOLDERS or any(part.casefold() in _PLACEHOLDERS for part in re.split(r"[/.()]", name))


def _capitalised_words(unit: WorkUnit) -> frozenset[str]:
    """Folded words the unit's prose writes capitalised inside a sentence (so they are names)."""
    words: set[str] = set()
    for turn in unit.turns:
        if (turn.role or "") in TOOL_ROLES:
            continue
        text = _mask_code(turn.text)
        for match in _NAME_RUN.finditer(text):
            inside = match.start() > 0 and not _SENTENCE_END.search(text[max(0, match.start() - 3) : match.start()])
            for index, word in enumerate(match.group(0).split()):
                if index > 0 or inside:
                    words.add(_possessive_base(word).casefold())
    return frozenset(words)


def _name_mentions(text: str, people: Mapping[str, str], capitalised_elsewhere: frozenset[str], *, chat: bool) -> list[_Mention]:
    """Names of people, places, works and organisations written in one turn of prose."""
    found: list[_Mention] = []
    for match in _QUOTED_TITLE.finditer(text) if chat else ():
        title = match.group(1).strip().rstrip(",.?!")
        words = title.split()
        folded = title.casefold()
        # A quoted title is title case ("An Affair To Remember"); quoted speech is not ("No strippers").
        title_case = all(w[:1].isupper() for w in words if len(w) > 3)
        if 1 <= len(words) <= 8 and title_case and not ({folded} & (_STOPWORDS | _GREETINGS | _INTERJECTIONS)):
            start = match.start(1)
            found.append(_Mention(start, start + len(title), "WORK", title, title, ("proper-noun",)))
    for match in _NAME_RUN.finditer(text):
        name = _trim_name(text, match, capitalised_elsewhere, chat=chat)
        if name is None:
            continue
        name = _without_glued_word(name, people)
        node_type, evidence = _name_type(text, name, people, chat=chat)
        if node_type == "CONCEPT" and not chat and " " not in name.name:
            continue  # an untyped lone word in an agent's prose is more often code than a name
        full = people.get(name.name.casefold()) if node_type == "PERSON" else None
        found.append(_Mention(name.start, name.end, node_type, full or name.name, name.quote, ("proper-noun",), evidence=evidence))
    return found


def _trim_name(text: str, match: re.Match[str], capitalised_elsewhere: frozenset[str], *, chat: bool) -> _Name | None:
    """The name inside a run of capitalised words: greetings, interjections, contractions, stop
    words and dates stripped off; ``None`` when nothing is left that reads as a name."""
    if _NEW_YEAR.match(match.group(0)):
        return None  # a date, though "New" starts names ("New York")
    spans = [(m.start() + match.start(), m.group(0)) for m in re.finditer(r"\S+", match.group(0))]
    at_sentence_start = match.start() == 0 or _SENTENCE_END.search(text[max(0, match.start() - 3) : match.start()]) is not None
    list_item = _LIST_ITEM.search(text[max(0, match.start() - 12) : match.start()]) is not None or (
        match.start() < 12 and _LIST_ITEM.search("\n" + text[: match.start()]) is not None
    )
    person_cue = ""
    # Leading words that are no part of the name; what they were tells what follows.
    while spans:
        word = spans[0][1]
        folded = word.casefold()
        contraction = _CONTRACTION.match(word)
        if folded in _GREETINGS or folded in _INTERJECTIONS:
            if folded in _GREETINGS:
                person_cue = "greeting"  # "Hey John": the one greeted is a person
        elif folded.rstrip(".") in _TITLES or folded in _TITLES:
            if len(spans) > 1:
                person_cue = "title"  # "Mr. Treeger", "Uncle Nathan"
            else:
                return None
        elif contraction and (contraction.group(1).casefold() in _STOPWORDS or contraction.group(2).casefold() != "s"):
            if folded in ("i'm", "i’m") and len(spans) > 1:
                person_cue = "i'm"  # "I'm Chandler"
        elif folded in _STOPWORDS or folded in _RELATIVE_DATE_LEADS or folded in _DATE_WORDS:
            pass
        elif not (not chat and list_item and len(spans) > 1 and folded not in capitalised_elsewhere):
            break  # else "1. Configure Django settings": an instruction's verb, not part of a name
        spans = spans[1:]
        at_sentence_start = False
    # A possessive ends the name ("Phoebe's room"); a contraction, greeting or interjection after
    # it is no part of it ("Look Phoebe I'm", "Mary Ellen Wait"). Stop words inside stay: "Days of
    # Our Lives".
    for index, (_, word) in enumerate(spans):
        folded = word.casefold()
        contraction = _CONTRACTION.match(word)
        if contraction and contraction.group(2).casefold() == "s" and contraction.group(1).casefold() not in _STOPWORDS:
            spans = spans[: index + 1]
            break
        if contraction or folded in _GREETINGS or folded in _INTERJECTIONS:
            spans = spans[:index]
            break
    while spans and (spans[-1][1].casefold() in _DATE_WORDS or spans[-1][1].casefold() in _STOPWORDS or spans[-1][1] in _CONNECTORS):
        spans = spans[:-1]
    if not spans or all(w.casefold() in _DATE_WORDS or w.casefold() in _TIMES_OF_DAY for _, w in spans):
        return None
    words = [_possessive_base(w) for _, w in spans]
    if len(words) == 1 and (len(words[0].rstrip(".")) < 2 or words[0].rstrip(".") == "I"):
        # Also an initial alone ("he and I...kind of" read "I."; issue 11, ninth round: 6 PERSON nodes).
        return None
    start = spans[0][0]
    end = spans[-1][0] + len(words[-1])
    lone_initial = at_sentence_start and len(words) == 1
    if lone_initial and words[0].casefold() not in capitalised_elsewhere and not _followed_by_person_verb(text, end):
        return None  # "Sometimes", "Sounds": any sentence starts with a capital
    if _is_heading(text, match.start(), match.end()):
        return None  # "Command Execution Rules" on a line of its own is a heading, not a name
    return _Name(start, end, " ".join(words), text[start:end], person_cue)


def _without_glued_word(name: _Name, people: Mapping[str, str]) -> _Name:
    """``name`` without a first word glued onto a speaker's name ("To Monica", "Naked Ross", "Call
    Joanna", "Doctor Ross Geller" → the speaker): a word that is no speaker's name nor a title,
    before words that are. Issue 11, eighth round: on the chat tuning split 34 such names, 29 of
    them the speaker, 5 a nickname of one ("Fun Bobby", "Red Ross", "Hotel Monica")."""
    first, _, rest = name.name.partition(" ")
    if not rest or rest.casefold() not in people or first.casefold() in people or first.casefold().rstrip(".") in _TITLES:
        return name
    cut = re.match(r"\S+\s+", name.quote)
    if cut is None:
        return name
    return _Name(name.start + cut.end(), name.end, rest, name.quote[cut.end() :], name.person_cue)


def _possessive_base(word: str) -> str:
    contraction = _CONTRACTION.match(word)
    return contraction.group(1) if contraction and contraction.group(2).casefold() == "s" else word


def _followed_by_person_verb(text: str, end: int) -> bool:
    following = re.match(r"[ \t]+([a-z']+)", text[end : end + 24])
    return following is not None and following.group(1) in _PERSON_VERBS


def _is_heading(text: str, start: int, end: int) -> bool:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line = text[line_start : len(text) if line_end == -1 else line_end]
    return line.strip(" \t#*_:=-|>`").strip() == text[start:end] and "\n" in text


def _name_type(text: str, name: _Name, people: Mapping[str, str], *, chat: bool) -> tuple[str, str]:
    """PERSON, PLACE, WORK, ORGANIZATION or CONCEPT, from the words around and inside the name,
    with what typed it PERSON (one of ``PERSON_EVIDENCE``; "" for the other types)."""
    words = name.name.split()
    folded = [w.casefold() for w in words]
    if name.name.casefold() in people:
        return "PERSON", "speaker"
    if name.person_cue:
        return "PERSON", name.person_cue
    if _followed_by_person_verb(text, name.end):
        return "PERSON", "verb"
    before = re.findall(r"[A-Za-z']+", text[max(0, name.start - 30) : name.start])
    previous = [w.casefold() for w in before[-2:]]
    # "the" between: the lead words below still type a place or a work ("in the Bronx"), but no
    # person ("Hootie and the Blowfish", "with the Rockettes"; issue 11, ninth round: on the chat
    # tuning split 13 labelled mistypes, 2 persons — "the Dean", "the Riddler").
    after_the = previous[-1:] == ["the"]
    if after_the:
        previous = previous[:-1]
    if folded[-1].rstrip(".") in _ORGANIZATION_WORDS or folded[-1] in _ORGANIZATION_WORDS:
        return "ORGANIZATION", ""
    if folded[-1] in _PLACE_WORDS:
        return "PLACE", ""
    if any(w in _WORK_LEADS for w in previous):
        return "WORK", ""
    if previous and (previous[-1] in _PLACE_VERBS or (chat and previous[-1] in _PLACE_LEADS)):
        return "PLACE", ""
    if after_the:
        return "CONCEPT", ""
    if chat and previous and previous[-1] in _PERSON_LEADS:
        return "PERSON", "lead"
    if not chat and len(words) > 1 and previous and previous[-1] in _CODING_PERSON_LEADS:
        return "PERSON", "coding-lead"
    return "CONCEPT", ""


class _Descriptions:
    """The sentence around a mention when it reads as prose said by a person or the assistant;
    ``""`` for tool output, log lines and the like (a node seen only there has no description,
    rather than a log line posing as one). A turn's sentence ends are found once and each
    sentence's description is made once: found again for every mention, each a scan of its
    sentence, a long line of names cost the square of its length (126 KB of file names on one
    line: 3.5 s; audit35)."""

    def __init__(self) -> None:
        self._ends: dict[int, tuple[list[int], list[int]]] = {}  # turn -> where its ". " and "\n" stand
        self._said: dict[tuple[int, int, int], str] = {}  # (turn, sentence's bounds) -> description

    def __call__(self, turn: UnitTurn, mention: _Mention) -> str:
        if (turn.role or "") in TOOL_ROLES:
            return ""
        if turn.number not in self._ends:
            self._ends[turn.number] = ([m.start() for m in _FULL_STOP.finditer(turn.text)], [m.start() for m in _LINE_END.finditer(turn.text)])
        stops, lines = self._ends[turn.number]
        left, right = _sentence_bounds(stops, lines, len(turn.text), mention.start, mention.end)
        key = (turn.number, left, right)
        if key not in self._said:
            self._said[key] = _prose_or_nothing(" ".join(turn.text[left:right].split())[:DESCRIPTION_CHARS])
        return self._said[key]


def _sentence_bounds(stops: list[int], lines: list[int], size: int, start: int, end: int) -> tuple[int, int]:
    """Where the sentence around ``start:end`` begins and ends in a text of ``size`` characters
    whose ``". "`` begin at ``stops`` and whose line ends stand at ``lines`` (both sorted): after the
    last of either wholly before ``start``, up to and with the first at or after ``end``."""
    before = [found[i - 1] for found, width in ((stops, 2), (lines, 1)) if (i := bisect_right(found, start - width)) > 0]
    after = [found[i] for found in (stops, lines) if (i := bisect_left(found, end)) < len(found)]
    return max(before, default=-1) + 1, min(after) + 1 if after else size


def _prose_or_nothing(sentence: str) -> str:
    """``sentence`` when it reads as prose; ``""`` for a log line, a prompt, a short phrase."""
    letters = sum(c.isalpha() or c == " " for c in sentence)
    if _NOT_PROSE.match(sentence) or len(sentence.split()) < _MIN_PROSE_WORDS or letters < _MIN_PROSE_LETTERS * len(sentence):
        return ""
    return sentence
