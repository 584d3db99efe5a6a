"""The benchmark's knobs and the scripted latencies every suite shares (seconds, unscaled)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SUITES = ("shapes", "overhead", "concurrent", "peers", "profile")


@dataclass(frozen=True)
class Latencies:
    """Scripted model and tool times at scale 1; every one is multiplied by the time scale."""

    planner_ttft: float = 1.2
    """Seconds before the planner's first plan line."""
    planner_per_line: float = 0.4
    """Seconds between plan lines (one step object per line)."""
    synthesizer_ttft: float = 1.62
    """The joiner's whole answer (LLMCompiler's joiner latency)."""
    search_mean: float = 0.61
    """Mean of the lognormal ``search`` time (LLMCompiler's Movie figure)."""
    search_sigma: float = 0.48
    """Sigma of log(search time)."""
    math_mean: float = 0.35
    """Mean of the lognormal ``math`` time (an assumption: a short LLM-backed calculation)."""
    math_sigma: float = 0.3
    """Sigma of log(math time)."""
    straggler_factor: float = 5.0
    """How much slower the straggler's search is than its drawn time."""

    @property
    def react_call(self) -> float:
        """One ReAct round trip: the planner's ttft plus the time it takes to write one step."""
        return self.planner_ttft + self.planner_per_line


@dataclass(frozen=True)
class BenchConfig:
    """What to run and how big."""

    suites: tuple[str, ...] = SUITES
    time_scale: float = 0.1
    """Multiplies every scripted model and tool time in the shapes suite."""
    reps: int = 3
    """Repetitions of each measured run; tables show the median (p50)."""
    wide_reps: int = 3
    """Repetitions of the 1,000-step workloads: their makespan is one sample of a run that
    keeps both cores busy, and moved ±10 % from one run to the next (one was reported)."""
    react_reps: int = 1
    """Repetitions of the ReAct baseline (sequential sleeps: little variance)."""
    seed: int = 2024
    """Seeds the tool-duration draws."""
    quick: bool = False
    """Tiny sizes for smoke tests."""
    peers: bool = True
    """Run LangGraph and AutoGen Core in the peers suite."""
    latencies: Latencies = field(default_factory=Latencies)
    fan_outs: tuple[int, ...] = (32, 128)
    """Widths of the wide fan-out shapes."""
    parallelqa_branches: tuple[int, ...] = (2, 3, 4, 5)
    chain: int = 100
    """Steps of the overhead chain."""
    fan: int = 100
    """Middle width of the 1 → N → 1 overhead fan-out."""
    independent: int = 1000
    """Steps of the independent overhead workload."""
    concurrent_runs: int = 100
    """Runs submitted at once in the concurrent suite."""
    concurrent_width: int = 8
    """Middle width of each concurrent run's 1 → N → 1 fan-out (N + 2 steps)."""
    step_seconds: float = 0.05
    """Duration of a step in the timed overhead/peer workloads."""
    cpu_min_s: float = 0.2
    """Least CPU (each of the planner and executor processes) a workload's CPU figures are
    summed over: /proc counts in 10 ms ticks, so 0.2 s is within 5 %. Runs are added
    beyond ``reps`` until both processes have spent this much, up to ``cpu_max_runs``."""
    cpu_max_runs: int = 20
    """Most runs of one workload in the overhead suite, CPU top-up runs included."""
    tool_effects: str = "default"
    """The ``effects`` the overhead and concurrent suites' teams declare for their tools
    (``echo``, ``sleep``): ``none`` (they only compute) spares their steps the records of
    finished attempts (docs/tools.md)."""

    def reps_for(self, steps: int) -> int:
        """Repetitions of a workload of this many steps."""
        return self.wide_reps if steps >= 500 else self.reps

    @classmethod
    def quick_config(cls, **overrides: Any) -> BenchConfig:
        """Tiny sizes, a tiny time scale and one repetition: seconds, not minutes."""
        base: dict[str, Any] = {
            "time_scale": 0.02, "reps": 1, "quick": True, "fan_outs": (8,),
            "parallelqa_branches": (2,), "chain": 10, "fan": 10, "independent": 20,
            "concurrent_runs": 4,
            "step_seconds": 0.01, "cpu_min_s": 0.05, "cpu_max_runs": 10,
        }
        return cls(**{**base, **overrides})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
