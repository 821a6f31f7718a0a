"""The plan during a run: ticks, transitions into the manifest, the step broadcast (in memory, injected time)."""

from types import SimpleNamespace

from tokenswarm.collect.manifest import ManifestFile
from tokenswarm.manifest import RunManifest
from tokenswarm.orchestrate.loadplan import LoadPlan, StepDriver, users_for
from tokenswarm.workload.steps import StepMachine, plan_steps


class Context:
    """The run context's side the driver uses: the wall anchor (here epoch = 1000 + t) and the step."""

    def __init__(self) -> None:
        self.anchor = SimpleNamespace(epoch=lambda t: 1000.0 + t)
        self.steps: list[dict] = []

    def set_step(self, msg: dict) -> None:
        self.steps.append(msg)


def driver(tmp_path, taking: list[bool], sent: list[dict]) -> tuple[StepDriver, ManifestFile, Context]:
    manifest, ctx = ManifestFile(tmp_path, RunManifest(run_id="r")), Context()
    env = SimpleNamespace(runner=SimpleNamespace(worker_count=3))
    d = StepDriver(env, is_master=False, send=sent.append, taking=lambda: taking[0],
                   manifest=lambda: manifest, ctx=lambda: ctx, warn=lambda text: None)
    return d, manifest, ctx


def test_transitions_before_the_run_takes_them_wait_and_are_recorded_in_order(tmp_path):
    taking, sent = [False], []
    d, manifest, ctx = driver(tmp_path, taking, sent)
    d.start(LoadPlan(StepMachine(plan_steps("closed", [2, 4], warmup_s=1, duration_s=10))))
    runner = SimpleNamespace(user_count=2)
    step = d.tick(runner, 0.0, None)
    assert step is not None and step.target == 2
    assert manifest.current.steps == () and len(d.pending) == 1, "nothing is written before test_start"
    taking[0] = True
    d.record_pending()
    assert d.pending == [] and [s.name for s in manifest.current.steps] == ["c2"]
    assert manifest.current.steps[0].started_at == 1000.0, "the transition's perf time, on the wall anchor"
    assert sent == ctx.steps and sent[-1]["phase"] == "warmup" and sent[-1]["worker_count"] == 1


def test_the_steady_window_opens_after_the_warmup_and_the_next_step_starts_at_its_end(tmp_path):
    d, manifest, _ctx = driver(tmp_path, [True], [])
    d.start(LoadPlan(StepMachine(plan_steps("closed", [2, 4], warmup_s=1, duration_s=10))))
    full = SimpleNamespace(user_count=4)
    d.tick(full, 0.0, None)
    d.tick(full, 1.0, None)
    assert manifest.current.steps[0].steady_at == 1001.0
    step = d.tick(full, 11.5, None)
    assert step is not None and step.target == 4
    assert [s.name for s in manifest.current.steps] == ["c2", "c4"]
    assert manifest.current.steps[0].ended_at == 1011.0 and manifest.current.steps[1].started_at == 1011.0


def test_a_late_tick_opens_the_window_when_it_broadcasts_it_and_warns_that_the_generator_was_held_up(tmp_path):
    warnings: list[str] = []
    d, manifest, ctx = driver(tmp_path, [True], [])
    d._warn = warnings.append
    d.start(LoadPlan(StepMachine(plan_steps("closed", [2], warmup_s=0.5, duration_s=2))))
    full = SimpleNamespace(user_count=2)
    d.tick(full, 0.0, None)
    assert d.tick(full, 4.2, None) is not None, "a 2 s window cannot have passed unseen: the step goes on"
    assert manifest.current.steps[0].steady_at == 1004.2 and ctx.steps[-1]["phase"] == "steady"
    assert warnings == ["step c2: the load plan's tick came 3.7 s late (the generator was held up); its steady "
                        "window opened at that tick, so the window holds the records tagged in it"]
    assert d.tick(full, 6.2, None) is None and manifest.current.steps[0].ended_at == 1006.2


def test_a_done_plan_ends_the_shape(tmp_path):
    d, manifest, _ctx = driver(tmp_path, [True], [])
    d.start(LoadPlan(StepMachine(plan_steps("closed", [1], warmup_s=0, duration_s=1))))
    one = SimpleNamespace(user_count=1)
    d.tick(one, 0.0, None)
    assert d.tick(one, 5.0, None) is None and d.plan is not None and d.plan.machine.done
    assert manifest.current.steps[-1].ended_at is not None


def test_an_open_loop_step_runs_one_user_per_worker():
    rate = plan_steps("open", [5.0], warmup_s=0, duration_s=1)[0]
    assert users_for(rate, SimpleNamespace(worker_count=3), is_master=True) == 3
    assert users_for(rate, SimpleNamespace(worker_count=3), is_master=False) == 1
    conc = plan_steps("closed", [8], warmup_s=0, duration_s=1)[0]
    assert users_for(conc, SimpleNamespace(worker_count=3), is_master=True) == 8
