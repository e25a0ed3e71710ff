"""Recorded calls: which a run replays after a restore, which it makes live, and divergence."""
from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from agent_client import connect, connect_async
from agent_client.agent import AgentClient
from agent_client.call_log import CallLog
from agent_client.recorder import CallRecorder, recorded_callable
from agent_client.replay import Horizon, ReplayDiverged, RunStart
from agent_client.testing import InProcessCoordinator
from coordinator import channels
from coordinator.api.v1 import coordinator_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]


class FakeModel:
    """A model whose answers no later run can guess: random text from its own seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> dict[str, str]:
        self.prompts.append(prompt)
        return {"text": f"{self.rng.getrandbits(64):016x}"}


class Process:
    """One life of an agent's recorded calls over the journal in `path`, restored at `start`."""

    def __init__(self, path: Path, start: RunStart, horizon: Horizon, seed: int) -> None:
        self.start = start
        self.recorder = CallRecorder(CallLog(path), horizon, lambda: self.start)
        self.model = FakeModel(seed)
        self.ask = recorded_callable(self.recorder, "model", self.model, None)

    def answers(self, prompts: list[str]) -> list[str]:
        return [self.ask(p)["text"] for p in prompts]

    def checkpoint(self, index: int) -> RunStart:
        """What restoring a checkpoint taken now gives back."""
        return RunStart.of(index, self.recorder.coordinate())


