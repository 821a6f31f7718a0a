"""The web UI's routes through Flask's test client, on a real Locust WebUI and RunController.

A run is played by setting what ``RunController.start()/stop()`` set (manifest, run_dir,
live statistics, scrapers, ``finished``), so these tests are fast and need no server.
"""

import csv
import io
import json
import math
import re
from pathlib import Path

import orjson
import pytest
from locust.env import Environment

from tokenswarm.collect.manifest import ManifestFile, new_manifest
from tokenswarm.collect.scrape import Scraper
from tokenswarm.load.users import CodeUser, QAUser
from tokenswarm.manifest import LoadStep, Totals
from tokenswarm.orchestrate.controller import RunController
from tokenswarm.orchestrate.recording import RunRecording
from tokenswarm.record import RequestRecord, encode_lines
from tokenswarm.webui import install
from tokenswarm.webui.report import default_command
from tokenswarm.webui.table import COLUMNS
from tokenswarm.workload.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0


def make_record(seq: int, task: str, ttft_ms: float, gap_ms: float = 10.0, n_chunks: int = 5,
                outcome: str = "ok", spec: dict | None = None) -> RequestRecord:
    offs = [ttft_ms + i * gap_ms for i in range(n_chunks)]
    return RequestRecord(run_id="run-1", worker_id="w0", seq=seq, task=task, user_class="QAUser", outcome=outcome,
                         request_key=f"k{seq}", scheduled_at_s=T0 + seq * 0.1, sent_at_s=T0 + seq * 0.1,
                         schedule_lag_ms=0.1, step=0, phase="steady", api="chat", model="m", ttft_ms=ttft_ms,
                         e2e_ms=offs[-1] + 1.0, chunk_offsets_ms=offs, chunk_tokens=[1] * n_chunks,
                         prompt_tokens=20, output_tokens=n_chunks, finish_reason="length", response_id=f"id{seq}",
                         spec_decode=spec)


def scrape_line(at_s: float, accepted: float, draft_tokens: float, drafts: float, waiting: float = 0.0) -> dict:
    samples = [
        # two engines: counters are summed over label sets
        {"name": "vllm:spec_decode_num_accepted_tokens_total", "labels": {"engine": "0"}, "value": accepted / 2},
        {"name": "vllm:spec_decode_num_accepted_tokens_total", "labels": {"engine": "1"}, "value": accepted / 2},
        {"name": "vllm:spec_decode_num_draft_tokens_total", "labels": {"engine": "0"}, "value": draft_tokens},
        {"name": "vllm:spec_decode_num_drafts_total", "labels": {"engine": "0"}, "value": drafts},
        {"name": "vllm:num_requests_waiting", "labels": {"engine": "0"}, "value": waiting},
        {"name": "vllm:num_requests_running", "labels": {"engine": "0"}, "value": 3.0},
        {"name": "vllm:kv_cache_usage_perc", "labels": {"engine": "0"}, "value": 0.25},
    ]
    return {"scraped_at": at_s, "source": "target", "url": "http://127.0.0.1:9/metrics", "step": 0, "error": None,
            "samples": samples}


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(autouse=True)
def locust_argv(monkeypatch):
    # Locust's WebUI parses sys.argv for the start form's extra options; give it a locust command line.
    monkeypatch.setattr("sys.argv", ["locust"])


@pytest.fixture
def ui(tmp_path):
    """(state, test client, controller) of a Locust web UI with tokenswarm installed."""
    env = Environment(user_classes=[QAUser, CodeUser])
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    sc = load_scenario(str(ROOT / "scenarios" / "mix.yaml"))
    ctl = RunController(env, sc, fixed_users=False)
    state = install(env, ctl, start_sampler=False)
    state.clock = Clock(T0)
    yield state, env.web_ui.app.test_client(), ctl
    env.runner.quit()


