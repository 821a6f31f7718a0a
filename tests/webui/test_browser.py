"""Headless Chromium against a real Locust web UI running tokenswarm against the simulator.

The run is started through Locust's start form (class picker: ScenarioShape, steps edited in
"Custom parameters"); the LLM tab's numbers are checked against the run's records, the chart
page's canvases against drawn pixels, and screenshots are saved (to docs/images/ as well when
``TOKENSWARM_UPDATE_SCREENSHOTS=1``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.runs import ROOT, read_manifest, read_records
from tests.webui.liveui import (
    get_json,
    locust_web_ui,
    nearest_rank,
    short_scenario,
    wait_for,
    wait_workers,
    within_live_precision,
)
from tokenswarm.sim.testing import start_sim

CHROMIUM = os.environ.get("TOKENSWARM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _skip_reason() -> str | None:
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        return f"no Chromium binary at {CHROMIUM} (run .ci/install-chromium.sh VENV_DIR)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[browser]')"
    return None


def counter_total(scrape: dict, name: str) -> float:
    """A counter's value in one scrape line of server_metrics.jsonl, summed over its label sets."""
    return sum(sample["value"] for sample in scrape["samples"] if sample["name"] == name)

@pytest.fixture
def browser_page(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        exe = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=exe, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1500, "height": 900})
        ctx.set_default_timeout(15_000)
        try:
            yield ctx
        finally:
            ctx.close()


def save_screenshot(page, tmp_path: Path, name: str, **kw) -> None:
    page.screenshot(path=str(tmp_path / name), **kw)
    if os.environ.get("TOKENSWARM_UPDATE_SCREENSHOTS") == "1":
        (ROOT / "docs" / "images").mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / name, ROOT / "docs" / "images" / name)


def llm_table(page) -> dict[str, dict[str, str]]:
    """The LLM tab's table as {task: {column title: cell text}}."""
    data = page.evaluate("""() => {
        const t = document.querySelector('table');
        if (!t) return null;
        const heads = [...t.querySelectorAll('thead th')].map(th => th.innerText.trim());
        return [...t.querySelectorAll('tbody tr')].map(tr => {
            const cells = [...tr.querySelectorAll('td')].map(td => td.innerText.trim());
            return Object.fromEntries(heads.map((h, i) => [h, cells[i]]));
        });
    }""")
    return {row["Task"]: row for row in (data or []) if "Task" in row}


def number(cell: str) -> float | None:
    return float(cell) if cell not in ("", "-") else None


def start_from_the_form(page) -> None:
    """Locust's start form with --class-picker: ScenarioShape, our steps in Custom parameters."""
    for cls in ("AbnormalUser", "MixedUser", "MultiTurnUser", "OpenLoopUser", "SummarizationUser"):
        page.get_by_role("row", name=cls).get_by_role("checkbox").uncheck()
    page.locator("select[name=shapeClass]").select_option("ScenarioShape")
    page.get_by_text("Custom parameters").click()
    page.locator("input[name=tokenswarmSteps]").fill("2,4")
    page.locator("input[name=tokenswarmStepDuration]").fill("3")
    page.locator("input[name=tokenswarmWarmup]").fill("0.5")
    page.get_by_role("button", name="Start").click()


