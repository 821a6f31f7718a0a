"""tokenswarm's Locust entry point: user classes, the scenario shape and the plugin.

Use through ``locustfiles/llm.py`` (``locust -f locustfiles/llm.py --scenario scenarios/mix.yaml``)
or ``tokenswarm run``.
"""

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
