"""Only the optional C extension lives here; everything else is in pyproject.toml.

``tokenswarm.wire._fastread`` is the hub reader's fast path. ``optional=True``: without a C
compiler the install still succeeds and the reader uses its pure-Python path (same results,
more CPU per event).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tokenswarm.wire._fastread", ["tokenswarm/wire/_fastread.c", "tokenswarm/wire/_watch.c"],
                             depends=["tokenswarm/wire/_watch.h"], optional=True,
                             extra_compile_args=["-O2"]),
                   # the store's chunk pass (analysis.chunkhist); without it the numpy path gives the same counts
                   Extension("tokenswarm.analysis._chunkhist", ["analysis/_chunkhist.c"], optional=True,
                             extra_compile_args=["-O2"])])
