"""The composition root: the ``kubesvc`` command and the demo.

Only this package may import several of ``agent``, ``server``, ``kubesim``, ``wire`` and
``budget`` together; everything below it is wired here.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kubesvc")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
