"""Running a load test: the layer that puts load generation, recording and analysis together.

One job per module:

* :mod:`~tokenswarm.orchestrate.plugin` wires tokenswarm into Locust (options, events,
  messages, the worker side) for ``locust -f locustfiles/llm.py`` and ``tokenswarm run``;
* :mod:`~tokenswarm.orchestrate.controller` orchestrates the run on the master or local
  process, handing each job to its module: :mod:`~tokenswarm.orchestrate.runstart` (the
  target's preflight, the run's files and context), :mod:`~tokenswarm.orchestrate.loadplan`
  (the step plan and its hooks, shape ticks, step broadcasts),
  :mod:`~tokenswarm.orchestrate.ending` (stop reasons, guards, circuit breaker, hard stop, exit
  status), :mod:`~tokenswarm.orchestrate.accounts` (the final accounts) and
  :mod:`~tokenswarm.orchestrate.scraping` (the scrapers);
* :mod:`~tokenswarm.orchestrate.recording` owns the run directory's files (manifest, records
  sink, generator health log, live summaries);
* :mod:`~tokenswarm.orchestrate.workers` is the master's view of its workers (reports, stop,
  every final batch received);
* :mod:`~tokenswarm.orchestrate.progress` formats the progress line and the live windows;
* :mod:`~tokenswarm.orchestrate.verdict` is the CI verdict on the exact records (``slo.json``,
  ``junit.xml``) and the exit statuses.

It sits above ``tokenswarm.load`` (generating load), ``tokenswarm.collect`` (recording),
``analysis`` and ``tokenswarm.webui``, which never import it (``lint-imports`` checks).
"""
