"""tokenswarm: a distributed load generator for LLM serving stacks, built on Locust.

Rooms (subpackages), with one record type passing between them (docs/layout.md has the
whole map; tests/test_code_maps.py keeps this list, the README's and that page's in step):

* ``tokenswarm.sim``     - the simulated serving stack (embedded default target)
* ``tokenswarm.workload`` - what to send: scenarios, prompts, distributions, schedules (pure)
* ``tokenswarm.wire``    - one request on the wire: send, read, date each delivery, build the record
* ``tokenswarm.load``    - the Locust driver: users, run context, live statistics, health
* ``tokenswarm.collect`` - run directories, record writing, master/worker collection, scraping
* ``tokenswarm.orchestrate`` - a Locust run put together: plugin, run controller, load shape, CI verdict
* ``tokenswarm.study``   - ``tokenswarm study``: arm servers, interleaved rounds, resume
* ``tokenswarm.webui``   - the web UI's LLM tab, charts and routes
* ``tokenswarm.commands`` - ``tokenswarm run``, ``tokenswarm demo``, distributed-run checks
* ``tokenswarm.testmodel`` - the tiny local model and launchers for the real-engine tests
* ``tokenswarm.analysis`` - reports computed from run directories (the top-level ``analysis/`` folder)

``tokenswarm.record.RequestRecord`` is the record; ``tokenswarm.metrics`` the glossary.
"""

__version__ = "0.1.0"