def begin_run(ctl, run_dir: Path, first_scrape: dict | None = None) -> None:
    """What RunController.start() leaves behind."""
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = ManifestFile(run_dir, new_manifest("run-1", scenario=ctl.scenario.resolved(), scenario_name="mix",
                                                  command=["test"], load_mode="closed", started_at=T0))
    ctl.recording = RunRecording(run_dir, manifest, writer=None, collector=None)
    manifest.write()
    ctl.finished = False
    if first_scrape is not None:
        fh = open(run_dir / "server_metrics.jsonl", "ab")
        fh.write(orjson.dumps(first_scrape) + b"\n")
        fh.flush()
        s = Scraper("target", first_scrape["url"], 1.0, fh, step=lambda: 0)
        s.last = first_scrape
        ctl.scrapers.append(s)
        ctl.recording.metrics_fh = fh


def end_run(ctl, records) -> None:
    """What RunController.stop() leaves behind (records file, final manifest)."""
    (ctl.run_dir / "records.jsonl").write_bytes(encode_lines(records))
    ctl.finished = True
    ctl.recording.manifest.update(
        steps=(LoadStep(0, "c2", "concurrency", 2, started_at=T0, steady_at=T0, ended_at=T0 + 30),),
        totals=Totals(requests_started=len(records), records_received=len(records)))
    ctl.finalize_manifest()
    if ctl.recording.metrics_fh is not None:
        ctl.recording.metrics_fh.close()


def records_mix(n_qa: int = 30, n_code: int = 12) -> list[RequestRecord]:
    recs = [make_record(i, "qa", ttft_ms=20.0 + 3 * i) for i in range(n_qa)]
    recs += [make_record(n_qa + i, "code", ttft_ms=100.0 + 7 * i, gap_ms=20.0) for i in range(n_code)]
    recs.append(make_record(n_qa + n_code, "code", ttft_ms=50.0, outcome="http_error"))
    return recs


def nearest_rank(values, q):
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


def test_llm_tab_is_declared_with_its_table_csv_charts_and_report_links(ui):
    _, _, ctl = ui
    args = ctl.env.web_ui.template_args
    assert {"title": "LLM", "key": "llm"} in args["extended_tabs"]
    table = next(t for t in args["extended_tables"] if t["key"] == "llm")
    assert [c["key"] for c in table["structure"]] == [k for k, _ in COLUMNS]
    hrefs = [f["href"] for f in args["extended_csv_files"]]
    assert hrefs == ["./tokenswarm/llm.csv", "./tokenswarm/charts", "./tokenswarm/report/"]


def test_stats_requests_carries_the_llm_rows_matching_the_records(ui):
    _, client, ctl = ui
    recs = records_mix()
    for r in recs:
        ctl.live.observe(r)
    resp = client.get("/stats/requests")
    assert resp.status_code == 200
    ext = {e["key"]: e["data"] for e in resp.get_json()["extended_stats"]}
    rows = {r["name"]: r for r in ext["llm"]}
    assert list(rows) == ["code", "qa", "Total"]
    assert rows["qa"]["requests"] == 30 and rows["code"]["requests"] == 13 and rows["Total"]["requests"] == 43
    assert rows["code"]["failures"] == 1 and rows["Total"]["failures"] == 1
    exact = nearest_rank([r.ttft_ms for r in recs if r.task == "qa"], 0.5)
    assert abs(rows["qa"]["live_ttft_p50_ms"] - exact) <= 0.01 * exact + 0.05  # 1 % buckets, 0.1 ms rounding
    exact99 = nearest_rank([r.ttft_ms for r in recs if r.task == "code"], 0.99)
    assert abs(rows["code"]["live_ttft_p99_ms"] - exact99) <= 0.01 * exact99 + 0.05
    assert rows["qa"]["live_itl_p50_ms"] == pytest.approx(10.0, rel=0.01)
    assert rows["qa"]["tokens_per_chunk"] == 1.0
    assert rows["Total"]["output_tokens"] == sum(r.output_tokens for r in recs)
    assert rows["Total"]["output_tokens_per_s_run"] is None  # no run started: no elapsed time
    assert rows["Total"]["spec_acceptance_rate"] is None  # "not observed", not 0


