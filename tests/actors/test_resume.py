"""A planner taking a run over folds the events its predecessor stored after the last
saved state into that state: the log is continued, never contradicted."""

from __future__ import annotations

from functools import partial

import msgspec

from actors.run import RunState, StepMeta, identity
from actors.run import fold as _fold
from protocols import (
    OutcomeRefused,
    PlanFinished,
    ReplanStarted,
    RunEvent,
    RunFinished,
    RunRecord,
    RunRequest,
    RunResumed,
    Step,
    StepDispatched,
    StepFailed,
    StepFinished,
    StepPlanned,
    StepStarted,
    Usage,
    UsageRecorded,
)
from runtime.dag import Scheduler, StepState
from runtime.nonces import Nonces

RUN = "run-1"
NONCES = Nonces("")
fold = partial(_fold, nonces=NONCES)


def step(sid: int, *deps: int) -> Step:
    return Step(id=sid, role="worker", tool="echo", args={"text": "x"}, depends_on=list(deps))


def saved(*steps: tuple[Step, StepState], closed: bool = False) -> RunState:
    """A run as restored: steps in these states (attempt 1), next event number 10."""
    scheduler = Scheduler.restore(
        known_roles=["worker"], known_tools=["echo"], max_steps=20, round=0, closed=closed,
        steps=[(s, 0, state, 1, "out" if state is StepState.DONE else "") for s, state in steps])
    record = RunRecord(run_id=RUN, request=RunRequest(goal="g"), next_seq=10,
                       plan_closed=closed)
    return RunState(record, scheduler, {s.id: StepMeta(0) for s, _ in steps})


def tail(*events: RunEvent, fence: int = 7) -> list[tuple[RunEvent, int]]:
    return [(msgspec.structs.replace(e, seq=10 + i), fence) for i, e in enumerate(events)]


def test_steps_planned_and_dispatched_after_the_last_save_stand_as_announced() -> None:
    state = saved((step(1), StepState.RUNNING))
    out = fold(state, tail(
        StepPlanned(run_id=RUN, round=0, step=step(2)),
        StepDispatched(run_id=RUN, step_id=2, role="worker", attempt=1),
        StepStarted(run_id=RUN, step_id=2, attempt=1, executor="worker/a", delivery=1,
                    heartbeat=0.5),
        StepPlanned(run_id=RUN, round=0, step=step(3, 1)),
        PlanFinished(run_id=RUN, round=0, steps=3),
    ), next_seq=10)
    s = state.scheduler
    assert s.state(2) is StepState.RUNNING and s.state(3) is StepState.PENDING and s.closed
    assert state.meta[2].claimants == {"worker/a#1"} and state.meta[2].beats == 0.5
    assert out.republish == {2: NONCES.msg_id(f"{RUN}/2/1/f7")}  # sent again under its old id
    assert out.last_seq == 14 and state.record.plan_closed


def test_announced_outcomes_are_not_told_twice() -> None:
    """A failure its executor reported comes again with its message: not applied here,
    but its event is not repeated when it does."""
    state = saved((step(1), StepState.RUNNING))
    failed = StepFailed(run_id=RUN, step_id=1, attempt=1, error="bad", will_retry=False,
                        cause="error")
    usage = UsageRecorded(run_id=RUN, source="step:1", usage=Usage(calls=1),
                          total=Usage(calls=3))
    out = fold(state, tail(failed, usage), next_seq=10)
    assert state.scheduler.state(1) is StepState.RUNNING  # its result comes again
    assert identity(failed) in out.announced and identity(failed) in out.told
    assert out.usage == Usage(calls=3)


def test_a_failure_decided_by_a_clock_is_applied() -> None:
    state = saved((step(1), StepState.RUNNING))
    fold(state, tail(StepFailed(run_id=RUN, step_id=1, attempt=1, error="no worker",
                                will_retry=False, cause="unserved")), next_seq=10)
    assert state.scheduler.state(1) is StepState.FAILED


