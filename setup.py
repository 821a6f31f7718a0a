"""The package list and the optional C extensions; everything else is in pyproject.toml.

Packages: ``tokenswarm*`` from ``tokenswarm/``, and every folder mapped by
``[tool.setuptools.package-dir]`` of pyproject.toml (``tokenswarm.analysis`` is the top-level
``analysis/`` folder, ``tokenswarm.scenarios`` the top-level ``scenarios/``) with its
subpackages. A mapped folder is not under its parent package's, so automatic discovery cannot
find it; it is listed here from the mapping.

``tokenswarm.wire._fastread`` is the hub reader's fast path. ``optional=True``: without a C
compiler the install still succeeds and the reader uses its pure-Python path (same results,
more CPU per event).
"""

import sys
from pathlib import Path

from setuptools import Extension, find_namespace_packages, setup

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent
PACKAGE_DIR: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _packages() -> list[str]:
    """tokenswarm's packages under tokenswarm/, then each mapped package and its subpackages."""
    packages = find_namespace_packages(include=["tokenswarm", "tokenswarm.*"])
    for name, folder in PACKAGE_DIR.items():
        packages += [name, *(f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"]))]
    return packages


setup(packages=_packages(),
      ext_modules=[Extension("tokenswarm.wire._fastread", ["tokenswarm/wire/_fastread.c", "tokenswarm/wire/_watch.c",
                                                             "tokenswarm/wire/_chunks.c", "tokenswarm/wire/_record.c",
                                                             "tokenswarm/wire/_sweep.c"],
                             depends=["tokenswarm/wire/_watch.h", "tokenswarm/wire/_chunks.h",
                                      "tokenswarm/wire/_record.h", "tokenswarm/wire/_sweep.h"], optional=True,
                             extra_compile_args=["-O2"]),
                   # the store's chunk pass (analysis.chunkhist); without it the numpy path gives the same counts
                   Extension("tokenswarm.analysis._chunkhist", ["analysis/_chunkhist.c"], optional=True,
                             extra_compile_args=["-O2"])])
