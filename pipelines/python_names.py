"""Python's own names, frozen in the project: the standard library's top-level modules (determ34)
and the builtins, the ``types`` module's classes and the built-in types' methods (determ35).

The offline extractor and the identity rules treat these as the language, not the project
(:func:`pipelines.extract.heuristic._standard_library_imports`, ``_is_language``, ``_BUILTINS``;
:func:`pipelines.identity.identifier_key`). Read from the running Python (``sys.stdlib_module_names``,
``dir(builtins)``, ``dir(str)``), they made two workers on different Pythons extract one chunk
differently under one extractor version: the lists are the project's, the same on every Python.

Each is the union of the lists of the Pythons whose code a session may show, not only of those
the worker runs on (``requires-python >= 3.11``): a name a later Python removed (``distutils``,
``imp``, ``cgi``) is still the language in code written for an earlier one, and a name a later
one added (``tomllib``, ``annotationlib``, ``PythonFinalizationError``) in code written for it.

The standard library's modules were generated once from:

- Python 3.11.7's ``sys.stdlib_module_names`` (which has every name 3.12 and 3.13 removed:
  ``distutils``, ``imp`` and the PEP 594 modules);
- CPython's ``Python/stdlib_module_names.h`` on its main branch during 3.14's development
  (commit 00271b5d79a4cf6ffaa600e90d413cb2927a3230): the names 3.12, 3.13 and 3.14 added;
- ``binhex``, in 3.10 and removed in 3.11.

The builtins, ``types``' classes and the methods, from Python 3.11.7's ``dir()`` of ``builtins``,
``types`` and the built-in types (every name 3.10 has is there), and the names the "What's New"
of 3.12 to 3.14 and the ``types`` documentation say were added: ``PythonFinalizationError`` and
``_IncompleteInputError`` (3.13's builtins), ``types.CapsuleType`` (3.13), ``float.from_number``
(3.14).

To add a newer Python's names: ``python -m pipelines.python_names`` on it prints what its lists
have that these lack; add that (never remove a name: see above), and bump
:data:`pipelines.extract.heuristic.HEURISTIC_VERSION` — the extractor's output changes with it.
"""

STANDARD_LIBRARY_MODULES: frozenset[str] = frozenset("""
    __future__ _abc _aix_support _android_support _ast _asyncio _bisect _blake2 _bootsubprocess
    _bz2 _codecs _codecs_cn _codecs_hk _codecs_iso2022 _codecs_jp _codecs_kr _codecs_tw
    _collections _collections_abc _colorize _compat_pickle _compression _contextvars _crypt _csv
    _ctypes _curses _curses_panel _datetime _dbm _decimal _elementtree _frozen_importlib
    _frozen_importlib_external _functools _gdbm _hashlib _heapq _hmac _imp _interpchannels
    _interpqueues _interpreters _io _ios_support _json _locale _lsprof _lzma _markupbase _md5
    _msi _multibytecodec _multiprocessing _opcode _opcode_metadata _operator _osx_support
    _overlapped _pickle _posixshmem _posixsubprocess _py_abc _pydatetime _pydecimal _pyio
    _pylong _pyrepl _queue _random _scproxy _sha1 _sha2 _sha256 _sha3 _sha512 _signal
    _sitebuiltins _socket _sqlite3 _sre _ssl _stat _statistics _string _strptime _struct
    _suggestions _symtable _sysconfig _thread _threading_local _tkinter _tokenize _tracemalloc
    _typing _uuid _warnings _weakref _weakrefset _winapi _wmi _zoneinfo abc aifc annotationlib
    antigravity argparse array ast asynchat asyncio asyncore atexit audioop base64 bdb binascii
    binhex bisect builtins bz2 cProfile calendar cgi cgitb chunk cmath cmd code codecs codeop
    collections colorsys compileall concurrent configparser contextlib contextvars copy copyreg
    crypt csv ctypes curses dataclasses datetime dbm decimal difflib dis distutils doctest email
    encodings ensurepip enum errno faulthandler fcntl filecmp fileinput fnmatch fractions ftplib
    functools gc genericpath getopt getpass gettext glob graphlib grp gzip hashlib heapq hmac
    html http idlelib imaplib imghdr imp importlib inspect io ipaddress itertools json keyword
    lib2to3 linecache locale logging lzma mailbox mailcap marshal math mimetypes mmap
    modulefinder msilib msvcrt multiprocessing netrc nis nntplib nt ntpath nturl2path numbers
    opcode operator optparse os ossaudiodev pathlib pdb pickle pickletools pipes pkgutil
    platform plistlib poplib posix posixpath pprint profile pstats pty pwd py_compile pyclbr
    pydoc pydoc_data pyexpat queue quopri random re readline reprlib resource rlcompleter runpy
    sched secrets select selectors shelve shlex shutil signal site smtpd smtplib sndhdr socket
    socketserver spwd sqlite3 sre_compile sre_constants sre_parse ssl stat statistics string
    stringprep struct subprocess sunau symtable sys sysconfig syslog tabnanny tarfile telnetlib
    tempfile termios textwrap this threading time timeit tkinter token tokenize tomllib trace
    traceback tracemalloc tty turtle turtledemo types typing unicodedata unittest urllib uu uuid
    venv warnings wave weakref webbrowser winreg winsound wsgiref xdrlib xml xmlrpc zipapp
    zipfile zipimport zlib zoneinfo
""".split())

