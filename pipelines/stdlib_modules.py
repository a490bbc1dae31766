"""The Python standard library's top-level module names, frozen in the project (determ34).

The offline extractor and the identity rules treat a name from the standard library as the
language, not the project (:func:`pipelines.extract.heuristic._standard_library_imports`,
:func:`pipelines.identity.identifier_key`). Read from the running Python's
``sys.stdlib_module_names``, they made two workers on different Pythons extract one chunk
differently under one extractor version: the list is the project's, the same on every Python.

It is the union of the lists of the Pythons whose code a session may show, not only of those
the worker runs on (``requires-python >= 3.11``): a name a later Python removed (``distutils``,
``imp``, ``cgi``) is still the language in code written for an earlier one, and a name a later
one added (``tomllib``, ``annotationlib``) in code written for it. Generated once from:

- Python 3.11.7's ``sys.stdlib_module_names`` (which has every name 3.12 and 3.13 removed:
  ``distutils``, ``imp`` and the PEP 594 modules);
- CPython's ``Python/stdlib_module_names.h`` on its main branch during 3.14's development
  (commit 00271b5d79a4cf6ffaa600e90d413cb2927a3230): the names 3.12, 3.13 and 3.14 added;
- ``binhex``, in 3.10 and removed in 3.11.

To add a newer Python's names: ``python -c "import sys; from pipelines.stdlib_modules import
STANDARD_LIBRARY_MODULES as known; print(sorted(set(sys.stdlib_module_names) - known))"`` on it,
add what it prints (never remove a name: see above), and bump
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
