"""The one table of names (tokenswarm.names): the analysis produces exactly its keys, and every
key a consumer names by constant, every SLO column and every glossary term is in it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.analysis.runfactory import T0, failed, record, step, write_run
from tokenswarm import metrics, names
from tokenswarm.analysis import analyse, load_run
from tokenswarm.analysis.stats import describe
from tokenswarm.workload.errors import ScenarioError
from tokenswarm.workload.scenario import parse

STEPS = [step(0, "concurrency", 2, T0, T0 + 1, T0 + 30)]


def _constants() -> dict[str, str]:
    return {k: v for k, v in vars(names).items()
            if re.fullmatch(r"[A-Z0-9_]+", k) and isinstance(v, str) and k != "LIVE_PREFIX"}


def test_every_key_constant_is_a_table_key_and_spells_its_own_name():
    table = names.summary_keys()
    for const, key in _constants().items():
        assert const == key.upper(), f"{const} must be spelled as its key {key!r}"
        assert key.removeprefix(names.LIVE_PREFIX) in table, f"{const} = {key!r} is no key of the table"


def test_key_spells_metric_statistic_and_unit_and_refuses_a_statistic_the_metric_lacks():
    assert names.TTFT.key("p99") == names.TTFT_P99_MS == "ttft_p99_ms"
    assert names.TTFT.key("count") == "ttft_count"
    assert names.TTFT.key("p99_failed_as_inf") == "ttft_p99_failed_as_inf_ms"
    assert names.REQUEST_OUTPUT_TPS.key("p50") == "request_output_tps_p50_tokens_per_s"
    assert names.live_key(names.TTFT, "p99") == names.LIVE_TTFT_P99_MS
    with pytest.raises(KeyError, match="connect has no statistic 'failed_share'"):
        names.CONNECT.key("failed_share")


def test_every_metric_names_a_glossary_term_and_every_slo_reads_a_table_key():
    for m in names.SUMMARY_METRICS:
        assert m.term in metrics.GLOSSARY, m
    table = names.summary_keys()
    for slo, (column, _, _) in metrics.SLO_METRICS.items():
        assert column in table, f"SLO {slo} reads {column!r}, which the table does not list"


@pytest.mark.parametrize("metric", names.SUMMARY_METRICS, ids=lambda m: m.name)
def test_describe_produces_exactly_the_table_keys_of_each_metric(metric):
    values = np.array([3.0, 1.0, 2.0])
    if "failed_as_inf" in " ".join(metric.stats):
        out = describe(values, metric, n_failed=1)
    elif "failed_share" in metric.stats:
        out = describe(values, metric, failed_share=0.25)
    else:
        out = describe(values, metric)
    assert tuple(out) == tuple(k for k in metric.key_names() if k in out) and set(out) == set(metric.key_names())


def test_a_step_row_holds_every_table_key(tmp_path):
    offs = [100.0, 110.0, 120.0, 300.0, 320.0, 340.0]
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 1 + i, chunk_offsets_ms=offs, reasoning_chunks=3,
                   answer_chunks=3, first_reasoning_token_ms=100.0, first_answer_token_ms=300.0, reasoning_tokens=3,
                   connect_ms=1.0, send_delay_ms=0.5, headers_ms=50.0) for i in range(6)]
    recs.append(failed(50, sent_at_s=T0 + 2, step=0, phase="steady"))
    row = next(r for r in analyse(load_run(write_run(tmp_path / "r", recs, steps=STEPS)))["steps"]
               if r["task"] == "all")
    missing = [k for k in names.summary_keys() if k not in row]
    assert missing == []
    assert row[names.TTFT_P99_MS] == pytest.approx(100.0)


def test_an_unknown_slo_key_names_the_file_the_field_and_the_nearest_valid_name():
    with pytest.raises(ScenarioError) as err:
        parse.parse_scenario({"traffic": {"classes": {"qa": {}}}, "slo": {"ttft_p99ms": 500}}, "bench.yaml")
    text = str(err.value)
    assert "bench.yaml" in text and "slo.ttft_p99ms" in text and "did you mean 'ttft_p99_ms'" in text


def test_the_live_charts_draw_only_live_keys_of_the_table_and_the_pages_spell_none():
    from tokenswarm.webui.series import CHARTS

    charted = {key for chart in CHARTS for key, _label in chart.lines}
    live = {k for k in charted if k.startswith(names.LIVE_PREFIX)}
    assert live, "the charts draw live percentiles"
    assert {k for k in live if k.removeprefix(names.LIVE_PREFIX) not in names.summary_keys()} == set()
    static = Path(names.__file__).parent / "webui" / "static"
    identifiers = {k for k in charted if "_" in k}  # "users", "waiting", "running" are words of the pages' prose too
    assert identifiers >= live | {"in_flight", "req_s", "kv_cache_pct"}
    spelled = {f.name: sorted(k for k in identifiers if re.search(rf"\b{k}\b", f.read_text()))
               for f in static.glob("*.*") if f.suffix in (".js", ".html")}
    assert spelled and all(keys == [] for keys in spelled.values()), spelled


def test_comparison_keys_are_spelled_from_the_table():
    assert names.TTFT.stem("p99") == "ttft_p99" and names.TPOT.ratio_key("p50") == "tpot_p50_ratio"
    assert names.METRICS_BY_NAME["e2e"] is names.E2E and names.PERCENTILE_KEY[99.9] == "p99_9"
    with pytest.raises(KeyError):
        names.SCHEDULE_LAG.ratio_key("p99_failed_as_inf")