def test_llm_tab_and_charts_in_a_real_browser(browser_page, tmp_path):
    sc = short_scenario(tmp_path, steps=[1], step_duration_s=30)  # the form edits it to 2,4 users x 3 s
    run_dir = tmp_path / "run"
    with start_sim("--profile", "tiny-fast", "--spec-method", "draft",
                   "--per-request-spec-decode-metrics", "summary") as sim, \
            locust_web_ui(sc, sim.base_url, run_dir, "--class-picker", log_dir=tmp_path) as base:
        page = browser_page.new_page()
        page.goto(base)
        page.get_by_role("button", name="Start").wait_for(timeout=20_000)
        # the class picker offers our user classes and the scenario's shape
        for cls in ("QAUser", "SummarizationUser", "CodeUser", "MultiTurnUser", "AbnormalUser", "OpenLoopUser"):
            assert page.get_by_role("row", name=cls).count() == 1, cls
        start_from_the_form(page)

        # live: the LLM tab fills while the run goes
        page.get_by_role("tab", name="LLM").click()
        live = wait_for(lambda: (t := llm_table(page)) and int(t.get("Total", {}).get("Requests") or 0) > 0 and t,
                        30, "LLM rows during the run")
        assert get_json(base + "tokenswarm/status.json")["state"] == "running"
        assert set(live) >= {"qa", "code", "Total"}

        wait_for(lambda: get_json(base + "tokenswarm/status.json")["state"] == "finished", 60, "the run to end")
        records = read_records(run_dir)
        per_task = Counter(r["task"] for r in records)
        # Locust stops polling when the run stops; our bar offers a reload for the final numbers
        page.locator("#tokenswarm-final-link").click(timeout=20_000)
        page.get_by_role("tab", name="LLM").wait_for()
        table = wait_for(lambda: (t := llm_table(page)) and int(t["Total"]["Requests"]) == len(records) and t,
                         20, f"the final LLM table ({len(records)} records; "
                             f"{get_json(base + 'tokenswarm/llm.json')['rows'][-1]['requests']} on the server)")
        save_screenshot(page, tmp_path, "webui-llm-tab.png")

        manifest = read_manifest(run_dir)
        assert [s["name"] for s in manifest["steps"]] == ["c2", "c4"]  # the edited steps were used
        assert {r["user_class"] for r in records} == {"QAUser", "CodeUser"}
        for task, n in per_task.items():
            row = table[task]
            assert int(row["Requests"]) == n, task
            assert int(row["Failures"]) == sum(1 for r in records if r["task"] == task
                                               and r["outcome"] not in ("ok", "cancelled"))
            exact = nearest_rank([r["ttft_ms"] for r in records if r["task"] == task and r["ttft_ms"] is not None], .5)
            assert within_live_precision(number(row["TTFT p50 (ms, live)"]), exact), (task, row, exact)
            assert int(row["Output tokens"]) == sum(r["output_tokens"] or 0 for r in records if r["task"] == task)
        # server-side acceptance = counter deltas between the run's first and last scrape
        scrapes = [json.loads(x) for x in (run_dir / "server_metrics.jsonl").read_text().splitlines()]
        scrapes = [s for s in scrapes if s["source"] == "target" and not s["error"]]
        accepted, draft_tokens, drafts = (
            counter_total(scrapes[-1], name) - counter_total(scrapes[0], name)
            for name in ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total",
                         "vllm:spec_decode_num_drafts_total"))
        assert draft_tokens > 0 and drafts > 0, "the simulator drafted during the run"
        # Δaccepted / Δdraft_tokens and 1 + Δaccepted / Δdrafts (docs/web-ui.md), shown to 3 and 2 decimals
        assert number(table["Total"]["Spec acceptance rate"]) == pytest.approx(accepted / draft_tokens, abs=5e-4)
        assert number(table["Total"]["Spec mean accepted length"]) == pytest.approx(1 + accepted / drafts, abs=5e-3)
        assert number(table["qa"]["Spec mean accepted length"]) > 1.0  # per-request stats of the responses

        # the charts page, linked from the Locust page
        href = page.locator("#tokenswarm-charts-link").get_attribute("href")
        charts = browser_page.new_page()
        charts.goto(base + href.lstrip("./"))
        charts.wait_for_function("() => Number(document.body.dataset.samples || 0) >= 3", timeout=20_000)
        charts.wait_for_timeout(300)  # one paint
        for cid in ("chart-tps", "chart-ttft", "chart-tpot", "chart-users", "chart-errors", "chart-queue", "chart-kv"):
            points = int(charts.locator(f"#{cid}").get_attribute("data-points"))
            assert points >= 3, cid
        blue = charts.evaluate("""() => {
            const c = document.getElementById('chart-tps');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) {
                if (d[i + 3] > 200 && Math.abs(d[i] - 0x1f) < 40 && Math.abs(d[i + 1] - 0x77) < 40 && Math.abs(d[i + 2] - 0xb4) < 40) n++;
            }
            return n;
        }""")
        assert blue > 100, "the output tokens/s line is drawn"
        save_screenshot(charts, tmp_path, "webui-charts.png", full_page=True)

        # the report link builds the analysis report once the run has ended
        rep = browser_page.new_page()
        rep.goto(base + "tokenswarm/report/")
        rep.wait_for_function("() => !document.title.startsWith('Building')", timeout=120_000)
        assert (run_dir / "report" / "report.html").exists()
        assert manifest["run_id"] in rep.content()  # the analysis report of this run