# Every name of the ``builtins`` module: the built-in functions, types, exceptions and constants.
BUILTIN_NAMES: frozenset[str] = frozenset("""
    ArithmeticError AssertionError AttributeError BaseException BaseExceptionGroup
    BlockingIOError BrokenPipeError BufferError BytesWarning ChildProcessError
    ConnectionAbortedError ConnectionError ConnectionRefusedError ConnectionResetError
    DeprecationWarning EOFError Ellipsis EncodingWarning EnvironmentError Exception
    ExceptionGroup False FileExistsError FileNotFoundError FloatingPointError FutureWarning
    GeneratorExit IOError ImportError ImportWarning IndentationError IndexError InterruptedError
    IsADirectoryError KeyError KeyboardInterrupt LookupError MemoryError ModuleNotFoundError
    NameError None NotADirectoryError NotImplemented NotImplementedError OSError OverflowError
    PendingDeprecationWarning PermissionError ProcessLookupError PythonFinalizationError
    RecursionError ReferenceError ResourceWarning RuntimeError RuntimeWarning StopAsyncIteration
    StopIteration SyntaxError SyntaxWarning SystemError SystemExit TabError TimeoutError True
    TypeError UnboundLocalError UnicodeDecodeError UnicodeEncodeError UnicodeError
    UnicodeTranslateError UnicodeWarning UserWarning ValueError Warning ZeroDivisionError
    _IncompleteInputError __build_class__ __debug__ __doc__ __import__ __loader__ __name__
    __package__ __spec__ abs aiter all anext any ascii bin bool breakpoint bytearray bytes
    callable chr classmethod compile complex copyright credits delattr dict dir divmod enumerate
    eval exec exit filter float format frozenset getattr globals hasattr hash help hex id input
    int isinstance issubclass iter len license list locals map max memoryview min next object
    oct open ord pow print property quit range repr reversed round set setattr slice sorted
    staticmethod str sum super tuple type vars zip
""".split())
# The ``types`` module's classes (``NoneType``, ``SimpleNamespace``): its functions are lower case.
TYPES_CLASSES: frozenset[str] = frozenset("""
    AsyncGeneratorType BuiltinFunctionType BuiltinMethodType CapsuleType CellType
    ClassMethodDescriptorType CodeType CoroutineType DynamicClassAttribute EllipsisType
    FrameType FunctionType GeneratorType GenericAlias GetSetDescriptorType LambdaType
    MappingProxyType MemberDescriptorType MethodDescriptorType MethodType MethodWrapperType
    ModuleType NoneType NotImplementedType SimpleNamespace TracebackType UnionType
    WrapperDescriptorType
""".split())
# The public methods and attributes of dict, list, str, set, bytes, tuple, int and float.
BUILTIN_TYPE_METHODS: frozenset[str] = frozenset("""
    add append as_integer_ratio bit_count bit_length capitalize casefold center clear conjugate
    copy count decode denominator difference difference_update discard encode endswith
    expandtabs extend find format format_map from_bytes from_number fromhex fromkeys get hex
    imag index insert intersection intersection_update is_integer isalnum isalpha isascii
    isdecimal isdigit isdisjoint isidentifier islower isnumeric isprintable isspace issubset
    issuperset istitle isupper items join keys ljust lower lstrip maketrans numerator partition
    pop popitem real remove removeprefix removesuffix replace reverse rfind rindex rjust
    rpartition rsplit rstrip setdefault sort split splitlines startswith strip swapcase
    symmetric_difference symmetric_difference_update title to_bytes translate union update upper
    values zfill
""".split())


def _missing_here() -> dict[str, list[str]]:
    """What the running Python's lists have that the frozen ones lack (see the module's docstring)."""
    import builtins
    import sys
    import types

    here = {
        "STANDARD_LIBRARY_MODULES": (set(sys.stdlib_module_names), STANDARD_LIBRARY_MODULES),
        "BUILTIN_NAMES": (set(dir(builtins)), BUILTIN_NAMES),
        "TYPES_CLASSES": ({n for n in dir(types) if n[:1].isupper()}, TYPES_CLASSES),
        "BUILTIN_TYPE_METHODS": (
            {n for kind in (dict, list, str, set, bytes, tuple, int, float) for n in dir(kind) if not n.startswith("_")},
            BUILTIN_TYPE_METHODS,
        ),
    }
    return {name: sorted(running - frozen) for name, (running, frozen) in here.items() if running - frozen}


if __name__ == "__main__":
    print(_missing_here() or "nothing to add")
