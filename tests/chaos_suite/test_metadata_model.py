"""What the metadata workload believes, and when its run is over: pure, no cluster."""
from __future__ import annotations

from chaos.workloads.metadata_model import AgentModel, Beliefs, GroupModel
from chaos.workloads.metadata_processes import RunBudget
from coordinator.api.v1 import coordinator_pb2 as pb


def group(mode: str = "COORDINATED") -> GroupModel:
    return GroupModel("g", mode, {a: AgentModel("g", a) for a in ("p0", "p1")})


def test_a_newer_incarnation_retires_the_old_one_and_its_epochs() -> None:
    beliefs, a = Beliefs(), AgentModel("g", "p0")
    beliefs.adopt_incarnation(a, 2)
    a.epochs_done.add(5)
    beliefs.adopt_incarnation(a, 1)  # an older answer arriving late changes nothing
    assert (a.incarnation, a.retired, a.epochs_done) == (2, [], {5})
    beliefs.adopt_incarnation(a, 3)
    assert (a.incarnation, a.retired, a.epochs_done) == (3, [2], set())


def test_indexes_rise_jump_and_never_go_below_a_stored_one() -> None:
    beliefs, a = Beliefs(), AgentModel("g", "p0")
    assert beliefs.take_index(a) == 1
    assert beliefs.take_index(a, jump=2) == 4
    beliefs.stored(a, 9)
    assert (a.last_index, beliefs.take_index(a)) == (9, 10)
    beliefs.stored(a, 3)  # an old commit answered late: the next index stays ahead
    assert (a.last_index, beliefs.take_index(a)) == (3, 11)


def test_a_group_read_brings_agents_and_the_open_epoch_in_line() -> None:
    beliefs, g = Beliefs(), group()
    response = pb.GetGroupResponse(
        group=pb.Group(current_epoch=4),
        agents=[pb.Agent(agent_id="p0", incarnation=7, state=pb.AGENT_ALIVE, last_checkpoint_index=12),
                pb.Agent(agent_id="p1", incarnation=9, last_checkpoint_index=30),  # not alive: ignored
                pb.Agent(agent_id="stranger", incarnation=1, state=pb.AGENT_ALIVE)],
        recent_epochs=[pb.Epoch(epoch=4, state=pb.EPOCH_STARTED, members=["p0", "p1"], committed=["p1"])])
    beliefs.refresh(g, response)
    p0, p1 = g.agents["p0"], g.agents["p1"]
    assert (p0.incarnation, p0.next_index, p1.incarnation, p1.next_index) == (7, 13, 0, 1)
    assert (g.open_epoch, g.members, p1.epochs_done, p0.epochs_done) == (4, frozenset({"p0", "p1"}), {4}, set())
    response.recent_epochs[0].state = pb.EPOCH_STABLE
    beliefs.refresh(g, response)
    assert (g.open_epoch, g.closed_epoch) == (0, 4)


def test_an_uncoordinated_group_has_no_epochs_to_follow() -> None:
    beliefs, g = Beliefs(), group("CIC_BCS")
    beliefs.refresh(g, pb.GetGroupResponse(group=pb.Group(current_epoch=3), recent_epochs=[
        pb.Epoch(epoch=3, state=pb.EPOCH_STARTED, members=["p0"])]))
    assert (g.open_epoch, g.closed_epoch, g.members) == (0, 0, frozenset())


def test_the_run_ends_when_stopped_or_out_of_operations() -> None:
    budget = RunBudget(max_ops=2)
    budget.spend()
    assert budget.running()  # before start() no deadline: setting up may take its time
    budget.start(60.0)
    assert budget.running()
    budget.spend()
    assert not budget.running()
    late = RunBudget(max_ops=100)
    late.start(-1.0)
    assert not late.running()
    stopped = RunBudget(max_ops=100)
    stopped.start(60.0)
    stopped.stop()
    assert not stopped.pause(5.0)  # returns at once: stop() ends every pause


def test_a_held_budget_outlasts_its_deadline_until_released() -> None:
    budget = RunBudget(max_ops=100)
    budget.start(-1.0)  # past its deadline: a heal came later than planned
    budget.hold()
    assert budget.running() and budget.held
    budget.release(60.0)  # the last heal: run the tail after it
    assert budget.running() and not budget.held
    budget.release(-1.0)  # a later release never shortens the run
    assert budget.running()
    ended = RunBudget(max_ops=1)
    ended.start(60.0)
    ended.hold()
    ended.spend()
    assert not ended.running()  # the operation budget still bounds a held run