def test_a_replan_and_the_end_are_taken_as_told() -> None:
    state = saved((step(1), StepState.DONE), (step(2), StepState.RUNNING), closed=True)
    out = fold(state, tail(ReplanStarted(run_id=RUN, round=1, reason="why", source="x")),
               next_seq=10)
    assert state.scheduler.round == 1 and not state.record.plan_closed
    assert state.record.round_reason == "why" and ("decision", 0) in out.told
    assert 2 in state.scheduler.dropped
    out = fold(saved((step(1), StepState.DONE)), tail(RunFinished(run_id=RUN, answer="a")),
               next_seq=10)
    assert isinstance(out.terminal, RunFinished)


def test_events_before_the_saved_state_are_ignored() -> None:
    state = saved((step(1), StepState.RUNNING))
    old = (StepFailed(run_id=RUN, seq=9, step_id=1, attempt=1, error="e", will_retry=False,
                      cause="timeout"), 7)
    out = fold(state, [old], next_seq=10)
    assert state.scheduler.state(1) is StepState.RUNNING and out.last_seq == 9


def test_a_retry_its_clock_decided_is_replayed_with_its_next_attempt() -> None:
    state = saved((step(1), StepState.RUNNING))
    fold(state, tail(StepFailed(run_id=RUN, step_id=1, attempt=1, error="silent",
                                will_retry=True, cause="heartbeat")), next_seq=10)
    assert state.scheduler.state(1) is StepState.READY  # dispatched again on resume
    assert state.scheduler.attempt(1) == 2


def test_a_finish_whose_event_holds_the_whole_output_is_applied_at_once() -> None:
    state = saved((step(1), StepState.RUNNING), (step(2, 1), StepState.PENDING), closed=True)
    finished = StepFinished(run_id=RUN, step_id=1, attempt=1, output="one", executor="w/a")
    usage = UsageRecorded(run_id=RUN, source="step:1", usage=Usage(calls=1),
                          total=Usage(calls=1))
    out = fold(state, tail(usage, finished), next_seq=10)
    s = state.scheduler
    assert s.state(1) is StepState.DONE and s.results[1] == "one"
    assert s.state(2) is StepState.READY  # its dependent goes on without waiting
    assert identity(finished) in out.told and not out.announced  # nothing left to re-derive
    assert state.meta[1].usage == Usage(calls=1)  # its result will not come again
    cut = StepFinished(run_id=RUN, step_id=1, attempt=1, output="x" * 4001)
    state = saved((step(1), StepState.RUNNING))
    fold(state, tail(cut), next_seq=10)
    assert state.scheduler.state(1) is StepState.RUNNING  # a cut output waits for its result


def test_a_replayed_finish_counts_the_usage_of_its_own_attempt_only() -> None:
    """The first attempt's usage comes again with its (unacknowledged) failed result."""
    state = saved((step(1), StepState.RUNNING))
    fold(state, tail(
        UsageRecorded(run_id=RUN, source="step:1", usage=Usage(calls=1), total=Usage(calls=1)),
        StepFailed(run_id=RUN, step_id=1, attempt=1, error="e", will_retry=True,
                   cause="error"),
        StepDispatched(run_id=RUN, step_id=1, role="worker", attempt=2),
        UsageRecorded(run_id=RUN, source="step:1", usage=Usage(calls=2), total=Usage(calls=3)),
        StepFinished(run_id=RUN, step_id=1, attempt=2, output="two", executor="w/a"),
    ), next_seq=10)
    assert state.scheduler.state(1) is StepState.DONE and state.scheduler.attempt(1) == 2
    assert state.meta[1].usage == Usage(calls=2)


def test_numbers_the_previous_owner_never_stored_are_reported_as_skipped() -> None:
    """Its pipelined event 11 was lost in a failover, 12 was stored, then it was fenced off:
    11 never will be, 12 may rest on it, and the new owner says so (``run.resumed`` lists
    both)."""
    state = saved((step(1), StepState.RUNNING))
    events = tail(StepStarted(run_id=RUN, step_id=1, attempt=1, executor="worker/a",
                              delivery=1, heartbeat=0.5),
                  UsageRecorded(run_id=RUN, source="planner", usage=Usage(), total=Usage()),
                  UsageRecorded(run_id=RUN, source="planner", usage=Usage(), total=Usage()))
    out = fold(state, [events[0], events[2]], next_seq=10)
    assert out.skipped == [11, 12] and out.last_seq == 12