def test_json_and_csv_routes_serve_the_same_table(ui, tmp_path):
    state, client, ctl = ui
    begin_run(ctl, tmp_path / "run")
    for r in records_mix():
        ctl.live.observe(r)
    state.clock.t = T0 + 20.0
    js = client.get("/tokenswarm/llm.json").get_json()
    assert js["state"] == "running" and js["run_id"] == "run-1"
    resp = client.get("/tokenswarm/llm.csv")
    assert resp.status_code == 200 and resp.mimetype == "text/csv"
    assert "attachment" in resp.headers["Content-Disposition"] and "run-1" in resp.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(resp.get_data(as_text=True))))
    assert [r["name"] for r in rows] == [r["name"] for r in js["rows"]]
    total = rows[-1]
    assert int(total["requests"]) == js["rows"][-1]["requests"] == 43
    assert float(total["output_tokens_per_s_run"]) == pytest.approx(js["rows"][-1]["output_tokens"] / 20.0, abs=0.051)  # rounded to 0.1
    assert total["spec_acceptance_rate"] == ""  # not observed -> empty field


def test_server_spec_decode_acceptance_from_counter_deltas_between_first_and_latest_scrape(ui, tmp_path):
    _, client, ctl = ui
    begin_run(ctl, tmp_path / "run", first_scrape=scrape_line(T0, accepted=1000, draft_tokens=4000, drafts=1000))
    ctl.scrapers[-1].last = scrape_line(T0 + 10, accepted=1000 + 600, draft_tokens=4000 + 800, drafts=1000 + 200)
    spec = {"num_accepted_draft_tokens": 6, "num_spec_steps": 4}
    for i in range(4):
        ctl.live.observe(make_record(i, "qa", 20.0, spec=spec))
    rows = {r["name"]: r for r in client.get("/tokenswarm/llm.json").get_json()["rows"]}
    assert rows["Total"]["spec_acceptance_rate"] == pytest.approx(600 / 800)
    assert rows["Total"]["spec_mean_accepted_len"] == pytest.approx(1 + 600 / 200)
    assert rows["qa"]["spec_mean_accepted_len"] == pytest.approx(1 + 6 / 4)  # per-request stats, per task


def test_chart_series_samples_rates_windowed_percentiles_and_server_gauges(ui, tmp_path):
    state, client, ctl = ui
    assert client.get("/tokenswarm/series.json").get_json() == {
        "run_id": None, "state": "idle", "interval_s": 2.0, "samples": []}
    begin_run(ctl, tmp_path / "run", first_scrape=scrape_line(T0, 0, 0, 0, waiting=7))
    slow = [make_record(i, "qa", ttft_ms=500.0) for i in range(10)]
    fast = [make_record(10 + i, "qa", ttft_ms=10.0) for i in range(10)]
    for r in slow:
        ctl.live.observe(r)
    state.clock.t = T0 + 2
    state.sample_once()
    for step in range(1, 8):  # 14 s of fast requests: the 10 s window forgets the slow ones
        if step == 1:
            for r in fast:
                ctl.live.observe(r)
        state.clock.t = T0 + 2 + 2 * step
        state.sample_once()
    samples = client.get("/tokenswarm/series.json").get_json()["samples"]
    assert len(samples) == 8
    assert samples[0]["live_ttft_p50_ms"] == pytest.approx(500, rel=0.01)
    assert samples[1]["live_ttft_p50_ms"] == pytest.approx(10, rel=0.01)  # window holds only the new ones
    assert samples[-1]["live_ttft_p50_ms"] is None  # nothing finished in the last 10 s
    assert samples[1]["output_tokens_per_s"] == pytest.approx(10 * 5 / 2.0)
    assert samples[1]["req_s"] == pytest.approx(10 / 2.0)
    assert samples[0]["waiting"] == 7 and samples[0]["running"] == 3 and samples[0]["kv_cache_pct"] == 25.0
    later = client.get(f"/tokenswarm/series.json?since={samples[5]['t']}").get_json()["samples"]
    assert [s["t"] for s in later] == [s["t"] for s in samples[6:]]


