"""Profiles: shipped ones load; bad YAML gives an error naming file and field; CLI exits 2."""

import subprocess
import sys

import pytest

from tokenswarm.sim.profiles import ProfileError, available_profiles, load_profile


def test_every_shipped_profile_loads_under_its_own_name():
    names = available_profiles()
    assert {"27b-1gpu", "tiny-fast", "bench-10ms"} <= set(names)
    for n in names:
        assert load_profile(n).name == n


@pytest.mark.parametrize(
    "yaml_text, field",
    [
        ("name: x\nweights_read_s: fast\n", "weights_read_s"),
        ("name: x\nmax_num_seqs: 0\n", "max_num_seqs"),
        ("name: x\nbogus_field: 1\n", "bogus_field"),
        ("name: x\ndraft:\n  pass_s: -1\n", "draft.pass_s"),
        ("name: x\nbatching: sometimes\n", "batching"),
        ("weights_read_s: 0.01\n", "name"),
    ],
)
def test_invalid_profile_names_file_and_field(tmp_path, yaml_text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ProfileError) as ei:
        load_profile(str(path))
    msg = str(ei.value)
    assert str(path) in msg and f"'{field}'" in msg


def test_unparsable_yaml_is_reported(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile(str(path))


def test_cli_exits_2_on_invalid_profile(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nkv_capacity_tokens: 10\n")
    proc = subprocess.run([sys.executable, "-m", "tokenswarm", "sim", "--profile", str(path), "--port", "0"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "kv_capacity_tokens" in proc.stderr and str(path) in proc.stderr


def test_cli_exits_2_on_unknown_profile_name():
    proc = subprocess.run([sys.executable, "-m", "tokenswarm", "sim", "--profile", "no-such-profile", "--port", "0"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "no-such-profile" in proc.stderr