def test_events_stored_after_a_lost_one_do_not_count() -> None:
    """Chaos seed 42, run c42-0007: the previous owner's step 1 finish and step 2 dispatch
    (10, 11) were lost in a failover, the worker's claim of step 2 (12) was stored, then the
    run was taken over. The claim rests on a dispatch the log lacks: it is not folded (step
    2 waits to be dispatched), not announced (the claim, when it comes again, is told after
    the new dispatch), and listed as skipped, so readers drop it too (here the tail holds
    the ``run.resumed`` that listed it: not listed again). The next owner's own events (its
    ``run.resumed`` on) count again."""
    state = saved((step(1), StepState.RUNNING), (step(2, 1), StepState.PENDING), closed=True)
    claim = StepStarted(run_id=RUN, step_id=2, attempt=1, executor="worker/a", delivery=1,
                        heartbeat=0.5)
    events = tail(StepFinished(run_id=RUN, step_id=1, attempt=1, output="one"),
                  StepDispatched(run_id=RUN, step_id=2, role="worker", attempt=1),
                  claim,
                  RunResumed(run_id=RUN, planner="p/2", previous="p/1", skipped=[10, 11, 12]),
                  StepFinished(run_id=RUN, step_id=1, attempt=1, output="one"))
    out = fold(state, events[2:], next_seq=10)
    assert out.skipped == [] and out.last_seq == 14
    assert fold(saved((step(1), StepState.RUNNING), (step(2, 1), StepState.PENDING),
                      closed=True), events[2:3], next_seq=10).skipped == [10, 11, 12]
    assert identity(claim) not in out.announced | out.told
    assert state.scheduler.state(1) is StepState.DONE  # the new owner's finish (14) counts
    assert state.scheduler.state(2) is StepState.READY and not state.meta[2].claimants


def test_a_replay_does_not_revive_what_an_earlier_takeover_declared_lost() -> None:
    """Chaos seed 46, run c46-0145: the first owner's events 10-14 were never stored, its
    step 1 finish and step 2 dispatch (15, 16) were; the second owner declared 10-16 lost
    (17) and saved no record of steps 1 and 2. The third owner replays those steps from
    their planned events, which reaches back past 17: the finish and the dispatch it
    declared lost are not applied (readers drop them), so step 1 waits for its result to
    come again and be told anew, and step 2 for its dispatch; nothing is declared again."""
    state = saved()
    finish = StepFinished(run_id=RUN, step_id=1, attempt=1, output="one")
    numbered = [(3, StepPlanned(run_id=RUN, round=0, step=step(1))),
                (4, StepDispatched(run_id=RUN, step_id=1, role="worker", attempt=1)),
                (5, StepStarted(run_id=RUN, step_id=1, attempt=1, executor="worker/a",
                                delivery=1, heartbeat=0.5)),
                (6, StepPlanned(run_id=RUN, round=0, step=step(2, 1))),
                (15, finish),
                (16, StepDispatched(run_id=RUN, step_id=2, role="worker", attempt=1)),
                (17, RunResumed(run_id=RUN, planner="p/2", previous="p/1",
                                skipped=list(range(10, 17))))]
    events = [(msgspec.structs.replace(e, seq=n), 7) for n, e in numbered]
    out = fold(state, events, next_seq=18, replayed={1, 2})
    s = state.scheduler
    assert s.state(1) is StepState.RUNNING and state.meta[1].claimants == {"worker/a#1"}
    assert s.state(2) is StepState.PENDING
    assert identity(finish) not in out.announced | out.told
    assert out.skipped == [] and out.last_seq == 17 and out.republish == {}
    # Past the replay too: numbers declared lost are not folded nor declared again.
    state = saved((step(1), StepState.RUNNING), (step(2, 1), StepState.PENDING))
    out = fold(state, tail(finish, RunResumed(run_id=RUN, planner="p/2", previous="p/1",
                                              skipped=[10])), next_seq=10)
    assert state.scheduler.state(1) is StepState.RUNNING and out.skipped == []


