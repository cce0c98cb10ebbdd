"""The Python client, for Python started in the checkout's root.

The client lives in clients/python/tokenbucket.  Here, `import tokenbucket`
would otherwise find ./tokenbucket.so, the PostgreSQL library that `make`
builds, take it for an extension module and fail (undefined symbol:
GetLatestSnapshot).  A package directory comes before a .so in Python's
search, so this one is found first and becomes the client itself: its
submodules are read from clients/python/tokenbucket (tokenbucket.alerts,
python -m tokenbucket.alerts), and so is this __init__.
"""
import os as _os

__file__ = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))),
                         "clients", "python", "tokenbucket", "__init__.py")
__path__ = [_os.path.dirname(__file__)]
with open(__file__, encoding="utf-8") as _source:
    exec(compile(_source.read(), __file__, "exec"))
