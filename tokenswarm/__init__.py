"""tokenswarm: a distributed load generator for LLM serving stacks, built on Locust.

Rooms (subpackages), with one record type passing between them:

* ``tokenswarm.sim``     - the simulated serving stack (embedded default target)
* ``tokenswarm.workload`` - what to send: scenarios, prompts, distributions, schedules (pure)
* ``tokenswarm.wire``    - one request on the wire: send, read, date each delivery, build the record
* ``tokenswarm.load``    - the Locust driver: users, run context, live statistics, health
* ``tokenswarm.collect`` - run directories, record writing, master/worker collection, scraping
* ``tokenswarm.orchestrate`` - a Locust run put together: plugin, run controller, load shape, CI verdict
* ``tokenswarm.study``   - ``tokenswarm study``: arm servers, interleaved rounds, resume
* ``analysis``           - (top-level package) reports computed from run directories

``tokenswarm.record.RequestRecord`` is the record; ``tokenswarm.metrics`` the glossary.
"""

__version__ = "0.1.0"
