"""The public surface used from notebooks and by CI."""

from tokenswarm import analysis


def test_public_names_exist_and_nothing_else_is_promised():
    assert sorted(analysis.__all__) == sorted(set(analysis.__all__))
    for name in analysis.__all__:
        assert hasattr(analysis, name), name
    assert callable(analysis.tables.evaluate) and analysis.tables.evaluate is analysis.evaluate


def test_cli_module_exposes_the_dispatcher_contract():
    import argparse

    from tokenswarm.analysis import cli

    for name in ("report", "compare"):
        p = argparse.ArgumentParser()
        cli.add_arguments(p, name)
        args = p.parse_args(["a", "b"] if name == "compare" else ["a"])
        assert args.no_plots is False and args.out is None
