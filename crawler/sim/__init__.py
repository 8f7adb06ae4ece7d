"""The simulator: schedulers against the papers' change environments (pure, no I/O).

>>> from crawler import sim
>>> result = sim.run("uniform", sim.get_env("A"), slots=2000, seed=1)
>>> round(result.summary["final_ratio"], 1)
0.2
"""

from crawler.sim.catalog import ENVIRONMENTS, EnvSpec, env_names, get_env, thesis_environment, zipf
from crawler.sim.environment import AdjacentRankSwap, Environment, MirrorSwap, Switch
from crawler.sim.limit import LimitTracker
from crawler.sim.metrics import default_window
from crawler.sim.runner import RunResult, run

__all__ = [
    "ENVIRONMENTS",
    "AdjacentRankSwap",
    "EnvSpec",
    "Environment",
    "LimitTracker",
    "MirrorSwap",
    "RunResult",
    "Switch",
    "default_window",
    "env_names",
    "get_env",
    "run",
    "thesis_environment",
    "zipf",
]
