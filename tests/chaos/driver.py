"""One chaos run, start to end: cluster, fleet, workload, faults, then the verdicts.

The driver process holds the scripted model server, a client connection and an observer
connection; everything else is a real process: three nats-servers (n3 on the side
namespace), planners, executors of the ``worker`` role, synthesizers and a supervisor.
Runs are submitted through ``runtime.client`` and spread over the fault loop; afterwards
every run gets a bounded wait for its terminal event, and its stored log is judged.

By default each of them is its own NATS user (``plancast auth init``): the admin
provisions the streams and the roles' consumers, each runner connects as its role, the
client submits as ``client`` and the observer follows as ``watcher``; whatever a node
refuses a user is counted (``ChaosConfig.users=False``: no users, as before).
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from protocols import RunFailed, encode
from runtime.bus import ADMIN, CLIENT, WATCHER, open_bus, provision_consumers
from runtime.config import Settings, TeamConfig, load_team
from runtime.testing import open_scripted_model_server

from .cluster import Node, start_nodes, stop_nodes
from .evidence import permission_violations, run_lines
from .faults import DURATIONS, KINDS, NODE_KINDS, RECOVERY_WAIT, FaultLoop
from .fleet import ROOT, Fleet, Member, StartFailed
from .ledger import Execution, read_ledger, redelivered
from .netns import Network, open_network
from .observe import StoredLog, Tracked, follow_run, read_log, submit_run
from .records import recorded_times
from .report import Report, judge, ledger_figures, silences, submission_figures, timelines
from .users import Users, make_users
from .workload import ROLE as WORKER
from .workload import RunSpec, make_runs, scenario

PREFIX = "chaos"
TIMINGS = {"PLANCAST_ACK_WAIT": "2", "PLANCAST_RUN_LEASE": "3",
           "PLANCAST_HEARTBEAT_INTERVAL": "0.5", "PLANCAST_DRAIN_TIMEOUT": "1"}
"""The runners' settings: a short ack wait and lease, so recovery is quick."""
HOLD = 4.0
"""A run holds its in-flight slot for at most this many times its critical path."""
PINGS = (1.0, 3)
"""Client ping interval and outstanding pings: a dead TCP path is noticed in ~3 s."""
TIMEOUTS = {"step": 60, "heartbeat": 5, "unserved": 60, "review": 60, "synthesis": 60,
            "plan": 60, "run": 0}
"""The team's ``[timeouts]``, written when the team file takes them: a silent executor is
given up in seconds; everything else outlasts a partition (up to 20 s) and the cluster's
recovery after it (up to ~25 s measured)."""


@dataclass
class ChaosConfig:
    runs: int = 20
    faults_per_kind: int = 2
    seed: int = 1
    in_flight: int = 10
    """Most runs in flight; run lengths are chosen so about this many overlap."""
    planners: int = 3
    executors: int = 3
    synthesizers: int = 2
    pace: tuple[float, float] = (3.0, 6.0)
    """Seconds between faults (uniform, seeded)."""
    settle: float = 150.0
    """Seconds every run gets, after the last fault healed, to reach its end."""
    recovery_wait: float = RECOVERY_WAIT
    """Seconds a node fault waits at most for the cluster's health before the next."""
    kinds: tuple[str, ...] = KINDS
    timeouts: bool | None = None
    """Write ``[timeouts]`` into the team file; None: if this checkout's TeamConfig has it."""
    users: bool = True
    """One NATS user per role, for the client and the observer (False: no users at all)."""
    work_dir: Path | None = None
    """Where logs, the ledger and the nats data go (a new temp dir if None)."""
    log: Callable[[str], None] = field(default=print, repr=False)


def team_toml(base_url: str, timeouts: bool) -> str:
    text = f"""
[models.scripted]
model = "scripted-model"
base_url = "{base_url}"
timeout = 20

[roles.planner]
kind = "planner"
model = "scripted"

[roles.worker]
description = "records its execution (ledger) and joins outputs (echo)"
tools = ["ledger", "echo"]
tool_steps_only = true
concurrency = 4
{"step_timeout = 60" if timeouts else ""}

[roles.synthesizer]
kind = "synthesizer"
model = "scripted"

[roles.supervisor]
kind = "supervisor"
"""
    if timeouts:
        text += "\n[timeouts]\n" + "".join(f"{k} = {v}\n" for k, v in TIMEOUTS.items())
    return text


