"""Project-level checks: the compose file is valid against the CLIs, the README's promises hold."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

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
    """``tokenswarm/scenarios`` links to the top-level folder, so wheels ship the same files."""
    from tokenswarm.workload.scenario import resolve_scenario_path, shipped_scenarios_dir

    link = ROOT / "tokenswarm" / "scenarios"
    assert link.resolve() == (ROOT / "scenarios").resolve()
    assert (shipped_scenarios_dir() / "mix.yaml").exists()
    assert resolve_scenario_path("mix").endswith("mix.yaml")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"scenarios/*.yaml"' in pyproject


def test_the_readers_c_fast_path_is_built_where_a_compiler_is():
    # setup.py marks the extension optional (an install without a compiler falls back to the
    # pure-Python reader); on a machine with one, a silent build failure would cost ~2x CPU.
    import shutil

    import pytest

    if not shutil.which("cc") and not shutil.which("gcc"):
        pytest.skip("no C compiler: the pure-Python reader is the expected path")
    from tokenswarm.wire import reader

    assert reader._read_events is not None, "tokenswarm.wire._fastread was not built: pip install -e . again"
    docker = (ROOT / "Dockerfile").read_text()
    assert "setup.py" in docker and "gcc" in docker  # the image builds it too
