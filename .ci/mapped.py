"""mypy and import-linter over the real tree, with the package-dir mapping of pyproject.toml.

The top-level ``analysis/`` folder is installed as ``tokenswarm.analysis``
(``[tool.setuptools.package-dir]`` of pyproject.toml). Python finds it through the install (a wheel puts it there;
an editable install's finder maps the name to the folder), but two path-based tools cannot:
mypy names a file after its directories (``analysis/stats.py`` would be ``analysis.stats``) and
grimp, import-linter's graph builder, walks ``tokenswarm/`` on disk. This script runs each tool
with the mapping fed in, so both see the analysis under its import name at its real path:

    python .ci/mapped.py mypy [MYPY ARGS]            # strict, the files of [tool.mypy]
    python .ci/mapped.py lint-imports [ARGS]         # the contracts of [tool.importlinter]
    python .ci/mapped.py import-linter drawgraph tokenswarm.analysis

The tools themselves are unchanged (their own option parsing, configuration, output and exit
status); only the module names of the mapped files are set. Without this script, plain ``mypy``
and ``lint-imports`` fail loudly rather than pass without the analysis: the mypy configuration
refuses a missing ``tokenswarm.analysis`` and the layers contract names it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (mypy depends on tomli there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def package_dirs(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, Path]:
    """The mapped Python packages: import name -> absolute folder (``tokenswarm.analysis`` ->
    analysis/). A mapped folder of data only (scenarios/, no ``__init__.py``) has no code to check."""
    table = tomllib.loads(pyproject.read_text())["tool"]["setuptools"].get("package-dir", {})
    folders = {name: (pyproject.parent / folder).resolve() for name, folder in table.items() if name}
    return {name: folder for name, folder in folders.items() if (folder / "__init__.py").is_file()}


def module_name(path: Path, mapping: Mapping[str, Path]) -> str | None:
    """The import name of a file under a mapped folder, or None for a file outside every one."""
    path = path.resolve()
    for name, folder in mapping.items():
        if path.is_relative_to(folder):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join((name, *parts))
    return None


# -- mypy ------------------------------------------------------------------------------------------

def run_mypy(args: list[str]) -> int:
    """mypy's own command line, with each mapped file checked under its import name.

    mypy has no package-dir option; its sources (the ``files`` of the configuration or the
    arguments) are named by directory, so the names of the mapped ones are replaced before the
    build. The exit status and the summary line are mypy's (``mypy.main.main`` does the same).
    """
    from mypy import util
    from mypy.fscache import FileSystemCache
    from mypy.main import process_options, run_build

    mapping = package_dirs()
    fscache = FileSystemCache()
    started = time.time()
    sources, options = process_options(args, stdout=sys.stdout, stderr=sys.stderr, fscache=fscache)
    for source in sources:
        name = module_name(Path(source.path), mapping) if source.path else None
        if name is not None:
            source.module = name
    _, messages, blockers = run_build(sources, options, fscache, started, sys.stdout, sys.stderr)
    n_errors, n_notes, n_files = util.count_stats(messages)
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    if n_errors:
        print(formatter.format_error(n_errors, n_files, len(sources), blockers=blockers,
                                     use_color=options.color_output))
    elif not messages or n_notes == len(messages):
        print(formatter.format_success(len(sources), options.color_output))
    return 0 if not messages or n_notes == len(messages) else (2 if blockers else 1)


# -- import-linter ---------------------------------------------------------------------------------

def feed_grimp(mapping: Mapping[str, Path]) -> None:
    """Make every grimp graph of a root package include the packages mapped under it.

    grimp finds a root package's directory through importlib and walks it; a mapped subpackage
    is elsewhere on disk. Two of grimp's seams take the mapping: its package finder (settings
    ``PACKAGE_FINDER``) answers the mapped folder for a mapped name, and ``grimp.build_graph``,
    which import-linter calls for ``lint-imports`` and ``drawgraph`` alike, is asked for the
    mapped packages along with their root. Each mapped folder is then scanned as its own found
    package, under its import name.
    """
    import grimp
    from grimp.adaptors.packagefinder import ImportLibPackageFinder
    from grimp.application.config import settings

    class MappedPackageFinder(ImportLibPackageFinder):
        def determine_package_directories(self, package_name: str, file_system: Any) -> set[str]:
            if package_name in mapping:
                return {str(mapping[package_name])}
            return super().determine_package_directories(package_name, file_system)

    build_graph: Callable[..., Any] = grimp.build_graph

    def build_graph_with_mapped(*package_names: str, **options: Any) -> Any:
        roots = set(package_names)
        mapped = [name for name in mapping if name.split(".")[0] in roots and name not in roots]
        return build_graph(*package_names, *mapped, **options)

    settings.configure(PACKAGE_FINDER=MappedPackageFinder())
    grimp.build_graph = build_graph_with_mapped


def run_import_linter(command: str, args: list[str]) -> int:
    """``lint-imports`` or ``import-linter`` (drawgraph, explore, lint), over the mapped graph."""
    from importlinter import cli

    feed_grimp(package_dirs())
    entry = cli.lint_imports_command if command == "lint-imports" else cli.import_linter
    try:
        entry.main(args=args, prog_name=command)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


TOOLS = ("mypy", "lint-imports", "import-linter")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in TOOLS:
        print(f"usage: python .ci/mapped.py {{{','.join(TOOLS)}}} [ARGS...]", file=sys.stderr)
        return 2
    tool, args = argv[0], argv[1:]
    if tool == "mypy":
        return run_mypy(args)
    return run_import_linter(tool, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