def early(*events: RunEvent, first: int = 3, fence: int = 7) -> list[tuple[RunEvent, int]]:
    """Events numbered from ``first``: before the saved state's next number (10)."""
    return [(msgspec.structs.replace(e, seq=first + i), fence) for i, e in enumerate(events)]


def test_steps_without_a_record_are_rebuilt_from_their_events_before_the_save() -> None:
    """Step 2 was planned, dispatched and claimed before the save (events 3-5), which wrote
    no record of it; step 1 has one. The plan was closed then: step 2 is adopted all the
    same, its task is not sent again (the save confirmed it stored), and the events of
    step 1 and of the run before the save change nothing."""
    state = saved((step(1), StepState.DONE), closed=True)
    out = fold(state, [
        *early(StepPlanned(run_id=RUN, round=0, step=step(1)),
               StepPlanned(run_id=RUN, round=0, step=step(2, 1)),
               StepDispatched(run_id=RUN, step_id=1, role="worker", attempt=1),
               StepDispatched(run_id=RUN, step_id=2, role="worker", attempt=1),
               StepStarted(run_id=RUN, step_id=2, attempt=1, executor="worker/a",
                           delivery=1, heartbeat=0.5),
               PlanFinished(run_id=RUN, round=0, steps=2)),
        *tail(StepStarted(run_id=RUN, step_id=2, attempt=1, executor="worker/b",
                          delivery=2, heartbeat=0.5))], next_seq=10, replayed={2})
    s = state.scheduler
    assert s.state(1) is StepState.DONE and s.attempt(1) == 1
    assert s.state(2) is StepState.RUNNING and s.attempt(2) == 1 and s.closed
    assert state.meta[2].claimants == {"worker/a#1", "worker/b#2"}
    assert state.meta[2].planned_seq == 4 and not state.meta[2].recorded
    assert out.republish == {} and out.last_seq == 10 and out.skipped == []


def test_a_step_rebuilt_dispatched_without_a_claim_has_its_task_sent_again() -> None:
    """Chaos seed 47, run c47-0075: step 1 was dispatched before the save, which wrote no
    record of it (so no task sequence), and no claim came. Its claim deadline watches the
    delivery of that sequence, so the new owner sends the task again under its id (the
    stream answers with the sequence it has, or stores it again); a claimed step is not."""
    state = saved(closed=True)
    out = fold(state, [
        *early(StepPlanned(run_id=RUN, round=0, step=step(1)),
               StepPlanned(run_id=RUN, round=0, step=step(2)),
               StepDispatched(run_id=RUN, step_id=1, role="worker", attempt=1),
               StepDispatched(run_id=RUN, step_id=2, role="worker", attempt=1),
               StepStarted(run_id=RUN, step_id=2, attempt=1, executor="worker/a",
                           delivery=1, heartbeat=0.5),
               PlanFinished(run_id=RUN, round=0, steps=2))], next_seq=10, replayed={1, 2})
    assert state.scheduler.state(1) is StepState.RUNNING and not state.meta[1].claimants
    assert out.republish == {1: state.meta[1].task_id} and state.meta[1].task_id


def test_finished_steps_without_a_record_are_rebuilt_done_with_their_output_and_usage() -> None:
    """Step 1 finished before the save, which wrote no record of it (its events say all):
    the replay makes it done with the output and usage its events hold, step 2, which
    needs it, is ready with that output, and the run's usage stays the saved total (the
    step's usage event is older than the state)."""
    state = saved(closed=True)
    out = fold(state, [
        *early(StepPlanned(run_id=RUN, round=0, step=step(1)),
               StepPlanned(run_id=RUN, round=0, step=step(2, 1)),
               PlanFinished(run_id=RUN, round=0, steps=2),
               StepDispatched(run_id=RUN, step_id=1, role="worker", attempt=1),
               UsageRecorded(run_id=RUN, source="step:1", usage=Usage(calls=1),
                             total=Usage(calls=4)),
               StepStarted(run_id=RUN, step_id=1, attempt=1, executor="worker/a",
                           delivery=1, heartbeat=0.5),
               StepFinished(run_id=RUN, step_id=1, attempt=1, output="one",
                            executor="worker/a"))], next_seq=10, replayed={1, 2})
    s = state.scheduler
    assert s.state(1) is StepState.DONE and s.results[1] == "one"
    assert s.state(2) is StepState.READY and s.inputs_for(step(2, 1)) == {1: "one"}
    assert state.meta[1].usage == Usage(calls=1) and state.meta[1].executor == "worker/a"
    assert out.usage is None and out.republish == {}


