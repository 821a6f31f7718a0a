"""tokenswarm's Locust entry point: user classes, the scenario shape and the plugin.

Use through ``locustfiles/llm.py`` (``locust -f locustfiles/llm.py --scenario scenarios/mix.yaml``)
or ``tokenswarm run``.
"""

from tokenswarm.load.gcpolicy import paused_gc as _paused_gc

# Locust's modules are loaded when this file is imported, and tokenswarm's live as long as they
# do: a full collection during these imports walked them all for nothing (~30 ms of every
# worker's start-up), so they are frozen out of the collector's view as they load.
with _paused_gc(freeze=True):
    from tokenswarm.load.users import (  # noqa: F401
        AbnormalUser,
        CodeUser,
        ExtractionUser,
        MixedUser,
        MultiTurnUser,
        OpenLoopUser,
        QAUser,
        SummarizationUser,
    )
    from tokenswarm.orchestrate import plugin  # noqa: F401  (registers options and event listeners)
    from tokenswarm.orchestrate.shape import ScenarioShape  # noqa: F401