@pytest.mark.parametrize("mode", ["processes", "master"])
def test_llm_tab_in_a_real_browser_with_workers(browser_page, tmp_path, mode):
    """--processes 2 and a master with two workers: started, followed and read in the browser."""
    sc = short_scenario(tmp_path, steps=[2], step_duration_s=4)
    run_dir = tmp_path / "run"
    with start_sim("--profile", "tiny-fast") as sim, \
            locust_web_ui(sc, sim.base_url, run_dir, mode=mode, log_dir=tmp_path) as base:
        wait_workers(base, 2, 60)
        page = browser_page.new_page()
        page.goto(base)
        page.get_by_role("button", name="Start").wait_for(timeout=20_000)
        page.get_by_role("button", name="Start").click()
        page.get_by_role("tab", name="LLM").click()
        # both tasks' rows: a busy machine can show the first finished request's task alone for a while
        live = wait_for(lambda: (t := llm_table(page)) and int(t.get("Total", {}).get("Requests") or 0) > 0
                        and set(t) >= {"qa", "code", "Total"} and t, 60, f"LLM rows of both tasks during the {mode} run")
        assert int(live["qa"]["Requests"]) + int(live["code"]["Requests"]) == int(live["Total"]["Requests"])
        wait_for(lambda: get_json(base + "tokenswarm/status.json")["state"] == "finished", 90, "the run to end")
        records = read_records(run_dir)
        assert len({r["worker_id"] for r in records}) == 2, "both workers sent records"
        page.locator("#tokenswarm-final-link").click(timeout=20_000)
        page.get_by_role("tab", name="LLM").wait_for()
        table = wait_for(lambda: (t := llm_table(page)) and int(t["Total"]["Requests"]) == len(records) and t,
                         20, f"the final LLM table ({len(records)} records)")
        for task, n in Counter(r["task"] for r in records).items():
            assert int(table[task]["Requests"]) == n, (mode, task, table[task])
            assert int(table[task]["Output tokens"]) == sum(r["output_tokens"] or 0 for r in records
                                                            if r["task"] == task)
        manifest = read_manifest(run_dir)
        assert manifest["complete"] and len(manifest["workers"]) == 2 and manifest["totals"]["records_lost"] == 0


def test_another_web_sites_form_post_cannot_start_a_run(browser_page, tmp_path):
    """The user has the UI open; a page of another origin in the same browser posts Locust's start form."""
    import time

    sc = short_scenario(tmp_path, steps=[1], step_duration_s=5)
    with start_sim("--profile", "tiny-fast") as sim, \
            locust_web_ui(sc, sim.base_url, tmp_path / "run", log_dir=tmp_path) as base:
        ui = browser_page.new_page()
        ui.goto(base)  # the user's session: its cookie is in this browser
        ui.get_by_role("button", name="Start").wait_for(timeout=20_000)
        # the LLM bar says which host gets the target's credentials: the configured target only
        wait_for(lambda: ui.locator("#tokenswarm-credentials").inner_text() == f"credentials to: {sim.base_url}",
                 20, "the credentials host in the LLM bar")
        # another origin on this machine (a page on another port); Playwright serves it, nothing listens there
        evil_origin = "http://127.0.0.1:9"
        form = (f'<form id="f" method="POST" action="{base}swarm">'
                '<input name="user_count" value="1"><input name="spawn_rate" value="1">'
                f'<input name="host" value="{sim.base_url}"></form>')
        browser_page.route(evil_origin + "/**", lambda route: route.fulfill(
            status=200, content_type="text/html", body=f"<html><body>{form}</body></html>"))
        evil = browser_page.new_page()
        evil.goto(evil_origin + "/page.html")
        with evil.expect_navigation():
            evil.evaluate("document.getElementById('f').submit()")
        assert "refused" in evil.content()
        time.sleep(1.5)  # not a synchronisation: an absence is checked, and a started run sends within ms
        assert get_json(base + "tokenswarm/status.json")["state"] != "running"
        assert sim.stats()["requests"] == 0, "nothing reached the target"