def test_a_step_with_a_record_newer_than_the_header_is_not_set_back() -> None:
    """A save wrote step 2's record (done) but died before its header: the header still
    lists step 2 as replayed, and its old dispatch does not start it again."""
    state = saved((step(1), StepState.DONE), (step(2), StepState.DONE), closed=True)
    out = fold(state, early(StepPlanned(run_id=RUN, round=0, step=step(2)),
                            StepDispatched(run_id=RUN, step_id=2, role="worker", attempt=1)),
               next_seq=10, replayed={2})
    assert state.scheduler.state(2) is StepState.DONE and out.republish == {}


def test_a_discarded_steps_events_before_the_save_are_not_replayed() -> None:
    """Steps the saved state no longer has (a rejected plan discarded them) are not listed
    as replayed, and stay gone."""
    state = saved((step(1), StepState.RUNNING))
    fold(state, early(StepPlanned(run_id=RUN, round=0, step=step(5))), next_seq=10,
         replayed={1})
    assert [s.id for s in state.scheduler.steps] == [1]


def test_events_stored_out_of_their_order_are_folded_in_their_order() -> None:
    """A pipelined event whose first try went unanswered is stored again after events sent
    later, so the stream can hold a step's end before its dispatch (chaos seed 7, run
    c7-0004: every planner taking the run over saw the step running again, and waited on it
    for good). The fold follows the events' numbers, not the stream."""
    state = saved((step(1), StepState.DONE))
    events = [msgspec.structs.replace(e, seq=10 + i) for i, e in enumerate((
        StepPlanned(run_id=RUN, round=0, step=step(2, 1)),
        PlanFinished(run_id=RUN, round=0, steps=2),
        StepDispatched(run_id=RUN, step_id=2, role="worker", attempt=1),
        StepStarted(run_id=RUN, step_id=2, attempt=1, executor="worker/a", delivery=1,
                    heartbeat=0.5),
        StepFinished(run_id=RUN, step_id=2, attempt=1, output="r2", executor="worker/a",
                     duration=1.0)))]
    stream = [events[0], events[1], events[4], events[2], events[3]]  # 14 before 12 and 13
    fold(state, [(e, 7) for e in stream], next_seq=10)
    assert state.scheduler.state(2) is StepState.DONE
    assert state.scheduler.is_done()


def test_a_result_refused_for_want_of_a_claim_starts_the_claim_deadline_after_a_takeover(
) -> None:
    """A quick step's result came from a process whose claim the run never applied (lost
    with a planner that died), so it was refused and acknowledged: nothing of that attempt
    comes again. A planner taking the run over learns it from the refusal's event, so the
    attempt meets the claim deadline instead of running for good (chaos seed 43, runs
    c43-0047 and c43-0049: 19 takeovers, each waiting on it)."""
    state = saved((step(1), StepState.DONE))
    refused = OutcomeRefused(run_id=RUN, kind="step.result", step_id=2, attempt=1,
                             sender="worker/a", reason="worker/a never claimed attempt 1 of "
                             "step 2 in delivery 1 (claimed by: nobody yet)", ts=123.0)
    events = [msgspec.structs.replace(e, seq=10 + i) for i, e in enumerate((
        StepPlanned(run_id=RUN, round=0, step=step(2, 1)),
        PlanFinished(run_id=RUN, round=0, steps=2),
        StepDispatched(run_id=RUN, step_id=2, role="worker", attempt=1),
        refused))]
    fold(state, [(e, 7) for e in events], next_seq=10)
    assert state.scheduler.state(2) is StepState.RUNNING
    assert state.meta[2].unclaimed_at == 123.0
    assert not state.meta[2].claimants
