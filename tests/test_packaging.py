"""Project-level checks: the compose file is valid against the CLIs, the README's promises hold."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def expand(cmd):
    """Shell-style ${VAR:-default} expansion, as compose does it, with the defaults."""
    text = cmd if isinstance(cmd, str) else " ".join(shlex.quote(c) for c in cmd)
    return shlex.split(re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text))


def test_compose_has_the_services_from_one_image():
    c = compose()
    assert {"sim", "master", "worker", "vllm"} <= set(c["services"])
    for name in ("sim", "master", "worker"):
        assert c["services"][name]["build"] == "." and c["services"][name]["image"] == "tokenswarm:latest"
    assert c["services"]["vllm"]["profiles"] == ["gpu"]
    assert (ROOT / "Dockerfile").exists()


def test_sim_command_parses_with_the_real_cli():
    argv = expand(compose()["services"]["sim"]["command"])
    assert argv[:2] == ["tokenswarm", "sim"]
    import argparse

    from tokenswarm.sim import cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    args = p.parse_args(argv[2:])
    assert args.host == "0.0.0.0" and args.port == 8000


def test_locust_commands_parse_with_locusts_parser_and_tokenswarm_options():
    code = (
        "import sys; from locust import argument_parser as ap; import tokenswarm.locustfile;"
        "opts = ap.parse_options(sys.argv[1:]); print(opts.master, opts.worker, opts.scenario, opts.master_host)"
    )
    for name in ("master", "worker"):
        argv = expand(compose()["services"][name]["command"])
        assert argv[0] == "locust"
        out = subprocess.run([sys.executable, "-c", code, *argv[1:]], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-2000:]
        if name == "master":
            assert out.stdout.split()[-4:-1] == ["True", "False", "scenarios/mix.yaml"]
        else:
            assert out.stdout.split()[-4:] == ["False", "True", "None", "master"]


def test_readme_quick_start_has_exactly_two_commands_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln for ln in block.strip().splitlines() if ln.strip()]
    assert len(lines) == 2
    assert lines[1].strip() in (ROOT / ".ci" / "run").read_text()


def test_every_subcommand_explains_itself():
    for cmd in ("demo", "sim", "run", "report", "compare", "make-test-model", "study"):
        out = subprocess.run([sys.executable, "-m", "tokenswarm", cmd, "--help"], capture_output=True, text=True)
        assert out.returncode == 0 and "usage:" in out.stdout, (cmd, out.stderr[-500:])


def test_installed_packages_carry_the_shipped_scenarios():
    """The checkout reads its top-level scenarios/; a wheel carries them (see the wheel tests)."""
    from tokenswarm.workload.scenario import resolve_scenario_path, shipped_scenarios_dir

    assert shipped_scenarios_dir() == ROOT / "scenarios"
    assert (shipped_scenarios_dir() / "mix.yaml").exists()
    assert resolve_scenario_path("mix").endswith("mix.yaml")


def test_the_readers_c_fast_path_is_built_where_a_compiler_is():
    # setup.py marks the extension optional (an install without a compiler falls back to the
    # pure-Python reader); on a machine with one, a silent build failure would cost ~2x CPU.
    if not _has_compiler():
        pytest.skip("no C compiler: the pure-Python reader is the expected path")
    from tokenswarm.wire import reader

    assert reader._read_events is not None, "tokenswarm.wire._fastread was not built: pip install -e . again"
    docker = (ROOT / "Dockerfile").read_text()
    assert "setup.py" in docker and "gcc" in docker  # the image builds it too


# -- the wheel: what `pip install .` (and the image) installs -------------------------------------

def _has_compiler() -> bool:
    return bool(shutil.which("cc") or shutil.which("gcc"))


def _image_sources() -> list[str]:
    """What the Dockerfile copies before `pip install .`: the wheel is built from exactly that."""
    copied = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copied += line.split()[1:-1]
    return copied


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[zipfile.ZipFile, Path]:
    """A wheel built from a clean copy of the image's sources (no build artefacts), and its
    unpacked tree. No build isolation: the build tools come from the test extra, nothing is
    downloaded."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "*.egg-info", "build")
    for name in _image_sources():
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=ignore)
        else:
            shutil.copy2(source, src / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(work / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (path,) = (work / "dist").glob("tokenswarm-*.whl")
    archive = zipfile.ZipFile(path)
    archive.extractall(work / "site")
    return archive, work / "site"


def test_the_wheel_installs_the_analysis_and_the_scenarios_inside_tokenswarm_and_nothing_beside(wheel):
    archive, _ = wheel
    names = set(archive.namelist())
    analysis = {f"tokenswarm/analysis/{p.relative_to(ROOT / 'analysis').as_posix()}"
                for p in (ROOT / "analysis").rglob("*.py") if "__pycache__" not in p.parts}
    scenarios = {f"tokenswarm/scenarios/{p.relative_to(ROOT / 'scenarios').as_posix()}"
                 for p in [*(ROOT / "scenarios").glob("*.yaml"), *(ROOT / "scenarios" / "data").glob("*.jsonl")]}
    assert {"tokenswarm/analysis/__init__.py", "tokenswarm/analysis/loader/records.py"} <= analysis
    assert not analysis - names, f"analysis modules missing from the wheel: {sorted(analysis - names)}"
    assert "tokenswarm/scenarios/mix.yaml" in scenarios
    assert not scenarios - names, f"scenario files missing from the wheel: {sorted(scenarios - names)}"
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"tokenswarm"}, sorted(top)


def test_the_wheel_carries_both_c_extensions_where_a_compiler_is(wheel):
    if not _has_compiler():
        pytest.skip("no C compiler: the extensions are optional")
    names = wheel[0].namelist()
    for prefix in ("tokenswarm/analysis/_chunkhist.", "tokenswarm/wire/_fastread."):
        assert [n for n in names if n.startswith(prefix) and n.endswith((".so", ".pyd"))], f"no {prefix}* in the wheel"


def test_the_installed_tree_runs_the_analysis_under_its_import_name(wheel):
    # The unpacked wheel first on the path: the analysis, its C pass and the scenarios come from
    # there, not from this checkout.
    _, site = wheel
    env = {**os.environ, "PYTHONPATH": str(site)}
    shown = subprocess.run([sys.executable, "-m", "tokenswarm.analysis", "--help"], capture_output=True, text=True,
                           cwd=site.parent, env=env, timeout=120)
    assert shown.returncode == 0 and "report" in shown.stdout, shown.stderr[-2000:]
    code = ("import tokenswarm.analysis, tokenswarm.analysis.loader\n"
            "from tokenswarm.workload.scenario import shipped_scenarios_dir\n"
            "print(tokenswarm.analysis.__file__); print(tokenswarm.analysis.loader.__file__)\n"
            "print(shipped_scenarios_dir() / 'mix.yaml')\n")
    if _has_compiler():
        code += "import tokenswarm.analysis._chunkhist as c; print(c.__file__)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=site.parent, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    paths = [Path(line) for line in done.stdout.split()]
    assert paths and all(p.is_relative_to(site / "tokenswarm") and p.exists() for p in paths), paths


def test_the_checkout_has_no_symbolic_link_and_no_copy_of_a_mapped_folder():
    # analysis/ and scenarios/ are installed under tokenswarm by pyproject's package-dir mapping;
    # a link (or a copy) at tokenswarm/analysis would hide the real tree from path-based tools.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    assert mapping == {"tokenswarm.analysis": "analysis", "tokenswarm.scenarios": "scenarios"}
    for name, folder in mapping.items():
        assert (ROOT / folder).is_dir() and not (ROOT / folder).is_symlink()
        assert not os.path.lexists(ROOT / name.replace(".", "/")), f"{name.replace('.', '/')} exists besides {folder}/"
    links = [str(p.relative_to(ROOT)) for top in ("tokenswarm", "analysis", "scenarios", "tests", "docs", "benchmarks",
                                                  "locustfiles", "deploy", ".ci")
             for p in [ROOT / top, *(ROOT / top).rglob("*")] if p.is_symlink()]
    assert not links, links


def test_the_editable_install_imports_the_analysis_from_the_top_level_folder():
    import tokenswarm.analysis

    assert Path(tokenswarm.analysis.__file__).resolve() == ROOT / "analysis" / "__init__.py"
    if _has_compiler():
        from tokenswarm.analysis import _chunkhist

        built = Path(_chunkhist.__file__).resolve()
        assert built.parent == ROOT / "analysis", f"the C pass is not built in place: {built}"
