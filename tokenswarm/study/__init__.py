"""``tokenswarm study``: repeated, interleaved A/B studies of serving configurations.

A study runs one scenario against two or more *arms* (a server command that tokenswarm
starts, or an already-running server), each arm ``rounds`` times in interleaved order
(A B B A ...), and writes one study directory: a run directory per arm and round (the
ordinary run format), the study manifest ``study.json`` and the study report.

Layout: ``spec`` (the study file and flags -> :class:`~tokenswarm.study.spec.Study`),
``order`` (the interleaved order), ``server`` (starting, probing and stopping an arm's
server), ``manifest`` (the study manifest, resume state), ``runner`` (the rounds) and
``cli`` (the subcommand).
"""
