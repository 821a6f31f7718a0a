"""The Locust plugin's command-line options, defined once.

The plugin registers them with Locust's parser (:mod:`tokenswarm.orchestrate.plugin`) and
``tokenswarm run`` lists the same ones in its ``--help`` and accepts them before it hands the
process to Locust. This module imports nothing of Locust, whose import patches the process
with gevent (~0.6 s of CPU that ``tokenswarm run`` would pay again after its ``exec``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tokenswarm.orchestrate import exposure


def add_options(parser: Any) -> None:
    """Add the plugin's options to ``parser`` (Locust's, or a recorder's: ``tokenswarm run --help``)."""
    group = parser  # Locust's own add_argument (groups do not take include_in_web_ui)
    group.add_argument("--scenario", type=str, default=os.environ.get("TOKENSWARM_SCENARIO"),
                       help="Scenario YAML (path or name under scenarios/)", include_in_web_ui=False)
    group.add_argument("--out", type=str, default=None, include_in_web_ui=False,
                       help="Run directory (default: runs/<run id>)")
    group.add_argument("--set", dest="tokenswarm_set", action="append", default=[], include_in_web_ui=False,
                       help="Override a scenario field: --set load.steps=[1,2] (repeatable)")
    group.add_argument("--records-gzip", action="store_true", default=False, include_in_web_ui=False,
                       help="Write records.jsonl.gz")
    group.add_argument("--records-rotate-mb", type=float, default=0, include_in_web_ui=False,
                       help="Rotate records files at this size (0 = one file)")
    group.add_argument("--records-format", choices=("auto", "jsonl", "parquet"), default="auto", include_in_web_ui=False,
                       help="Records store: jsonl (records.jsonl), parquet (records-NNNNNN.parquet row groups), "
                            "auto = parquet for soak runs (report_interval_s set or >= 1 h planned), else jsonl")
    group.add_argument("--slo", dest="tokenswarm_slo", action="append", default=[], include_in_web_ui=False,
                       help="SLO for the verdict, NAME=VALUE or TASK.NAME=VALUE (repeatable), e.g. ttft_p95_ms=800")
    group.add_argument("--max-run-time", dest="tokenswarm_max_run_time", type=float, default=0.0,
                       include_in_web_ui=False,
                       help="Headless hard stop in seconds (default: 1.5 x the planned duration + 2 min)")
    group.add_argument("--budget", dest="tokenswarm_budget", type=float, default=0.0, metavar="SECONDS",
                       include_in_web_ui=False,
                       help="Adaptive steps (load.until): the whole run's time budget; a step stops extending "
                            "when the rest of the plan would not fit (default 0 = each step's max_step_s only)")
    group.add_argument("--no-pilot", dest="tokenswarm_no_pilot", action="store_true", default=False,
                       include_in_web_ui=False,
                       help="Send no pilot request before the run; the plan printed at the start then assumes "
                            "the server's speed (40 tokens/s per stream)")
    # Editable in the web UI's start form (empty = the scenario's value).
    group.add_argument("--steps", dest="tokenswarm_steps", default="", include_in_web_ui=True,
                       help="Load steps, comma-separated (users or requests/s); empty = scenario")
    group.add_argument("--step-duration", dest="tokenswarm_step_duration", default="", include_in_web_ui=True,
                       help="Steady seconds per step; empty = scenario")
    group.add_argument("--warmup", dest="tokenswarm_warmup", default="", include_in_web_ui=True,
                       help="Warm-up seconds per step; empty = scenario")
    group.add_argument("--wait-for-server", dest="tokenswarm_wait_for_server", type=float, default=0.0,
                       metavar="SECONDS", include_in_web_ui=False,
                       help="Wait up to SECONDS for the target to answer GET /v1/models before giving up (default 0)")
    group.add_argument("--metrics-port", dest="tokenswarm_metrics_port", type=int, default=0, metavar="PORT",
                       include_in_web_ui=False,
                       help="Serve the live LLM statistics in Prometheus text format at http://HOST:PORT/metrics "
                            "(master or local run; default 0 = off)")
    group.add_argument("--metrics-host", dest="tokenswarm_metrics_host", default="127.0.0.1", metavar="HOST",
                       include_in_web_ui=False,
                       help="Address for --metrics-port (default 127.0.0.1; another address serves the statistics "
                            "without authentication to whoever can reach it, and says so in a warning)")
    group.add_argument("--credentials-to-any-host", dest="tokenswarm_credentials_to_any_host", action="store_true",
                       default=False, include_in_web_ui=False,
                       help="Send the target's credentials (key, headers, URL password) to any host, also one "
                            "typed into the web UI's start form (default: only to --host / target.base_url)")
    group.add_argument("--worker-token", dest="tokenswarm_worker_token", default="", include_in_web_ui=False,
                       help="Shared secret every worker presents to the master (default: $TOKENSWARM_WORKER_TOKEN; "
                            "required for a master port bound beyond 127.0.0.1; prefer the variable, a command "
                            "line is visible to other users)")
    # Locust binds its web UI and master port to every interface; tokenswarm's default is this machine.
    if hasattr(group, "set_defaults"):
        group.set_defaults(web_host=exposure.LOCAL_BIND, master_bind_host=exposure.LOCAL_BIND)
    for hidden in ("tokenswarm_scenario_data", "tokenswarm_run_id", "tokenswarm_base_url", "tokenswarm_model",
                   "tokenswarm_credentials_url"):
        group.add_argument("--" + hidden.replace("_", "-"), dest=hidden, default="", help=argparse.SUPPRESS,
                           include_in_web_ui=False)
