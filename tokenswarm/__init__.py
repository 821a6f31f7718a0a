"""tokenswarm: a distributed load generator for LLM serving stacks, built on Locust.

Rooms (subpackages), with one record type passing between them:

* ``tokenswarm.sim``     - the simulated serving stack (embedded default target)
* ``tokenswarm.load``    - Locust users, streaming client, load shapes, scenarios
* ``tokenswarm.collect`` - run directories, record writing, master/worker collection, scraping
* ``tokenswarm.orchestrate`` - a Locust run put together: plugin, run controller, CI verdict
* ``analysis``           - (top-level package) reports computed from run directories

``tokenswarm.record.RequestRecord`` is the record; ``tokenswarm.metrics`` the glossary.
"""

__version__ = "0.1.0"