def test_a_run_replays_from_its_checkpoint_up_to_the_horizon(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    first = Process(journal, RunStart.of(0, None), "none", seed=1)
    before = first.answers(["p0", "p1", "p2"])
    cp1 = first.checkpoint(1)
    after = first.answers(["p3", "p4", "p5"])
    second = Process(journal, cp1, 2, seed=2)  # the developer names a horizon: two calls
    again = second.answers(["p3", "p4", "p5"])
    assert again[:2] == after[:2], f"the first two calls after checkpoint 1 were not replayed: {again} vs {after}"
    assert again[2] != after[2] and second.model.prompts == ["p5"], (
        f"the call after the horizon was not live: model saw {second.model.prompts}")
    cold = Process(journal, RunStart.of(0, None), "all", seed=3)  # the newest cold run, from its start
    assert cold.answers(["p0", "p1", "p2"]) == before and cold.model.prompts == []


def test_the_newest_run_after_a_checkpoint_is_the_one_replayed(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    first = Process(journal, RunStart.of(0, None), "none", seed=1)
    first.answers(["p0"])
    cp1 = first.checkpoint(1)
    original = first.answers(["p1", "p2", "p3"])
    second = Process(journal, cp1, 1, seed=2)  # replays p1, goes live at p2: the rest of the first run is undone
    redone = second.answers(["p1", "p2", "p3", "p4"])
    assert redone[0] == original[0] and redone[1:3] != original[1:3]
    third = Process(journal, cp1, "all", seed=3)
    assert third.answers(["p1", "p2", "p3", "p4", "p5"])[:4] == redone, "did not follow the newest run"
    assert third.model.prompts == ["p5"]
    latest = Process(journal, cp1, "none", seed=4).answers(["p1", "p2"])  # all live: a run forked at cp1 itself
    assert Process(journal, cp1, "all", seed=5).answers(["p1", "p2"]) == latest, "did not follow the newest run"


def test_horizon_effects_replays_every_call_before_the_last_external_effect(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    first = Process(journal, RunStart.of(0, None), "none", seed=1)
    original = first.answers(["p0", "p1"])
    first.recorder.note_effect("email-1")  # the outside world saw something computed from p0 and p1
    original += first.answers(["p2"])
    second = Process(journal, RunStart.of(0, None), "effects", seed=2)
    again = second.answers(["p0", "p1", "p2"])
    assert again[:2] == original[:2] and second.model.prompts == ["p2"], (
        f"replayed {again} of {original}; the model saw {second.model.prompts}")


def test_a_divergent_request_is_refused_and_nothing_is_called_or_recorded(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    first = Process(journal, RunStart.of(0, None), "none", seed=1)
    first.answers(["p0"])
    cp1 = first.checkpoint(1)
    original = first.answers(["p1", "p2"])
    second = Process(journal, cp1, "all", seed=2)
    with pytest.raises(ReplayDiverged, match=r"recorded call 0 after checkpoint 1: its request digest"):
        second.ask("p1, asked differently")
    assert second.model.prompts == [] and second.recorder.position == 0
    assert second.answers(["p1", "p2"]) == original  # the same request at that position is replayed


def test_a_coroutine_function_is_recorded_and_replayed_as_one(tmp_path: Path) -> None:
    journal, start = tmp_path / "j.sqlite", RunStart.of(0, None)
    models = [FakeModel(1), FakeModel(2)]

    async def ask_with(model: FakeModel, horizon: Horizon) -> list[Any]:
        async def ask(prompt: str) -> dict[str, str]:
            return model(prompt)
        wrapped = recorded_callable(CallRecorder(CallLog(journal), horizon, lambda: start), "model", ask, None)
        return [await wrapped(p) for p in ("p0", "p1")]

    original = asyncio.run(ask_with(models[0], "none"))
    assert asyncio.run(ask_with(models[1], 1))[0] == original[0] and models[1].prompts == ["p1"]


def test_calls_made_while_another_runs_are_refused(tmp_path: Path) -> None:
    start = RunStart.of(0, None)
    recorder = CallRecorder(CallLog(tmp_path / "j.sqlite"), "none", lambda: start)
    inner = recorded_callable(recorder, "tool", lambda: 1, None)
    outer = recorded_callable(recorder, "model", lambda: inner(), None)
    with pytest.raises(RuntimeError, match="one at a time"):
        outer()


def test_a_request_or_response_that_is_not_json_says_so(tmp_path: Path) -> None:
    recorder = CallRecorder(CallLog(tmp_path / "j.sqlite"), "none", lambda: RunStart.of(0, None))
    with pytest.raises(TypeError, match="arguments are not JSON.*request="):
        recorded_callable(recorder, "model", lambda x: 1, None)(object())
    with pytest.raises(TypeError, match="not JSON"):
        recorded_callable(recorder, "model", lambda: object(), None)()
    assert recorded_callable(recorder, "model", lambda x: [x.real], lambda x: {"n": x.real})(3) == [3]


@pytest.mark.parametrize("choice", ["sometimes", -1, True, 1.5])
def test_a_bad_horizon_is_refused_before_anything_is_opened(tmp_path: Path, choice: object) -> None:
    with pytest.raises(ValueError, match=r"replay must be one of \('none', 'effects', 'all'\) or a number"):
        AgentClient("g", "a", ["127.0.0.1:1"], tmp_path / "blobs", snapshot=dict, replay=choice)
    assert not (tmp_path / "blobs").exists()


# ---- an agent against the in-process coordinator ------------------------------------------

@pytest.fixture
def coordinator() -> Iterator[InProcessCoordinator]:
    with InProcessCoordinator() as c:
        yield c


def agent_life(coordinator: InProcessCoordinator, data: Path, replay: Horizon, step: Callable[[Any, dict], None],
               steps: int, checkpoint_after: int | None = None) -> dict[str, Any]:
    """Start the agent (resuming its checkpoint), run its loop until `steps` steps are
    done, checkpointing after step `checkpoint_after`, then stop as a crash would."""
    with connect(coordinator.address, data_dir=data, tls=coordinator.client_tls()) as rp:
        group = rp.group("team", mode="bcs", create=True)
        me = group.agent("writer", state={"step": 0, "said": []}, replay=replay, background=False).start()
        while me.state["step"] < steps:
            with me.atomic():
                step(me, me.state)
                me.state = {**me.state, "step": me.state["step"] + 1}
                if me.state["step"] == checkpoint_after:
                    me.checkpoint()
        me.client.close()  # no checkpoint, no deregistration: the coordinator sees a crash
        return me.state


@pytest.mark.parametrize("replay, replayed", [("all", 3), (2, 2)])
def test_an_agent_replays_its_model_after_a_crash_up_to_the_horizon(coordinator, tmp_path: Path, replay: Horizon,
                                                                    replayed: int) -> None:
    models = [FakeModel(1), FakeModel(2)]

    def step_with(model: FakeModel) -> Callable[[Any, dict], None]:
        def step(me: Any, state: dict) -> None:
            ask = me.recorded("model", model)
            last = state["said"][-1] if state["said"] else ""
            state["said"] = state["said"] + [ask(f"step {state['step']} after {last!r}")["text"]]
        return step

    original = agent_life(coordinator, tmp_path, "none", step_with(models[0]), steps=5, checkpoint_after=2)
    again = agent_life(coordinator, tmp_path, replay, step_with(models[1]), steps=7)
    horizon = 2 + replayed  # two steps before the checkpoint, then the replayed ones
    assert again["said"][:horizon] == original["said"][:horizon], (
        f"{again['said']} does not repeat {original['said']} up to step {horizon}")
    assert all(a != b for a, b in zip(again["said"][horizon:], original["said"][horizon:])), (
        f"{again['said']} repeats {original['said']} after step {horizon}")
    assert [p.split()[1] for p in models[1].prompts] == [str(s) for s in range(horizon, 7)], (
        f"the model was called live for {models[1].prompts}, expected steps {horizon} to 6 only")


def test_a_group_restore_replays_what_followed_the_savepoint(coordinator, tmp_path: Path) -> None:
    model = FakeModel(1)
    with connect(coordinator.address, data_dir=tmp_path, tls=coordinator.client_tls()) as rp:
        group = rp.group("team", mode="bcs", create=True)
        with group.agent("writer", state={"said": []}, replay="all", background=False) as me:
            ask = me.recorded("model", model)

            def step() -> None:
                me.state = {"said": me.state["said"] + [ask(f"after {me.state['said'][-1:]}")["text"]]}

            step()
            me.checkpoint()
            rp.conn.call("AdminService", "CreateSavepoint", pb.CreateSavepointRequest(
                request_id="sp", group="team", name="s"))
            for checkpointed in (True, False, True, False):  # the history runs across later checkpoints
                step()
                if checkpointed:
                    me.checkpoint()
            original = me.state["said"]
            rp.conn.call("AdminService", "RestoreGroup", pb.RestoreGroupRequest(
                request_id="restore", group="team", savepoint="s"))
            assert [o.roll_back.checkpoint_index for o in me.client.sync_orders()] == [1]
            assert me.state["said"] == original[:1], f"the rollback left {me.state}"
            while len(me.state["said"]) < 6:
                step()
            assert me.state["said"][:5] == original, f"{me.state['said']} does not repeat {original}"
            assert len(model.prompts) == 6, f"the model was called {len(model.prompts)} times, not 5 + 1 live"


def test_an_agent_killed_after_a_notification_sends_it_once(coordinator, tmp_path: Path) -> None:
    world = tmp_path / "sent.txt"
    world.touch()

    def life(seed: int, replay: str, crash_step: int) -> subprocess.CompletedProcess[str]:
        args = [coordinator.address, str(tmp_path / "data"), str(world), str(seed), replay, "4", str(crash_step)]
        return subprocess.run([sys.executable, "-m", "tests.support.replay_agent", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    with channels.environment(coordinator.client_tls()):
        killed = life(1, "none", crash_step=2)
        assert killed.returncode == -signal.SIGKILL, f"the agent did not die as planned: {killed.stderr}"
        sent_before = world.read_text().splitlines()
        restarted = life(2, "effects", crash_step=-1)
    assert restarted.returncode == 0, restarted.stderr
    said, sent = json.loads(restarted.stdout)["said"], world.read_text().splitlines()
    assert sent == said, f"the agent believes it sent {said}, the world got {sent}"
    assert len(sent_before) == 3 and sent[:3] == sent_before, f"sent {sent_before} before the crash, then {sent}"


def test_an_asyncio_agent_replays_its_coroutine_model(coordinator, tmp_path: Path) -> None:
    models = [FakeModel(1), FakeModel(2)]

    async def life(model: FakeModel, replay: Horizon, checkpoint_after: int) -> list[str]:
        async def ask(prompt: str) -> dict[str, str]:
            return model(prompt)

        async with connect_async(coordinator.address, data_dir=tmp_path, tls=coordinator.client_tls()) as rp:
            group = await rp.group("team", mode="bcs", create=True)
            me = await group.agent("writer", state=[], replay=replay, background=False).start()
            recorded = me.recorded("model", ask)
            while len(me.state) < 3:
                me.state = me.state + [(await recorded(f"step {len(me.state)}"))["text"]]
                if len(me.state) == checkpoint_after:
                    await me.checkpoint()
            await me.client.close()  # no deregistration: the coordinator sees a crash
            return me.state

    original = asyncio.run(life(models[0], "none", checkpoint_after=1))
    assert asyncio.run(life(models[1], 1, checkpoint_after=0))[:2] == original[:2]
    assert models[1].prompts == ["step 2"], f"the model was called live for {models[1].prompts}"


def test_a_checkpoint_whose_calls_the_journal_lacks_is_reported(tmp_path: Path, caplog) -> None:
    first = Process(tmp_path / "here.sqlite", RunStart.of(0, None), "none", seed=1)
    first.answers(["p0"])
    elsewhere = Process(tmp_path / "elsewhere.sqlite", first.checkpoint(1), "all", seed=2)
    with caplog.at_level("WARNING", logger="agent_client"):
        elsewhere.answers(["p1"])
    assert elsewhere.model.prompts == ["p1"] and "checkpoint 1 names recorded calls this journal does not hold" in (
        caplog.text), caplog.text
