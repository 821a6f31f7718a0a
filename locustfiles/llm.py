"""Locust entry point for LLM load: ``locust -f locustfiles/llm.py --scenario scenarios/mix.yaml``.

Everything lives in the ``tokenswarm`` package; this file only exposes it to Locust.
Add your own listeners here, e.g. ``@events.llm_request.add_listener`` (see docs/hooks.md).
"""

from tokenswarm.locustfile import *  # noqa: F403