def test_the_charts_page_draws_fields_every_sample_carries_with_their_labels(ui, tmp_path):
    state, client, ctl = ui
    begin_run(ctl, tmp_path / "run", first_scrape=scrape_line(T0, 0, 0, 0, waiting=7))
    state.clock.t = T0 + 2
    state.sample_once()
    (sample,) = client.get("/tokenswarm/series.json").get_json()["samples"]
    page = client.get("/tokenswarm/charts").get_data(as_text=True)
    canvases = re.findall(r'<canvas id="([^"]+)" data-series="([^"]+)" data-labels="([^"]+)"></canvas>', page)
    assert [c[0] for c in canvases] == ["chart-tps", "chart-ttft", "chart-tpot", "chart-users", "chart-errors",
                                        "chart-queue", "chart-kv"]
    for element_id, series, labels in canvases:
        fields = series.split(",")
        assert set(fields) <= set(sample), (element_id, set(fields) - set(sample))
        assert len(labels.split(",")) == len(fields), element_id
    assert ("chart-ttft", "live_ttft_p50_ms,live_ttft_p95_ms,live_ttft_p99_ms", "p50,p95,p99") in canvases


def test_sampler_is_bounded_and_a_new_run_clears_it(ui, tmp_path):
    state, _, ctl = ui
    begin_run(ctl, tmp_path / "run")
    bound = 3600  # the product's own bound (WebState's max_samples default): 2 h at one sample per 2 s
    for i in range(bound + 12):
        state.clock.t = T0 + 2 * i
        state.sample_once()
    assert len(state.sampler.samples) == bound
    assert state.sampler.samples[0]["t"] == T0 + 2 * 12, "the oldest samples were dropped, not the newest"
    ctl.finished = True
    assert state.sample_once() is None  # stopping: the last records are still coming in
    ctl.recording.manifest.update(complete=True)
    assert state.sample_once() is not None  # one final sample after the end...
    assert state.sample_once() is None  # ...and no more
    ctl.recording.manifest.update(run_id="run-2", complete=False)
    ctl.finished = False
    state.sample_once()
    assert len(state.sampler.samples) == 1 and state.sampler.run_id == "run-2"


def test_report_link_before_during_and_after_a_run(ui, tmp_path):
    state, client, ctl = ui
    state.reports.command = lambda run, out: default_command(run, out) + ["--no-plots"]
    resp = client.get("/tokenswarm/report/")
    assert resp.status_code == 409 and b"No run yet" in resp.data
    assert client.get("/tokenswarm/report").status_code in (301, 302, 308)  # to /report/ (relative links)
    run_dir = tmp_path / "run"
    begin_run(ctl, run_dir)
    resp = client.get("/tokenswarm/report/")
    assert resp.status_code == 409 and b"still going" in resp.data
    assert client.get("/tokenswarm/status.json").get_json()["report"] is None
    end_run(ctl, records_mix())
    resp = client.get("/tokenswarm/report/")
    assert resp.status_code == 202 and b"refresh" in resp.data  # generation started, page reloads itself
    assert state.reports.wait(run_dir, 120) == "ready", state.reports.errors
    resp = client.get("/tokenswarm/report/")
    assert resp.status_code == 200 and b"<html" in resp.data.lower()
    assert (run_dir / "report" / "report.html").exists()
    summary = client.get("/tokenswarm/report/summary.json")
    assert summary.status_code == 200 and json.loads(summary.data)
    assert client.get("/tokenswarm/status.json").get_json()["report"] == "ready"


def test_report_failure_is_shown_with_the_reason(ui, tmp_path):
    state, client, ctl = ui
    run_dir = tmp_path / "run"
    begin_run(ctl, run_dir)
    ctl.finished = True  # a run whose records file is missing: analysis refuses it
    ctl.recording.manifest.update(complete=True)
    client.get("/tokenswarm/report/")
    assert state.reports.wait(run_dir, 120) == "failed"
    resp = client.get("/tokenswarm/report/")
    assert resp.status_code == 500 and b"exited with status" in resp.data  # and it is not retried silently
    assert client.get("/tokenswarm/report/?retry=1").status_code == 202
    assert state.reports.wait(run_dir, 120) == "failed"


def test_charts_page_and_links_script_ship_in_the_package_without_network_resources(ui):
    _, client, _ = ui
    page = client.get("/tokenswarm/charts")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "<canvas" in html and "static/charts.js" in html
    assert "http://" not in html and "https://" not in html
    js = client.get("/tokenswarm/static/charts.js")
    assert js.status_code == 200 and b"series.json" in js.data and b"http" not in js.data
    index = client.get("/")
    assert index.status_code == 200 and b"tokenswarm/static/links.js" in index.data


