"""Running a load test: the layer that puts load generation, recording and analysis together.

* :mod:`~tokenswarm.orchestrate.plugin` wires tokenswarm into Locust (options, events,
  messages) for ``locust -f locustfiles/llm.py`` and ``tokenswarm run``;
* :mod:`~tokenswarm.orchestrate.controller` is the master/local side of a run (run directory,
  plan, scrapers, worker collection, progress);
* :mod:`~tokenswarm.orchestrate.verdict` is the CI verdict on the exact records (``slo.json``,
  ``junit.xml``, exit statuses).

It sits above ``tokenswarm.load`` (generating load), ``tokenswarm.collect`` (recording),
``analysis`` and ``tokenswarm.webui``, which never import it (``lint-imports`` checks).
"""