def members(config: ChaosConfig, network: Network) -> list[Member]:
    """Planners, executors and synthesizers; the last of each lives on the side."""
    side = network.namespace is not None
    found = []
    for role, count in (("planner", config.planners), ("worker", config.executors),
                        ("synthesizer", config.synthesizers)):
        found += [Member(f"{role}-{i}", role, side and i == count and count > 1)
                  for i in range(1, count + 1)]
    found.append(Member("supervisor-1", "supervisor", False))
    return found


def runner_env(urls: str, work: Path) -> dict[str, str]:
    """Every runner's environment (the fleet adds each one's credentials)."""
    import os

    inherited = {k: v for k, v in os.environ.items() if k not in ("NATS_CREDS", "PLANCAST_CREDS")}
    return {**inherited, **TIMINGS, "NATS_URL": urls, "PLANCAST_PREFIX": PREFIX,
            "PLANCAST_REPLICAS": "3", "PLANCAST_TEST_DIR": str(work),
            "PLANCAST_TEST_LOG": "INFO", "PLANCAST_PING_INTERVAL": str(PINGS[0]),
            "PLANCAST_MAX_OUTSTANDING_PINGS": str(PINGS[1]), "OPENAI_API_KEY": "scripted",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


async def run_chaos(config: ChaosConfig) -> Report:
    work = config.work_dir or Path(tempfile.mkdtemp(prefix="plancast-chaos-"))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    log = config.log
    timeouts = "timeouts" in TeamConfig.model_fields if config.timeouts is None \
        else config.timeouts
    # A run lasts about its path plus ~3 s of planning and joining: about in_flight overlap.
    path = min(max(config.in_flight * fault_seconds(config) / config.runs - 3.0, 2.0), 30.0)
    specs = make_runs(config.seed, config.runs, path_seconds=path)
    log(f"chaos: seed {config.seed}, {config.runs} runs (critical path ~{path:.1f}s), "
        f"{config.faults_per_kind} faults of each kind, timeouts {'on' if timeouts else 'off'}"
        f", users {'on' if config.users else 'off'}; work dir {work}")
    with open_network(wanted="partition" in config.kinds) as network:
        if network.unavailable and "partition" in config.kinds:
            log(f"chaos: partitions unavailable: {network.unavailable}")
        async with open_scripted_model_server(scenario(specs), host=network.model_addr) \
                as model:
            team_file = work / "team.toml"
            team_file.write_text(team_toml(model.base_url, timeouts))
            users = make_users(work / "auth", PREFIX, load_team(team_file)) \
                if config.users else None
            nodes = await start_nodes(work / "nats", network, users)
            try:
                urls = ",".join(n.url for n in nodes)
                fleet = Fleet(team_file, runner_env(urls, work), network, work / "logs",
                              members(config, network), users)
                try:
                    return await _drive(config, work, network, nodes, fleet, specs, urls,
                                        timeouts)
                finally:
                    fleet.close()
            finally:
                stop_nodes(nodes)


def settings_as(users: Users | None, user: str, urls: str) -> Settings:
    """The driver's settings for connecting as ``user`` (anonymous without users)."""
    return Settings(nats_url=urls, prefix=PREFIX, replicas=3, ping_interval=PINGS[0],
                    max_outstanding_pings=PINGS[1], creds=users.creds(user) if users else None)


async def _provision(users: Users | None, fleet: Fleet, urls: str) -> None:
    """With users, the admin makes the streams and the roles' consumers (a role's user may
    create nothing), with the runners' ack wait; without, the first connection and each
    runner make them."""
    if users is None:
        return
    settings = settings_as(users, ADMIN, urls).model_copy(
        update={"ack_wait": float(TIMINGS["PLANCAST_ACK_WAIT"])})
    async with open_bus(settings) as admin:
        await provision_consumers(admin.js, load_team(fleet.team_file), settings)


async def _drive(config: ChaosConfig, work: Path, network: Network, nodes: list[Node],
                 fleet: Fleet, specs: list[RunSpec], urls: str, timeouts: bool) -> Report:
    log = config.log
    await _provision(fleet.users, fleet, urls)
    async with open_bus(settings_as(fleet.users, CLIENT, urls)) as client, \
            open_bus(settings_as(fleet.users, WATCHER, urls)) as observer:
        started = time.monotonic()
        await fleet.start_all()
        log(f"chaos: {len(fleet.members)} actor processes serve "
            f"({time.monotonic() - started:.1f}s)")
        runs = [Tracked(spec) for spec in specs]
        loop = FaultLoop(rng=random.Random(config.seed), fleet=fleet, nodes=nodes,
                         network=network, per_kind=config.faults_per_kind,
                         pace=config.pace, kinds=config.kinds,
                         recovery_wait=config.recovery_wait, log=_stamped(log))
        notes: list[str] = []
        samples: list[int] = []
        t0 = time.time()
        async with anyio.create_task_group() as tg:
            faults_done = anyio.Event()
            tg.start_soon(_faults, loop, faults_done)
            tg.start_soon(_watch, fleet, notes, _stamped(log))
            tg.start_soon(_progress, runs, loop, samples, faults_done, _stamped(log))
            async with anyio.create_task_group() as followers:
                followers.start_soon(_submit_all, client, observer, runs, followers, loop,
                                     config.in_flight)
                await faults_done.wait()
                log(f"chaos: faults over after {time.time() - t0:.0f}s; waiting up to "
                    f"{config.settle:.0f}s for the runs to end")
                with anyio.move_on_after(config.settle):
                    for run in runs:
                        await run.ended.wait()
                followers.cancel_scope.cancel()
            tg.cancel_scope.cancel()
        until = time.time()
        logs = {run.run_id: await read_log(observer, run.run_id) for run in runs}
    for run in runs:
        if error := logs[run.run_id].error:  # judge what the follower saw instead
            notes.append(f"{run.run_id}: its stored events could not be read ({error}); "
                         f"judged on the {len(run.events)} events followed live")
            logs[run.run_id] = StoredLog(list(run.events))
    _keep_logs(work / "events", logs)
    verdicts = [judge(run, logs[run.run_id]) for run in runs]
    for verdict in verdicts:
        if verdict.troubled or verdict.status == "failed":
            verdict.evidence = run_lines(work / "logs", verdict.run_id, fleet.owner_of)
    executions = read_ledger(work)
    recorded_at = await _recorded_times(fleet.users, urls, executions, notes)
    duplicates, redeliveries, repeats = ledger_figures(executions, recorded_at)
    refused = permission_violations(n.server.log_path for n in nodes)
    notes += [f"a route between nodes was refused its login: {line}" for line in
              permission_violations((n.server.log_path for n in nodes), routes=True)]
    notes += [f"{r.run_id}: follower restarted {r.restarts} times" for r in runs if r.restarts]
    submissions, failed_submissions = submission_figures(loop.faults, runs, until)
    return Report(
        config={**{k: v for k, v in asdict(config).items() if k != "log"},
                "work_dir": str(work), "timeouts": timeouts, "users": config.users,
                "partition_network":
                network.namespace or "", "nodes": [n.url for n in nodes]},
        runs=verdicts, duplicates=duplicates, redeliveries=redeliveries,
        executions=len(executions), faults=loop.faults, unavailable=loop.unavailable,
        silences=silences(loop.faults, timelines(runs, logs), until), seconds=until - t0,
        in_flight={"mean": statistics.mean(samples) if samples else 0.0,
                   "max": float(max(samples, default=0))},
        members={m.name: m.pids for m in fleet.members},
        notes=notes, permission_violations=refused, submissions=submissions,
        failed_submissions=failed_submissions, repeats=repeats)


async def _recorded_times(users: Users | None, urls: str, executions: list[Execution],
                          notes: list[str]) -> dict[tuple[str, int, int], float] | None:
    """When the attempts run more than once had their results recorded (read as the admin:
    no role may read another's records)."""
    attempts = redelivered(executions)
    try:
        async with open_bus(settings_as(users, ADMIN, urls)) as admin:
            return await recorded_times(admin, WORKER, attempts)
    except Exception as exc:  # judged on the ledger alone then (stricter)
        notes.append(f"the records of finished attempts could not be read ({exc!r}): "
                     "repeats judged on the ledger alone")
        return None


def _keep_logs(folder: Path, logs: dict[str, StoredLog]) -> None:
    """Each run's stored events as JSON Lines, the evidence behind its verdict."""
    folder.mkdir(exist_ok=True)
    for run_id, stored in logs.items():
        (folder / f"{run_id}.jsonl").write_bytes(
            b"".join(encode(e) + b"\n" for e in stored.events))


RECOVERY = {"node_stop": 5.0, "node_kill": 5.0, "partition": 40.0}
"""Seconds the cluster took to be healthy again after each kind of node fault (measured on
two cores; the next node fault waits for it)."""


def fault_seconds(config: ChaosConfig) -> float:
    """About how long the fault loop runs: the pace, plus half of each node fault's hold
    and its recovery (one node fault at a time: the next waits for the last to heal)."""
    node_hold = sum(sum(DURATIONS[k]) / 2 + min(RECOVERY[k], config.recovery_wait)
                    for k in config.kinds if k in NODE_KINDS)
    return config.faults_per_kind * (len(config.kinds) * sum(config.pace) / 2 + node_hold / 2)


async def _submit_all(client: Any, observer: Any, runs: list[Tracked], followers: Any,
                      loop: FaultLoop, in_flight: int) -> None:
    """Spread the runs over the faults: run i goes in once i/len(runs) of the faults were
    injected and fewer than ``in_flight`` runs are in flight."""
    slots = anyio.Semaphore(in_flight)
    for i, run in enumerate(runs):
        await loop.injected(i * loop.total // len(runs))
        await slots.acquire()  # released when the run ends (or looks hung)
        run.submitted = time.time()
        followers.start_soon(_run, client, observer, run, slots)


def _stamped(log: Callable[[str], None]) -> Callable[[str], None]:
    t0 = time.time()
    return lambda line: log(f"{time.time() - t0:7.1f}s {line}")


async def _faults(loop: FaultLoop, done: anyio.Event) -> None:
    try:
        await loop.run()
    finally:
        done.set()


async def _run(client: Any, observer: Any, run: Tracked, slots: anyio.Semaphore) -> None:
    """Submit (as the client) and follow (as the observer) one run. Its slot frees when it
    ends, or once it has taken ``HOLD`` times its critical path (it may have hung: it must
    not stall the workload)."""
    held = max(60.0, HOLD * run.spec.critical_path)
    async with anyio.create_task_group() as tg:
        async def free_slot() -> None:
            with anyio.move_on_after(held):
                await run.ended.wait()
            slots.release()

        tg.start_soon(free_slot)
        if await submit_run(client, run):
            await follow_run(observer, run)


async def _watch(fleet: Fleet, notes: list[str], log: Callable[[str], None]) -> None:
    """A member that exits by itself is reported, and restarted as a service manager would."""
    while True:
        await anyio.sleep(1.0)
        for member in fleet.members:
            if member.faulted or member.alive or member.proc is None:
                continue
            code = member.proc.returncode
            note = (f"{member.name} (pid {member.proc.pid}) exited by itself with code {code}; "
                    f"see {fleet.log_path(member)}")
            notes.append(note)
            log(note)
            member.faulted = True
            try:
                await fleet.start(member)
            except StartFailed as exc:
                notes.append(str(exc))
            finally:
                member.faulted = False


async def _progress(runs: list[Tracked], loop: FaultLoop, samples: list[int],
                    faults_done: anyio.Event, log: Callable[[str], None]) -> None:
    tick = 0
    while True:
        await anyio.sleep(1.0)
        tick += 1
        active = sum(r.active for r in runs)
        if not faults_done.is_set():
            samples.append(active)
        if tick % 10 == 0:
            ended = [r for r in runs if r.ended.is_set()]
            failed = sum(1 for r in ended if r.events and isinstance(r.events[-1], RunFailed))
            log(f"progress: submitted {sum(bool(r.submitted) for r in runs)}, active {active}, "
                f"ended {len(ended)} ({failed} failed), faults {len(loop.faults)}")