PROTECTED = ("/tokenswarm/llm.json", "/tokenswarm/llm.csv", "/tokenswarm/series.json", "/tokenswarm/charts",
             "/tokenswarm/report/", "/tokenswarm/status.json", "/tokenswarm/static/charts.js")


def test_with_web_login_every_route_needs_the_password_from_the_environment(monkeypatch):
    monkeypatch.setenv("TOKENSWARM_WEB_USER", "alice")
    monkeypatch.setenv("TOKENSWARM_WEB_PASSWORD", "correct horse")
    env = Environment(user_classes=[QAUser])
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", 0, delayed_start=True, web_login=True)
    ctl = RunController(env, load_scenario(str(ROOT / "scenarios" / "qa.yaml")), fixed_users=False)
    install(env, ctl, start_sampler=False)
    client = env.web_ui.app.test_client()
    try:
        for path in PROTECTED:
            resp = client.get(path)
            assert resp.status_code == 302 and "/login" in resp.headers["Location"], path  # never the data
        callback = env.web_ui.auth_args["username_password_callback"]
        wrong = client.post(callback, data={"username": "alice", "password": "wrong"})
        assert wrong.status_code == 302 and "/login" in wrong.headers["Location"]
        assert client.get("/tokenswarm/llm.json").status_code == 302
        right = client.post(callback, data={"username": "alice", "password": "correct horse"})
        assert right.status_code == 302 and "/login" not in right.headers["Location"]
        for path in PROTECTED:
            assert client.get(path).status_code in (200, 409), path  # report: 409 before any run
            assert b"correct horse" not in client.get(path).data
    finally:
        env.runner.quit()


def test_an_api_key_set_before_the_ui_is_built_never_reaches_a_page_during_or_after_a_run(monkeypatch, tmp_path):
    import dataclasses

    from tokenswarm import redact

    redact.forget_all()
    key = "opaque-planted-value-123456"  # no pattern matches it: only registration as a known value masks it
    monkeypatch.setenv("OPENAI_API_KEY", key)  # before the controller and the UI exist, as in a real run
    env = Environment(user_classes=[QAUser, CodeUser])
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    ctl = RunController(env, load_scenario(str(ROOT / "scenarios" / "mix.yaml")), fixed_users=False)
    state = install(env, ctl, start_sampler=False)
    state.clock = Clock(T0)
    state.reports.command = lambda run, out: default_command(run, out) + ["--no-plots"]
    client = env.web_ui.app.test_client()
    pages = ("/", "/stats/requests", "/stats/failures", "/tokenswarm/llm.json", "/tokenswarm/llm.csv",
             "/tokenswarm/series.json", "/tokenswarm/status.json", "/tokenswarm/report/")
    try:
        run_dir = tmp_path / "run"
        begin_run(ctl, run_dir)
        ctl.recording.manifest.update(command=("tokenswarm", "run", "mix", "--set", f"target.headers.X-Key={key}"))
        ctl.recording.manifest.write()
        # a gateway that echoes the request's headers in its errors puts the key into server text
        echoed = dataclasses.replace(make_record(99, "qa", ttft_ms=30.0, outcome="http_error"),
                                     error=f"HTTP 502: bad gateway (authorization: Bearer {key})", http_status=502)
        for rec in records_mix() + [echoed]:
            ctl.live.observe(rec)
        state.sample_once()
        during = {p: client.get(p).data for p in pages}
        end_run(ctl, records_mix() + [echoed])
        client.get("/tokenswarm/report/")
        assert state.reports.wait(run_dir, 120) == "ready", state.reports.errors
        after = {p: client.get(p).data for p in pages + ("/tokenswarm/report/report.md",
                                                         "/tokenswarm/report/summary.json",
                                                         "/tokenswarm/report/errors.csv")}
    finally:
        env.runner.quit()
        redact.forget_all()
    assert b"bad gateway" in after["/tokenswarm/report/report.md"] + after["/tokenswarm/report/errors.csv"], (
        "the echoed error reached the report, so the test exercised the path")
    leaks = [("during", p) for p, body in during.items() if key.encode() in body]
    leaks += [("after", p) for p, body in after.items() if key.encode() in body]
    assert leaks == []
    assert key not in (run_dir / "manifest.json").read_text()
