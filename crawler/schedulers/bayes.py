"""BayesRate: estimate every URL's change rate online and poll by the Lagrange optimum.

The project's own scheduler (docs/schedulers.md, "`bayes`").

**Estimator.** Under the overwrite model a poll after an interval of ``tau`` slots hits with
probability ``1 - exp(-r tau)`` (``r = -ln(1 - p)``). Per URL we keep four discounted sums:
``A`` (total interval length of the polls that hit), ``H`` (number of hits), ``B`` (total
interval length of the misses) and ``M`` (number of misses). When the intervals are about
equal (stride polling makes them nearly regular) the censored-Poisson maximum-likelihood
estimate is ``r = ln(1 + A / B) / (A / H)``. Prior pseudo-observations (``prior_hits``
hits and ``prior_misses`` misses, each at the URL's own mean interval, never forgotten)
keep it finite and positive: a URL that never missed does not get an infinite rate and
one that never hit keeps a rate of about ``prior_hits / (time watched)``, so it is polled
again at geometrically growing intervals instead of never.

**Forgetting.** Before each new observation the four sums are multiplied by ``forget``
(per poll of that URL), so the estimate follows a changing web with a memory of about
``1 / (1 - forget)`` polls of the URL: fast for the URLs that are polled often (those that
matter most) and still long in slots for the slow ones.

**Exploration.** A URL with no observation yet gets ``new_rate`` times the mean estimate
of the observed URLs (optimism: at the default it is polled sooner than most), so new
URLs are polled soon, and all URLs are polled round-robin at the start. Underestimates
correct themselves under the overwrite model: a URL polled too rarely hits almost every
time, which raises its estimate. ``optimism`` adds an upper-confidence bonus,
``r (1 + optimism / sqrt(1 + H + M))``, for URLs with few observations.

**Shifts.** Forgetting alone is slow for a URL that was polled rarely because it changed
rarely and then starts changing often (a mirror that becomes the primary, a page that goes
live): its long record of misses outweighs the new hits for many polls. Each URL runs a
CUSUM test of "the rate is now ``shift_factor`` times the estimate" against "it is the
estimate": every poll adds the log-likelihood ratio of its outcome, ``ln((1 - e^(-k r tau)) /
(1 - e^(-r tau)))`` for a hit and ``-(k - 1) r tau`` for a miss, and the sum is floored at 0.
When it passes ``shift_threshold`` nats the URL's miss statistics (the evidence against a
higher rate) are scaled down to ``shift_keep`` of their weight, so the new hits dominate the
estimate at once; the hit statistics stay (scaling them too would lower the estimate of a
URL that hits at every poll). Only increases are tested: a URL that slows down is polled
often enough for forgetting to follow it, and resetting on decreases cost accuracy on the
static environments.

**Change models.** Everything above assumes the overwrite model: a change stays visible
until the URL is polled. Under disappearing updates (a change is visible only in its own
slot) the estimator still ranks the URLs well, but it adapts slowly when the rates move:
when a URL polled every slot stops changing, forgetting needs about a hundred misses to
bring its estimate down. ``model="disappear"`` (an operator's choice; the default
``"overwrite"`` behaves exactly as before, bit for bit) adds the mirror image of the shift
test, a CUSUM of "the rate is now 1 / ``drop_factor`` (10) of the estimate" (a miss adds
``(1 - 1/k) r tau``, a hit ``ln((1 - e^(-r tau / k)) / (1 - e^(-r tau)))``); past
``drop_threshold`` (8) nats the hit statistics are scaled to ``drop_keep`` (0) of their
weight. It also tests rises against a 16-fold rate (``disappear_shift_factor``) instead of
4-fold, so a rarely polled URL that turns hot is caught in about two hits. On the thesis's
switching environment with disappearing updates this lifts ``bayes`` from 0.844 to 0.906 of
the limit (FPA: 0.897); under overwriting changes the fall test costs accuracy (0.843 to
0.699 on the overwrite variant: a URL whose hits are dropped is then polled so rarely that
its next hit comes late), which is why it is not the default. Learning the model per URL
was tried and is not done: a prequential test (each poll's outcome scored, before it is
learned, by the overwrite prediction ``1 - e^(-r tau)`` and by the disappear one, the hit
share per poll) favours "disappear" whenever the rates move, under either model, because
the intervals shrink as a URL's rate rises and a prediction that ignores the interval is
then the better one; with stride's regular intervals the two models fit any steady URL
alike (docs/schedulers.md).

**Probing (under constraints).** A URL polled at long intervals that hits every time
says only that its rate is at least about 1 / interval: with the prior's miss at its own
mean interval the estimate stays near ``ln(2 H + 2) / tau``. Where the budget is plentiful
the optimum's level u is below that, so the next interval is shorter and the estimate
corrects itself. Under a host cap that binds, u is the host's own level, higher (polls are
scarce), and the next interval comes out longer than the last however many hits: the hot
URLs of a capped host are never found. Measured on the live caps benchmark's site (400
URLs, 3 hosts of 80 capped at 1.8 polls per slot; simulated, 6 seeds, slots 50-150): the
three big hosts' URLs caught 2.61 changes per slot where the capped optimum on the true
rates catches 3.31, while the small hosts were within 5% of it. So under constraints
(and only then: without them the scheduler is bit for bit the one before) a URL with no
miss on record has its allocation rate doubled per hit, up to ``probe_hits`` (32): its
interval halves until it misses, which finds a hot URL in a few polls, each of which
hits. It lifts the big hosts to 2.78 and the whole run's share of the capped limit over
slots 100-300 from 0.90 to 0.92.

**Capped hosts** (``capped_rule``, default ``"changed"``; ``"stride"`` is the rule of
before). A host whose cap binds (held at its own level, above the global one) takes a fixed
number of polls a slot whatever its URLs' rates, so which of its URLs get them is all that
its learning decides. Its due URLs (stride credit >= 1) are ranked by their chance of
having changed since their last poll, ``1 - e^(-r age)`` (ranked as ``r age``), and the
first that the host's credit lets in this slot are polled; the host's other due URLs wait
(their credit kept at most the guard's ceiling, 2); the stride credit ranked them before.
The rates ``r`` of these URLs are the posterior means under a prior of change rates fitted
to the observed URLs (empirical Bayes on a grid: ``_prior.py``), taken at each poll of a
URL of a held host, so a URL seen once or twice is estimated from what is common among the
watched URLs instead of from a fixed prior of half a hit and half a miss at its own
interval. The prior is fitted again every ``PRIOR_EVERY`` (32) slots from at most 2,048
observed URLs. A URL's first poll under constraints (its baseline in the service: no
feedback) is noted at the next slot, and its first observation's interval counts from it,
not from the URL's addition (one boolean per URL, ``selected``, a hint rebuilt as False
where a saved state lacks it). On the live caps benchmark's site (simulated with baselines,
``caps_sim``, 20 seeds) the three big capped hosts catch 2.98 changes per slot against
2.80, the site 0.905 of the capped limit over wall slots 100-300 against 0.872. Without
constraints nothing changes; probing (above) no longer applies to the held hosts' URLs,
whose rate is the posterior mean.

**Last change** (``feedback(changed_ago=)``, ``first_polls``). A poll that tells its
version's age ``c`` (slots since its last change, from a believed ``Last-Modified``) has the
likelihood ``r e^(-r c)``: in the sums, a hit of one slot (at most the interval) and a miss of
``c``. A hit with an age is learned so, and a URL's first poll (its baseline, no feedback
otherwise) too, if the URL has no observation yet (its age taken as at most
``FIRST_AGE_MOST`` slots); an age of the whole interval or more
contradicts the hit (a plain hit). Misses need no age. Without ages nothing changes.

**Allocation.** With equal importance the Lagrange optimum is ``x_i = min(1, r_i / u)``
with ``sum x = C``. Only the polled URLs' estimates change in a slot, so their ``x`` and
the running ``sum(x)`` are updated in O(C); the multiplier ``u`` is re-solved over all
URLs (water-filling fixed point, a few O(n) passes) every ``resolve_every`` slots or when
``sum(x)`` has drifted from C by more than ``tolerance`` (relative). In between, the
stride realization normalizes the drift away. With importance weights the solution is
``x_i = min(1, r_i / u_i)`` with ``w_i g(u_i) = m``, ``g(u) = 1 - e^-u (1 + u)``; the
multiplier ``m`` is re-solved by bisection on the same schedule. Under constraints from
``RELEVEL_FROM`` URLs on a drift moves the levels instead (``_relevel``: the hosts' and the
global level solved on per-host sums kept as the polls come in, the new-URL value set as a
solve sets it, then one pass over the rows), once ``sum(x)`` has drifted by
``RELEVEL_SLACK`` times the tolerance; in between, the stride step normalizes the drift
away, as without constraints.

**Realization.** Stride (default): each slot the credits grow by ``x * k / sum(x)`` and the
k URLs with the largest credit >= 1 are polled (only the candidates with credit >= 1 are
ranked). ``realization="sampling"`` uses the base class's sampler.

Memory per URL: the base's 21 bytes (id, importance, float32 stride credit, dirty flag;
no true-rate column: only the oracles keep one) plus 33 (int32 last poll slot, six float32
arrays, the two float16 CUSUM statistics and the boolean ``selected``): 54 bytes. Each
slot's credit step is one compiled pass (``_kernels.step_and_due``) that also lists the due
rows: no array of n rows is allocated or kept for it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, ClassVar, cast

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers import _prior
from crawler.schedulers._base import BoolArray, FloatArray, IndexArray, Scheduler
from crawler.schedulers._bayes_params import BayesParams
from crawler.schedulers._fill import HINT_STEPS, constrained_fill, optimum_curve
from crawler.schedulers._guard import CREDIT_CEILING, NEVER_POLLED
from crawler.schedulers._held import HeldRows
from crawler.schedulers._kernels import (
    allowed_picks,
    best_of_groups,
    hold_credit,
    learn_rows,
    open_above,
    place_rows,
    step_and_due,
    within_credit,
)
from crawler.schedulers._lagrange import gain, inverse_gain, water_level
from crawler.schedulers._limits import Limits

F32Array = NDArray[np.float32]
I32Array = NDArray[np.int32]

#: the largest u the weighted allocation uses: a URL whose weight is below the multiplier
#: (not worth a poll at the optimum) keeps x = r / _MAX_U, small but never 0, so that it is
#: still polled now and then and its estimate can move
_MAX_U = 10.0**2.5
#: from this many URLs on, a drift of sum(x) under constraints moves the levels on the
#: per-host sums (``_relevel``) instead of the full constrained solve (measured under a
#: load of 17 on 2 cores: the full solve 0.4-0.6 s at 50,000 URLs and 5-6 s at 1M, the
#: step under 1 ms and 25-100 ms)
RELEVEL_FROM = 50_000
#: where the relevel serves (``RELEVEL_FROM``), sum(x) may drift this many times the
#: ``tolerance`` before it runs (the stride step normalizes the drift in between; these
#: figures were measured when it did not, and a short sum(x) slowed every credit alike):
#: on the scheduler_speed mixes at 100,000 URLs (n / 100 hosts, 6 seeds,
#: 2,000 slots) the changes caught are those of a relevel at every drift past 2 %
#: (realistic 0.7049 of the constrained limit against 0.7035 with 25 relevels against 163,
#: heavy 0.7662 against 0.7659), while at a million URLs in the first slots of a crawl the
#: first observations move sum(x) by 2-4 % a slot
RELEVEL_SLACK = 5.0
#: rows per block of the passes over all rows that chain several operations (the relevel's
#: x and its sums): a block's arrays stay in a core's cache between the operations
BLOCK = 1 << 16
#: under constraints a slot's picks are followed by one more due URL in this many (and 64)
#: for the guard to take in place of those it turns away (``_choose``)
SPARE_SHARE = 8
#: the per-URL statistics a slot's feedback reads and writes for every polled URL, kept
#: side by side in one record (``BayesRate._pack_stats``): 24 bytes, as in separate arrays.
#: The rate estimates (``rhat``) stay an array of their own: each solve passes over them all
#: many times, and through records it read six times the memory
_STATS = np.dtype(
    [
        ("hit_time", np.float32),
        ("miss_time", np.float32),
        ("hit_count", np.float32),
        ("miss_count", np.float32),
        ("last", np.int32),
        ("surge", np.float16),
        ("slump", np.float16),
    ]
)
#: ``learn_rows``'s arguments for a test that is off and for no ages
_NO_STAT = np.empty(0, dtype=np.uint16)
_NO_AGE = np.empty(0, dtype=np.float32)
#: ``step_and_due``'s arguments when no host is held: no group, and no held host
_NO_GROUP = np.empty(0, dtype=np.int8)
_NO_HELD = np.empty(0, dtype=np.bool_)
#: a discounted miss count below this is no miss on record (forgetting never brings a real
#: miss this low within 290 polls)
_NO_MISS = 0.05
#: the most slots a first poll's version age teaches (see "Last change"): a page dated long
#: ago (or on another clock) would otherwise be learned as a miss of millions of slots,
#: which forgetting takes hundreds of polls to wear off
FIRST_AGE_MOST = 1000.0
#: under a binding host cap, the prior of change rates is fitted to the population again
#: every this many slots (see "Capped hosts")
PRIOR_EVERY = 32


def estimate_rates(
    hit_time: NDArray[Any],
    miss_time: NDArray[Any],
    hit_count: NDArray[Any],
    miss_count: NDArray[Any],
    prior_hits: float,
    prior_misses: float,
) -> FloatArray:
    """Censored-Poisson rate estimates (changes per slot) from the sufficient statistics.

    The prior adds ``prior_hits`` hits and ``prior_misses`` misses at the mean interval.
    Rows without any observation get NaN.
    """
    a = hit_time.astype(np.float64)
    b = miss_time.astype(np.float64)
    h = hit_count.astype(np.float64)
    count = h + miss_count
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_tau = (a + b) / count
        a_prior = a + prior_hits * mean_tau
        b_prior = b + prior_misses * mean_tau
        rate = np.log1p(a_prior / b_prior) * (h + prior_hits) / a_prior
    rate[~(count > 0)] = np.nan
    return np.asarray(rate, dtype=np.float64)


class BayesRate(Scheduler):
    """Online censored-Poisson rate estimates with forgetting, allocated by the Lagrange
    optimum (see the module docstring)."""

    name: ClassVar[str] = "bayes"
    _solves_constraints: ClassVar[bool] = True
    _url_fields: ClassVar[tuple[str, ...]] = (
        "last",
        "hit_time",
        "miss_time",
        "hit_count",
        "miss_count",
        "rhat",
        "x",
        "surge",
        "slump",
        "selected",
        "observed",
    )
    #: the CUSUM statistics came in later releases: older saved states start them at zero
    _added_fields: ClassVar[tuple[str, ...]] = ("surge", "slump")
    #: rebuilt from the statistics and the saved multiplier by _after_restore (left out of
    #: take_delta: a re-solve moves every x, and only the polled rows are saved each slot);
    #: ``selected`` is only a hint (see "Capped hosts"), False where it was not saved
    _derived_fields: ClassVar[tuple[str, ...]] = ("rhat", "x", "selected", "observed")
    _scalar_fields: ClassVar[tuple[str, ...]] = (
        "u",
        "m",
        "total",
        "new_value",
        "since_solve",
        "stale",
    )

    def __init__(
        self,
        capacity: float,
        *,
        seed: int | None = None,
        realization: str = "stride",
        **params: Any,
    ) -> None:
        super().__init__(capacity, seed=seed, realization=realization)
        #: the parameters (see ``BayesParams``; ValueError when one is out of range)
        self.settings = BayesParams(**params)
        # float32 stride credit: 4 bytes per URL less, and the per-slot pass over it reads
        # half the memory (credit sits in [0, 2]: float32 keeps 7 digits of it)
        self._credit = np.empty(0, dtype=np.float32)
        self._last: I32Array = np.empty(0, dtype=np.int32)
        self._hit_time: F32Array = np.empty(0, dtype=np.float32)
        self._miss_time: F32Array = np.empty(0, dtype=np.float32)
        self._hit_count: F32Array = np.empty(0, dtype=np.float32)
        self._miss_count: F32Array = np.empty(0, dtype=np.float32)
        self._rhat: F32Array = np.empty(0, dtype=np.float32)  # rate used for allocation
        self._x: F32Array = np.empty(0, dtype=np.float32)  # wanted frequency
        self._surge: NDArray[np.float16] = np.empty(0, dtype=np.float16)  # CUSUM, nats
        self._slump: NDArray[np.float16] = np.empty(0, dtype=np.float16)  # CUSUM, nats
        # under constraints: the URL has been selected (its baseline is taken)
        self._selected: BoolArray = np.empty(0, dtype=bool)
        # whether the URL has an observation (hit_count + miss_count > 0), kept as the
        # polls come: a solve reads it for every row, where the counts sit in records
        self._observed: BoolArray = np.empty(0, dtype=bool)
        # under a binding host cap: the prior of change rates (weights on _prior.GRID) and
        # the slot it was fitted in
        self._prior: FloatArray | None = None
        self._prior_slot = 0
        self._u = 1.0  # equal weights: x = min(1, rhat / u)
        self._m = 0.5  # weights: x = min(1, rhat / u_i), w_i g(u_i) = m
        self._total = 0.0  # sum(x), kept incrementally
        self._new_value = 1.0  # rate given to URLs not observed yet
        self._since_solve = 0
        self._stale = True
        self._weighted = False
        #: the change model the adaptation is tuned for (see "Change models" above)
        self._disappear = self.settings.model == "disappear"
        # Under host caps, bounds or failures (see _solve_constrained): the limits solved
        # for (None when the scheduler is unconstrained), each host's own level and the
        # global one; a row's level in force is the larger of its host's and the global.
        self._limits: Limits | None = None
        self._own_padded: FloatArray = np.zeros(1)
        self._level = 0.0
        #: the rows of the last ``_learn`` and its slot (their last poll is that slot)
        self._learned: tuple[IndexArray, int] | None = None
        #: ``_held_hosts``' answer and the levels and caps it was computed from
        self._held_cache: tuple[tuple[object, ...], BoolArray] | None = None
        #: the rows waiting in held hosts at the last ranking, with what ranks them
        self._held_rows = HeldRows()
        self._planned_total = 0.0
        # Kept for ``_relevel`` (per host, O(polled) a slot): sum(x) of each host's rows,
        # the part of it that moves with the host's level (rows below 1 and unbounded), and
        # that part for the rows of no host.
        self._host_sum: FloatArray = np.zeros(0)
        self._host_moving: FloatArray = np.zeros(0)
        self._loose_moving = 0.0
        # Kept for ``_relevel`` to refresh the new-URL value as a solve does: the rows with
        # no observation, the float64 sum of rhat over the others, and per host (index -1:
        # no host) the unobserved rows without a bound, whose x all move alike.
        self._unseen_count = 0
        self._seen_rate_sum = 0.0
        self._host_unseen: FloatArray = np.zeros(0)
        #: the statistics of ``_STATS``, a record per URL; the named arrays are its fields
        self._stats: NDArray[np.void] = np.empty(0, dtype=_STATS)
        self._pack_stats()

    def _pack_stats(self) -> None:
        """Put the per-URL statistics of ``_STATS`` side by side in one record per URL, and
        point their arrays (``_hit_time``, ...) at its fields, after rows were added or
        removed or the state restored (which leave each a separate array). A slot's
        feedback reads and writes all of them for each polled URL: ten thousand polled
        rows of a million, at random, touched seven cache lines each in separate arrays,
        and touch one or two in a record (the slot at a million URLs, unconstrained: 7.21
        -> 6.49 ms, 2026-11-28). The arrays passed over whole (the rates, ``x`` and the
        stride credit) stay separate."""
        names = cast(tuple[str, ...], _STATS.names)
        if all(getattr(self, "_" + name).base is self._stats for name in names):
            return
        stats = np.empty(self._ids.size, dtype=_STATS)
        for name in names:
            stats[name] = getattr(self, "_" + name)
        self._stats = stats
        for name in names:
            setattr(self, "_" + name, stats[name])

    def params(self) -> dict[str, Any]:
        return {**super().params(), **asdict(self.settings)}

    def rates(self) -> tuple[NDArray[np.int64], FloatArray]:
        """Every URL's id and estimated change probability per slot (NaN: not observed);
        on a host whose cap binds, the rate the scheduler uses (the posterior mean under the
        population's prior from the URL's last poll on: see "Capped hosts")."""
        r = estimate_rates(
            self._hit_time,
            self._miss_time,
            self._hit_count,
            self._miss_count,
            self.settings.prior_hits,
            self.settings.prior_misses,
        )
        if self._limits is not None and self.settings.capped_rule == "changed":
            # the rate in use, the posterior mean of the URL's last poll: no new fit and no
            # posterior of every held URL at each read (the health checks read every slot)
            held = self._held_hosts()[self._limits.group] & np.isfinite(r)
            r = np.where(held, self._rhat, r)
        return self._ids.copy(), -np.expm1(-r)

    # ----- Scheduler hooks ----------------------------------------------------------------

    def _initial_values(
        self, count: int, importance: FloatArray, rates: FloatArray
    ) -> dict[str, NDArray[Any]]:
        zeros = np.zeros(count, dtype=np.float32)
        return {
            "last": np.full(count, self._slot, dtype=np.int32),
            "hit_time": zeros,
            "miss_time": zeros,
            "hit_count": zeros,
            "miss_count": zeros,
            "rhat": np.full(count, self._new_value, dtype=np.float32),
            "x": zeros,
            "surge": np.zeros(count, dtype=np.float16),
            "slump": np.zeros(count, dtype=np.float16),
            "selected": np.zeros(count, dtype=bool),
            "observed": np.zeros(count, dtype=bool),
        }

    def _after_add(self) -> None:
        self._held_rows.clear()
        self._pack_stats()
        self._refresh_weighted()
        self._stale = True
        if self._limits is not None:
            self._resolve()  # the per-row levels must stay aligned with the rows

    def _after_remove(self) -> None:
        self._held_rows.clear()
        self._pack_stats()
        self._refresh_weighted()
        self._total = float(self._x.sum(dtype=np.float64))
        self._stale = True
        if self._limits is not None:
            self._resolve()

    def _after_restore(self) -> None:
        self._held_rows.clear()
        self._refresh_weighted()
        self._u = float(self._u)
        self._m = float(self._m)
        self._total = float(self._total)
        self._new_value = float(self._new_value)
        self._since_solve = int(self._since_solve)
        self._stale = bool(self._stale)
        # The derived rows: exactly what _learn / _resolve / _initial_values computed.
        rate = self._estimate(self._hit_time, self._miss_time, self._hit_count, self._miss_count)
        rate[np.isnan(rate)] = np.float32(self._new_value)
        self._rhat = rate
        self._observed = (self._hit_count + self._miss_count) > 0
        self._pack_stats()
        # x is min(1, rhat / u) (or its weighted form) at the multiplier in force, for every
        # row: _learn and _resolve keep it so. The saved running total is kept as it was.
        self._x = self._allocate(rate, None)
        # the rates were estimated again: the relevel's sums of them wait for the next solve
        self._host_unseen = np.zeros(0)

    def _last_polled(self, rows: IndexArray) -> I32Array:
        last = self._last[rows].copy()
        last[~self._observed[rows]] = NEVER_POLLED
        return last

    def _wanted(self) -> FloatArray:
        if self._stale:
            self._resolve()
        return self._x.astype(np.float64)

    def _wanted_total(self) -> float:
        if self._stale:
            self._resolve()
        return self._total

    def _constraints_changed(self) -> None:
        self._held_rows.clear()  # the groups may have moved
        self._stale = True

    def _choose(self, k: int) -> IndexArray:
        self._since_solve += 1
        target = min(self.capacity, self._ids.size)
        if self._limits is not None:
            target = self._planned_total  # caps may leave part of the budget unused
            if self.settings.capped_rule == "changed":
                self._note_baselines()
        due = self._stale or self._since_solve >= self.settings.resolve_every
        tolerance = self.settings.tolerance
        if self._limits is not None and self._ids.size >= RELEVEL_FROM:
            tolerance *= RELEVEL_SLACK
        drifted = abs(self._total - target) > tolerance * self.capacity
        # between the scheduled re-solves only the estimates of the polled URLs moved:
        # under constraints the global level alone moves (the hosts' own levels stand
        # until the next scheduled solve), else the searches start from the last levels
        if due or (drifted and not self._relevel(target)):
            self._resolve(fresh=due)
        if self.realization == "sampling":
            return super()._choose(k)
        if self._total <= 0:
            return np.empty(0, dtype=np.intp)
        # The step is scaled to the slot's k polls, up as well as down, with constraints as
        # without. Never scaled up, a sum(x) drifted under C left the credits growing by
        # less than the slots' polls paid, and the guard's refill came to make nearly
        # every pick (at a million URLs, realistic mix: 83-96% of them from slot 50 on,
        # the mean credit of the free hosts' rows falling by 0.0015 a slot). A capped
        # host's rows then come due a little more often than its cap: the guard holds
        # it to the cap, and the rows left waiting keep at most ``CREDIT_CEILING``.
        scale = k / self._total
        credit = self._credit
        assert credit.dtype == np.float32  # bayes keeps its credit in float32
        limits = self._limits
        split = limits is not None and self.settings.capped_rule == "changed"
        group, held = _NO_GROUP, _NO_HELD
        if limits is not None and split:
            group, held = limits.group, self._held_hosts()
        factor = np.float32(scale)
        cand, key, waiting = step_and_due(
            cast(F32Array, credit), self._x, factor, scale > 1.0, group, held
        )
        first = self._held_picks(waiting) if split else None
        if first is not None:
            k -= first.size
        if k <= 0:
            cand = cand[:0]
        elif cand.size > k:
            # Among the due URLs, those that would fall furthest behind by waiting one more
            # slot first (``key``: the credit after one more step): short intervals keep
            # their regularity, long ones barely notice. Under constraints a few more
            # follow, the next by key: the guard keeps the first k it lets through, so
            # they stand in for the picks it turns away (a bound, a host out of credit;
            # the rest of them it gives their credit back). Without them the guard's
            # refill searched all the credits for the few it needed, in nearly every slot.
            spare = min(cand.size - k, self._spare(k)) if limits is not None else 0
            take = k + spare
            top = np.argpartition(key, cand.size - take)[cand.size - take :]
            if spare:
                inner = np.argpartition(key[top], spare)  # the spare ones, then the best k
                top = np.concatenate([top[inner[spare:]], top[inner[:spare]]])
            cand = cand[top]
        if first is not None:
            cand = np.concatenate([first, cand])
        credit[cand] -= 1.0
        return cand.astype(np.intp)

    def _spare(self, k: int) -> int:
        """How many due URLs follow a slot's k picks under constraints: one in
        ``SPARE_SHARE``, or as many as the guard would turn away by the last slot's share
        (and a quarter more), at most k. Under the heavy mix at a million URLs the guard
        turned away 20-25 % of the picks; one in eight then left 900-3,700 polls to the
        refill, a pass over every credit, in most slots."""
        guard = self._guard
        share = min(guard.turned_away, 0.5) if guard is not None else 0.0
        wanted = math.ceil(1.25 * k * share / (1.0 - share))
        return min(k, max(k // SPARE_SHARE, wanted) + 64)

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) the kernels for the types of this
        scheduler's arrays, each called on none of its rows: 0.7 s with the cache, 2.2 s
        without, which a service's first slot would pay otherwise (a 0.2 s slot then
        polled nothing)."""
        none = np.empty(0, dtype=np.intp)
        credit = cast(F32Array, self._credit[:0])
        guard = self._guard  # its limits reach the allocation at the first slot
        limited = guard is not None and guard.active()
        group = guard.group[:0] if guard is not None and limited else _NO_GROUP
        step_and_due(credit, self._x[:0], np.float32(1.0), False, group, _NO_HELD)
        if guard is not None and limited:
            step_and_due(credit, self._x[:0], np.float32(1.0), False, group, np.zeros(1, bool))
            best_of_groups(none, self._rhat[:0], self._last[:0], 0, group, np.empty(0))
            HeldRows.warm_up(group)
            hold_credit(credit, none, np.empty(0, dtype=bool), np.float32(CREDIT_CEILING))
            within_credit(none, group, np.empty(0), 0)
            taken = np.empty(0, dtype=bool)
            open_above(credit, np.float32(1.0), False, taken, group, np.ones(1, bool))
            allowed_picks(none, np.zeros(1, dtype=np.uint8), none, none)
            level_of, rate = np.zeros(1), np.empty(0, dtype=np.float32)
            bounds = guard.limits().bounded
            place_rows(none, rate, group, level_of, bounds, self._x, level_of, level_of)
        # the update as a slot's feedback calls it, on no rows (the same types, no change)
        self._update_rows(none, np.empty(0, dtype=bool), None, np.empty(0, dtype=np.float32))

    def _held_hosts(self) -> BoolArray:
        """Per host (index -1: no host, False), whether its cap binds: the host is held at
        its own level, above the global one."""
        limits = self._limits
        assert limits is not None
        # kept while the levels and caps stand (read twice a slot, O(hosts) each time): the
        # levels are new arrays at each solve and relevel, the caps at each change of them
        key = (self._own_padded, self._level, limits.cap)
        cached = self._held_cache
        if cached is not None and all(a is b for a, b in zip(cached[0], key, strict=True)):
            return cached[1]
        held = (self._own_padded[:-1] > self._level) & np.isfinite(limits.cap)
        out = np.append(held, False)
        self._held_cache = (key, out)
        return out

    def _held_picks(self, due: IndexArray) -> IndexArray:
        """Of the due URLs of the hosts whose cap binds, those that this slot's host credits
        let in, the likeliest to have changed since their last poll first (see "Capped
        hosts"). The rest of them wait, their credit kept at most the guard's ceiling."""
        guard, limits = self._guard, self._limits
        if guard is None or limits is None or due.size == 0:
            return np.empty(0, dtype=np.intp)
        # the chance of a change since the last poll, 1 - e^(-r age), ranks as r age: the
        # best of each host (one compiled pass, not a sort of all of them by that key)
        # most of them waited in the last slot too: their columns are kept, compact
        rate, last, group = self._held_rows.columns(due, self._rhat, self._last, limits.group)
        at = np.arange(due.size, dtype=np.intp)
        passes, key = best_of_groups(at, rate, last, self._slot, group, guard.allowances())
        credit = cast(F32Array, self._credit)  # bayes keeps its credit in float32
        hold_credit(credit, due, passes, np.float32(CREDIT_CEILING))  # those waiting
        picks = due[passes]
        return picks[np.argsort(-key[passes], kind="stable")].astype(np.intp)

    def _note_baselines(self) -> None:
        """Under constraints: the URLs of the last selection selected for the first time
        that still have no observation were polled for their baseline (a first answer has
        nothing to compare with: no feedback), so their first observation's interval counts
        from that poll, not from their addition."""
        rows = self._selected_rows
        if rows is None or rows.size == 0:
            return
        first = rows[~self._selected[rows]]
        if first.size:
            self._selected[first] = True
            # A row given feedback in the last slot was polled in it (its last poll is that
            # slot, where this would put it anyway): only the others, a few failed polls and
            # baselines, are looked up for an observation (one gather of the rows instead
            # of two, at 10,000 new rows a slot).
            before = self._slot - 1
            learned = self._learned
            if learned is not None and learned[0] is rows and learned[1] == before:
                return  # the whole selection was learned in its slot: none is a baseline
            first = first[self._last[first] != before]
            unseen = first[~self._observed[first]]
            self._held_rows.touch(unseen)
            self._last[unseen] = before

    def _restart_intervals(self, pos: IndexArray) -> None:
        self._held_rows.touch(pos)
        self._last[pos] = self._slot

    def _learn_changed(self, pos: IndexArray, hits: BoolArray, ago: FloatArray) -> None:
        self._learn(pos, hits, ago.astype(np.float32))

    def _learn_first(self, pos: IndexArray, ago: FloatArray) -> None:
        """See "Last change": a first poll's version ``ago`` slots old is no change for
        ``ago`` slots (a miss) after a change (a hit of one slot). Rows already observed
        have learned more than this: left alone."""
        unseen = ~self._observed[pos]
        if not unseen.any():
            return
        pos, c = pos[unseen], np.minimum(ago[unseen], FIRST_AGE_MOST).astype(np.float32)
        self._dirty[pos] = True
        self._learn(pos, np.ones(pos.size, dtype=bool), c, c + np.float32(1.0))

    def _learn(
        self,
        pos: IndexArray,
        hits: BoolArray,
        ago: F32Array | None = None,
        tau: F32Array | None = None,
    ) -> None:
        """One slot's outcomes; ``ago`` (see "Last change"): slots since each polled
        version's last change (NaN: unknown); ``tau``: the polls' intervals (default: since
        each row's last poll)."""
        if tau is None:
            tau = np.maximum(self._slot - self._last[pos], 1).astype(np.float32)
        self._held_rows.touch(pos)  # their rate and last poll change here
        self._last[pos] = self._slot
        self._learned = (pos, self._slot)
        a, b, h, rate, old_rate, seen = self._update_rows(pos, hits, ago, tau)
        self._observed[pos[~seen]] = True  # a hit or a miss: hit_count + miss_count > 0
        limits = self._limits
        if limits is None:
            old_x = self._x[pos]
            new_x = self._allocate(rate, pos)
            self._total += float(new_x.sum(dtype=np.float64) - old_x.sum(dtype=np.float64))
            self._x[pos] = new_x
            return
        group = limits.group[pos]
        if self.settings.capped_rule == "changed":
            held = np.flatnonzero(self._held_hosts()[group])
            if held.size:  # see "Capped hosts"
                prior = self._population_prior()
                rate[held] = _prior.posterior_mean(a[held], b[held], h[held], prior)
                self._rhat[pos[held]] = rate[held]
        if not self._weighted and self._host_sum.size == limits.cap.size and not (group < 0).any():
            # every row in a host, equal weights: the x, its store and the host sums in
            # one compiled pass (``_kernels.place_rows``), the same as the branch below
            level_of = np.maximum(self._own_padded, self._level)
            sums = (self._host_sum, self._host_moving)
            old_x, new_x, lo, hi = place_rows(
                pos, rate, group, level_of, limits.bounded, self._x, *sums
            )
            bounds = (lo, hi)
        else:
            # the rows' bounds, looked up once for the x and the host sums
            bounds = limits.bounds_of(pos)
            old_x = self._x[pos]
            new_x = self._constrained_x(rate, pos, bounds, group)
            self._add_sums(group, (old_x, new_x), bounds)
            self._x[pos] = new_x
        self._total += float(new_x.sum(dtype=np.float64) - old_x.sum(dtype=np.float64))
        self._note_seen(seen, old_rate, rate, group, bounds)

    def _update_rows(
        self, pos: IndexArray, hits: BoolArray, ago: F32Array | None, tau: F32Array
    ) -> tuple[F32Array, F32Array, F32Array, F32Array, F32Array, BoolArray]:
        """The polled rows' new statistics and rates, stored (see ``_update_rows_numpy``),
        in one compiled loop (``_kernels.learn_rows``): about thirty NumPy operations on
        a slot's 10,000 rows cost more than their arithmetic. Returns the new hit time,
        miss time and hit count, the new rate, the old rate and whether each row had an
        observation before."""
        settings = self.settings
        if settings.optimism > 0:  # left out of the loop: a rarely used setting
            return self._update_rows_numpy(pos, hits, ago, tau)
        shift = settings.shift_threshold > 0
        drop = self._disappear and settings.drop_threshold > 0
        surge = self._surge.view(np.uint16) if shift else _NO_STAT
        slump = self._slump.view(np.uint16) if drop else _NO_STAT
        probe = settings.probe_hits
        if not (probe > 1 and self._guard is not None and self._guard.active()):
            probe = 1.0
        shift_k = settings.disappear_shift_factor if self._disappear else settings.shift_factor
        a, b, h, _, rate, old_rate, seen = learn_rows(
            pos,
            hits,
            tau,
            _NO_AGE if ago is None else ago,
            (self._hit_time, self._miss_time, self._hit_count, self._miss_count, self._rhat),
            surge,
            slump,
            np.float32(settings.forget),
            (settings.prior_hits, settings.prior_misses),
            (shift_k, settings.shift_threshold, np.float32(settings.shift_keep)),
            (1.0 / settings.drop_factor, settings.drop_threshold, np.float32(settings.drop_keep)),
            probe,
        )
        return a, b, h, rate, old_rate, seen > 0

    def _update_rows_numpy(
        self, pos: IndexArray, hits: BoolArray, ago: F32Array | None, tau: F32Array
    ) -> tuple[F32Array, F32Array, F32Array, F32Array, F32Array, BoolArray]:
        """``_update_rows`` in NumPy: the statistics with forgetting, the last change, the
        CUSUM tests of a rise and a fall of the rate, the new estimates."""
        # Each statistic of the polled rows is gathered once: a gather from a million rows
        # costs more than the arithmetic on the polled few.
        old_a, old_b = self._hit_time[pos], self._miss_time[pos]
        old_h, old_mc = self._hit_count[pos], self._miss_count[pos]
        seen = (old_h + old_mc) > 0
        old_rate = self._rhat[pos]
        disappear = self._disappear
        shifted = (
            self._shift_test(pos, hits, tau, old_rate, seen)
            if self.settings.shift_threshold > 0
            else None
        )
        dropped = (
            self._drop_test(pos, hits, tau, old_rate, seen)
            if disappear and self.settings.drop_threshold > 0
            else None
        )
        g = np.float32(self.settings.forget)
        hit = hits.astype(np.float32)
        miss = np.float32(1.0) - hit
        a = old_a * g + tau * hit
        b = old_b * g + tau * miss
        h = old_h * g + hit
        mc = old_mc * g + miss
        if ago is not None:
            # see "Last change": a hit of at most one slot at the change, a miss since
            known = hits & (ago < tau)
            cut = np.where(known, ago, np.float32(0.0))
            point = np.minimum(tau - cut, np.float32(1.0))
            a = a - np.where(known, tau - point, np.float32(0.0))
            b, mc = b + cut, mc + (cut > 0)
        if shifted is not None and shifted.any():
            # The evidence against a higher rate, the misses, mostly go: what the old regime
            # said for a lower rate no longer holds. (Scaling the hits down as well would
            # lower the estimate of a URL that hits at every poll.)
            keep = np.where(shifted, np.float32(self.settings.shift_keep), np.float32(1.0))
            b = b - old_b * g * (1 - keep)
            mc = mc - old_mc * g * (1 - keep)
        if dropped is not None and dropped.any():
            # The mirror image for a fall: the hits of the old regime no longer hold.
            keep = np.where(dropped, np.float32(self.settings.drop_keep), np.float32(1.0))
            a = a - old_a * g * (1 - keep)
            h = h - old_h * g * (1 - keep)
        rate = self._estimate(a, b, h, mc)
        self._hit_time[pos] = a
        self._miss_time[pos] = b
        self._hit_count[pos] = h
        self._miss_count[pos] = mc
        self._rhat[pos] = rate
        return a, b, h, rate, old_rate, seen

    def _population_prior(self) -> FloatArray:
        """The prior of change rates fitted to the observed URLs (at most ``_prior.SAMPLE``
        of them, evenly spaced), again every ``PRIOR_EVERY`` slots, each fit starting from
        the last."""
        if self._prior is not None and self._slot - self._prior_slot < PRIOR_EVERY:
            return self._prior
        n = self._ids.size
        rows = np.arange(0, n, max(1, n // (4 * _prior.SAMPLE)))
        rows = rows[self._observed[rows]]
        if rows.size > _prior.SAMPLE:
            rows = rows[np.linspace(0, rows.size - 1, _prior.SAMPLE).astype(np.intp)]
        self._prior = _prior.fit(
            self._hit_time[rows],
            self._miss_time[rows],
            self._hit_count[rows],
            self._prior,
            steps=_prior.STEPS if self._prior is None else _prior.MORE_STEPS,
        )
        self._prior_slot = self._slot
        return self._prior

    def _shift_test(
        self, pos: IndexArray, hits: BoolArray, tau: F32Array, rate: F32Array, seen: BoolArray
    ) -> BoolArray:
        """Advance the URLs' CUSUM tests by this poll (``rate``: the rows' estimates before
        it; ``seen``: whether they had an observation); True where a rise of the rate is
        detected (the test then restarts from zero)."""
        rt = np.maximum(rate.astype(np.float64) * tau, 1e-12)
        k = self.settings.disappear_shift_factor if self._disappear else self.settings.shift_factor
        ratio = _log_ratios(hits, rt, k, -(k - 1.0) * rt)
        surge = np.maximum(self._surge[pos].astype(np.float64) + ratio, 0.0)
        # a URL's first observation has nothing to shift from
        shifted = (surge > self.settings.shift_threshold) & seen
        surge[shifted] = 0.0
        self._surge[pos] = surge.astype(np.float16)
        return shifted

    def _drop_test(
        self, pos: IndexArray, hits: BoolArray, tau: F32Array, rate: F32Array, seen: BoolArray
    ) -> BoolArray:
        """Advance the URLs' CUSUM tests of a fall of the rate (to 1 / ``drop_factor`` of
        the estimate) by this poll (as ``_shift_test``); True where a fall is detected (the
        test then restarts from zero)."""
        rt = np.maximum(rate.astype(np.float64) * tau, 1e-12)
        k = 1.0 / self.settings.drop_factor
        ratio = _log_ratios(hits, rt, k, (1.0 - k) * rt)
        # float16 holds up to 65504; the threshold is far below
        slump = np.clip(self._slump[pos].astype(np.float64) + ratio, 0.0, 6e4)
        dropped = (slump > self.settings.drop_threshold) & seen
        slump[dropped] = 0.0
        self._slump[pos] = slump.astype(np.float16)
        return dropped

    def _estimate(
        self, a: NDArray[Any], b: NDArray[Any], h: NDArray[Any], mc: NDArray[Any]
    ) -> F32Array:
        """The allocation rate (float32) from the statistics; NaN where nothing observed."""
        rate = estimate_rates(a, b, h, mc, self.settings.prior_hits, self.settings.prior_misses)
        if self.settings.optimism > 0:
            rate *= 1.0 + self.settings.optimism / np.sqrt(1.0 + h + mc)
        probe = self.settings.probe_hits
        if probe > 1 and self._guard is not None and self._guard.active():
            # see "Probing": the interval of a URL that never missed halves per hit
            # (on those rows only: under constraints most polls have missed once)
            unbroken = np.flatnonzero(np.asarray(mc) < _NO_MISS)
            boost = np.minimum(np.exp2(np.asarray(h, dtype=np.float64)[unbroken]), probe)
            rate[unbroken] *= boost
        return rate.astype(np.float32)

    # ----- allocation ---------------------------------------------------------------------

    def _refresh_weighted(self) -> None:
        w = self._importance
        self._weighted = bool(w.size > 1 and np.any(w != w[0]))

    def _allocate(self, rate: F32Array, pos: IndexArray | None) -> F32Array:
        """x = min(1, rate / u_i) at the current multiplier, for rows ``pos`` (None: all)."""
        if self._limits is not None:
            return self._constrained_x(rate, pos)
        if self.capacity >= self._ids.size:
            return np.ones(rate.size, dtype=np.float32)
        if not self._weighted:
            return self._equal_x(rate, self._u)
        w = self._importance if pos is None else self._importance[pos]
        return self._weighted_x(rate, w, self._m)

    def _equal_x(self, rate: F32Array, u: float, out: F32Array | None = None) -> F32Array:
        """Equal weights: x = min(1, r / u), the short intervals rounded to whole slots
        (written into ``out`` when it has the size: no new array of n rows)."""
        if out is None or out.shape != rate.shape:
            out = np.empty(rate.shape, dtype=np.float32)
        x: F32Array = np.divide(rate, np.float32(u), out=out)
        _at_most_one(x)
        big = self.settings.whole_intervals
        if big:
            head = np.flatnonzero(x >= np.float32(1.0 / big))
            if head.size:
                x[head] = _whole(x[head], rate[head], float(gain(u)))
        return x

    @staticmethod
    def _weighted_x(rate: F32Array, w: FloatArray, m: float) -> F32Array:
        u = np.minimum(inverse_gain(m / w), _MAX_U)
        return np.minimum(rate.astype(np.float64) / u, 1.0).astype(np.float32)

    def _resolve(self, *, fresh: bool = True) -> None:
        """Re-solve the multiplier over all URLs; refresh the rate of unobserved URLs.
        Under constraints, ``fresh`` False starts the searches from the levels of the
        last solve (when the limits are still the same)."""
        self._since_solve = 0
        self._stale = False
        n = self._ids.size
        if n == 0:
            self._total = 0.0
            return
        unseen = ~self._observed
        n_unseen = int(np.count_nonzero(unseen))
        seen_sum = 0.0
        if n_unseen < n:
            # Every unobserved row holds the new-URL value in force (given at add, at
            # restore and below), so their sum is that value times their count: exactly
            # what summing them gives (equal float32 values sum exactly in float64), without
            # gathering the rows.
            unseen_sum = n_unseen * float(np.float32(self._new_value))
            seen_sum = float(self._rhat.sum(dtype=np.float64)) - unseen_sum
            mean_seen = seen_sum / (n - n_unseen)
            if mean_seen > 0 and math.isfinite(mean_seen):
                self._new_value = self.settings.new_rate * mean_seen
        if n_unseen:
            _put_unseen(self._rhat, self._observed, self._new_value)
            self._held_rows.clear()
        rate = self._rhat
        capacity = self.capacity
        guard = self._guard
        if guard is not None and guard.active():
            limits = guard.limits()
            if limits is self._limits:
                # the searches start around the last solve's levels; a scheduled (fresh)
                # solve still runs every host's search to full precision
                steps = None if fresh else HINT_STEPS
                hints = (self._own_padded[:-1], self._level)
                self._solve_constrained(rate, limits, *hints, hint_steps=steps)
            else:
                self._solve_constrained(rate, limits)
            self._total = float(self._x.sum(dtype=np.float64))
            self._planned_total = self._total
            self._count_unseen(unseen, n_unseen, seen_sum, limits)
            return
        self._limits = None
        if capacity >= n:
            self._x = self._allocate(rate, None)
        elif self._weighted:
            self._m = self._solve_weighted(rate, capacity)
            self._x = self._allocate(rate, None)
        else:
            self._solve_equal(rate, capacity)
        self._total = float(self._x.sum(dtype=np.float64))

    def _solve_constrained(
        self,
        rate: F32Array,
        limits: Limits,
        group_level: FloatArray | None = None,
        level_hint: float = 0.0,
        *,
        hint_steps: int | None = HINT_STEPS,
    ) -> None:
        """The constrained optimum (host caps, bounds, failures) on the estimated rates:
        x_i = clip(r_i / u_i, lower_i, upper_i) at the level in force for the URL's host.
        The level of each row is kept so that a poll's new estimate moves only its own x
        (O(polled) per slot, as without constraints). ``group_level``: the hosts' own
        levels of an earlier solve under the same limits and ``level_hint`` its global level,
        where the searches start, and ``hint_steps`` where a host's search from its hint
        stops (see ``constrained_fill``)."""
        w = self._importance if self._weighted else None
        r = rate.astype(np.float64)
        curve, top = optimum_curve(r, w)
        solved = constrained_fill(
            curve,
            top,
            self.capacity,
            limits,
            group_level=group_level,
            level_hint=level_hint,
            hint_steps=hint_steps,
        )
        # a row's level in force is the larger of its host's own and the global one
        self._own_padded = np.append(solved.group_level, 0.0)  # index -1: no host
        self._level = solved.level
        self._limits = limits
        self._x = solved.x.astype(np.float32)
        self._host_sum = np.zeros(limits.cap.size)
        self._host_moving = np.zeros(limits.cap.size)
        self._loose_moving = 0.0
        every = np.arange(self._x.size)
        self._add_sums(limits.group, (None, self._x), limits.bounds_of(every))

    def _note_seen(
        self,
        seen: BoolArray,
        old_rate: F32Array,
        rate: F32Array,
        group: NDArray[np.signedinteger],
        bounds: tuple[FloatArray, FloatArray],
    ) -> None:
        """Under constraints, after a slot's polls: the rows seen before had ``old_rate``
        and all now have ``rate``; those seen for the first time leave the unobserved
        rows kept for ``_relevel`` (their hosts' counts too, where they have no bound)."""
        size = self._host_unseen.size
        if self._limits is None or size != self._limits.cap.size + 1:
            return
        self._seen_rate_sum += float(rate.sum(dtype=np.float64)) - float(
            old_rate[seen].sum(dtype=np.float64)
        )
        first = ~seen
        count = int(np.count_nonzero(first))
        if count:
            self._unseen_count -= count
            lo, hi = bounds
            hosts = group[first & (lo <= 0) & (hi >= 1)].astype(np.intp)
            hosts[hosts < 0] = size - 1
            self._host_unseen -= np.bincount(hosts, minlength=size)

    def _fresh_new_value(self) -> float | None:
        """The new-URL value a solve would give now (``new_rate`` times the mean rate of
        the observed rows, from the sums kept since the last solve); None when it moved by
        at most the tolerance (relative): setting it costs a pass over the rows (1.5-3 ms
        at a million URLs), and later in a crawl it moves slowly."""
        seen = self._ids.size - self._unseen_count
        if seen <= 0 or self._host_unseen.size != self._own_padded.size:
            return None
        mean_seen = self._seen_rate_sum / seen
        if not (mean_seen > 0 and math.isfinite(mean_seen)):
            return None
        value = self.settings.new_rate * mean_seen
        if abs(value - self._new_value) <= self.settings.tolerance * self._new_value:
            return None
        return value

    def _count_unseen(
        self, unseen: BoolArray, n_unseen: int, seen_sum: float, limits: Limits
    ) -> None:
        """After a constrained solve: what ``_relevel`` keeps to refresh the new-URL value
        (the unobserved rows, the sum of the others' rates, the unobserved rows without a
        bound per host, the last entry for the rows of no host)."""
        self._unseen_count = n_unseen
        self._seen_rate_sum = seen_sum
        free = unseen.copy()
        free[limits.rows] = False
        hosts = limits.group[free].astype(np.intp)
        hosts[hosts < 0] = limits.cap.size  # no host: the last entry, as in own_padded
        self._host_unseen = np.bincount(hosts, minlength=limits.cap.size + 1).astype(np.float64)

    def _add_sums(
        self,
        group: NDArray[np.signedinteger],
        xs: tuple[F32Array | None, F32Array],
        bounds: tuple[FloatArray, FloatArray],
    ) -> None:
        """Take some rows' old x away from the per-host sums, then add their new x
        (``xs``: old and new, old None when there is none to take away); ``group`` and
        ``bounds`` are those rows' host indices and bounds, and what depends only on them
        is computed once for both."""
        limits = self._limits
        assert limits is not None
        lo, hi = bounds
        unbounded = (lo <= 0) & (hi >= 1)
        grouped = group >= 0
        loose = ~grouped
        size = limits.cap.size
        # every row in a host (the common case): all rows through a view, not a copy of the
        # grouped ones, and no loose rows to add up
        every = not loose.any()
        hosted: slice | BoolArray = slice(None) if every else grouped
        gi = group[hosted].astype(np.intp)
        for x, sign in zip(xs, (-1.0, 1.0), strict=True):
            if x is None:
                continue
            moving = (x < np.float32(1.0)) & unbounded
            signed = x.astype(np.float64) * sign
            moving_x = np.where(moving, signed, 0.0)
            self._host_sum += np.bincount(gi, signed[hosted], minlength=size)
            self._host_moving += np.bincount(gi, moving_x[hosted], minlength=size)
            if not every:
                self._loose_moving += float(np.sum(signed[moving & loose]))

    def _relevel(self, target: float) -> bool:
        """Under constraints, between scheduled solves: bring sum(x) back to ``target``
        from the per-host sums kept as the polls come in (the rows below 1 and unbounded
        scale as 1 / level, the rest stay): the new-URL value is set as a solve sets it
        (the mean rate of the observed rows), each capped host's own level moves so that its
        rows fill its cap, and the global level is solved (``_global_level``) with each
        host at the larger of the two. O(hosts) for the levels, then a pass over the rows
        for x (and one for the unobserved rows' rate when the new-URL value moved): the
        full constrained solve's host searches cost a few hundred passes. Rows that cross a
        bound or 1 are set right at the next scheduled solve, so it is a little less exact
        (with the one-step relevel of before, on the live caps benchmark's site, 400 URLs
        simulated, 10 seeds: 0.903 of the capped limit over slots 100-300 against 0.920
        with full solves). So it runs only from ``RELEVEL_FROM`` URLs on, where a full solve
        costs more than the slot. Equal weights and no whole-slot rounding only (False:
        nothing done, the caller solves in full)."""
        limits = self._limits
        m = self._level
        if (
            limits is None
            or self._weighted
            or self.settings.whole_intervals
            or self._guard is None
            or self._guard.limits() is not limits
            or not (0.0 < m < math.inf)
            or self._host_sum.size != limits.cap.size
            or self._ids.size < RELEVEL_FROM
        ):
            return False
        own = self._own_padded[:-1]
        moving, total_h = self._host_moving, self._host_sum
        total, loose_moving = self._total, self._loose_moving
        # The new-URL value follows the observed rows' mean as a solve would set it (it
        # stood at the last solve's until then: at the start of a crawl the rate of 1 given
        # before any observation, while each slot's first observations lowered sum(x) by
        # 3-6 %, to which the global level kept giving way). The unobserved rows without a
        # bound share their host's x: their counts move the sums at once.
        value = self._fresh_new_value()
        if value is not None and self._unseen_count:
            levels = np.append(np.maximum(own, m), m)
            was = np.minimum(float(np.float32(self._new_value)) / levels, 1.0)
            now = np.minimum(float(np.float32(value)) / levels, 1.0)
            counts = self._host_unseen
            d_sum = counts * (now - was)
            d_moving = counts * (np.where(now < 1.0, now, 0.0) - np.where(was < 1.0, was, 0.0))
            total_h = total_h + d_sum[:-1]
            moving = moving + d_moving[:-1]
            loose_moving += float(d_moving[-1])
            total += float(d_sum.sum())
        # Each host's level in force moves as 1 / level the x of its rows below 1 and
        # without a bound (``moving``, at its level in force now): a capped host's own level
        # becomes the one at which those rows fill what its other rows leave of its cap, and
        # the global level is then the one at which every row meets the target, each host at
        # the larger of its own level and the global one.
        level_now = np.maximum(own, m)
        with np.errstate(invalid="ignore"):  # a host at an infinite level: no moving x
            weight = np.where(moving > 0, moving * level_now, 0.0)  # moving x at L: weight / L
        capped = np.isfinite(limits.cap)
        room_h = np.where(capped, limits.cap, 0.0) - (total_h - moving)
        fits = capped & (moving > 0) & (room_h > 0)
        new_own = own.copy()
        new_own[fits] = weight[fits] / room_h[fits]
        rest = total - float(moving.sum()) - loose_moving
        m_new = _global_level(weight, new_own, loose_moving * m, rest, target, m)
        if m_new is None:
            return False
        new_moving = weight / np.maximum(new_own, m_new)
        self._own_padded = np.append(new_own, 0.0)
        if value is not None:
            if self._unseen_count:
                _put_unseen(self._rhat, self._observed, value)
                self._held_rows.clear()
            self._new_value = value
        x = _levelled_x(self._own_padded, m_new, limits.group, self._rhat, self._x)
        rows = limits.rows
        if rows.size:
            x[rows] = np.clip(x[rows], limits.row_lower, limits.row_upper)
        self._x = x
        self._level = m_new
        self._host_moving = new_moving
        self._host_sum = total_h - moving + new_moving
        self._loose_moving = loose_moving * m / m_new
        self._total = float(x.sum(dtype=np.float64))
        return True

    def _constrained_x(
        self,
        rate: F32Array,
        pos: IndexArray | None,
        bounds: tuple[FloatArray, FloatArray] | None = None,
        group: NDArray[np.signedinteger] | None = None,
    ) -> F32Array:
        """x of rows ``pos`` (None: all) at their levels in force, clipped to the bounds
        (``bounds`` and ``group``: those of rows ``pos`` when the caller has them)."""
        assert self._limits is not None
        rows = slice(None) if pos is None else pos
        if group is None:
            group = self._limits.group[rows]
        # the larger of the host's own level and the global one, per host then per row
        level = np.maximum(self._own_padded, self._level)[group]
        r = rate.astype(np.float64)
        u = inverse_gain(level / self._importance[rows]) if self._weighted else level
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            x = np.where((u > 0) & np.isfinite(u), r / u, np.where(u > 0, 0.0, 1.0))
        if pos is None:
            lo, hi = self._limits.lower, self._limits.upper
        else:
            lo, hi = self._limits.bounds_of(pos) if bounds is None else bounds
        out: F32Array = _within_bounds(x, lo, hi).astype(np.float32)
        return out

    def _solve_equal(self, rate: F32Array, capacity: float) -> None:
        """Equal weights: the water level u, then (whole_intervals) the short intervals
        rounded to whole slots with u re-balanced; the URLs on the margin between two whole
        intervals take up the remainder so that sum(x) = C."""
        u0 = water_level(rate if rate.size > 100_000 else rate.astype(np.float64), capacity)
        big = self.settings.whole_intervals
        self._u = u0
        if not big:
            self._x = self._equal_x(rate, u0, out=self._x)
            return
        head = np.flatnonzero(rate >= np.float32(u0 / (2 * big)))
        rh = rate[head]
        tail_sum = float(rate.sum(dtype=np.float64)) - float(rh.sum(dtype=np.float64))

        def total(u: float) -> float:
            return tail_sum / u + float(self._equal_x(rh, u).sum(dtype=np.float64))

        lo, hi = 0.5 * u0, 2.0 * u0
        if total(lo) < capacity or total(hi) > capacity:
            self._x = self._equal_x(rate, u0)
            return
        for _ in range(48):
            mid = math.sqrt(lo * hi)
            if total(mid) > capacity:
                lo = mid
            else:
                hi = mid
        self._u = hi
        x = self._equal_x(rate, hi)
        x_lo = self._equal_x(rh, lo)
        gap = capacity - float(x.sum(dtype=np.float64))
        diff = x_lo - x[head]
        spread = float(diff.sum(dtype=np.float64))
        if gap > 0 and spread > 0:
            x[head] += np.float32(min(1.0, gap / spread)) * diff
        self._x = x

    def _solve_weighted(self, rate: F32Array, capacity: float) -> float:
        """The multiplier m with sum_i min(1, r_i / u_i(m)) = C, by bisection on log m."""
        w = self._importance

        def excess(m: float) -> float:
            return float(self._weighted_x(rate, w, m).sum(dtype=np.float64)) - capacity

        top = float(w.max())
        lo, hi = min(max(self._m, 1e-12), top) * 0.5, min(max(self._m, 1e-12) * 2.0, top)
        while excess(lo) < 0 and lo > 1e-15:
            lo *= 0.1
        while excess(hi) > 0 and hi < top:
            hi = min(hi * 10.0, top)
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            e = excess(mid)
            if abs(e) <= 1e-4 * capacity:
                return mid
            if e > 0:
                lo = mid
            else:
                hi = mid
        return hi


def _levelled_x(
    own_padded: FloatArray,
    level: float,
    group: NDArray[np.signedinteger],
    rate: F32Array,
    out: F32Array,
) -> F32Array:
    """x = min(1, rate / the row's level) in float32, written into ``out``: a row's level is
    the larger of its host's own (``own_padded``, index -1 for no host, there 0) and the
    global ``level``. That larger one is taken per host first, then gathered into ``out``
    (no new array of n rows). It is computed as rate / max(level, rate): the same float32
    value for every finite rate (a rate above its level divides by itself, exactly 1; the
    rest is rate / level as before; 0 / 0 and NaN stay NaN), and the maximum of two arrays
    is half the cost of NumPy's minimum with a scalar (0.2 against 0.4 ms at 1M rows)."""
    table = own_padded.astype(np.float32)
    np.maximum(table, np.float32(level), out=table)
    n = group.size
    if n <= BLOCK:
        np.take(table, group, out=out, mode="wrap")
        np.maximum(out, rate, out=out)
        np.divide(rate, out, out=out)
        return out
    # Block by block, so that each block's level, maximum and quotient stay in the cache,
    # and each block's host indices are widened into a buffer first: NumPy's take casts
    # narrow indices to intp through a slower path (at a million rows of int16 indices,
    # 1.4-2.3 ms against 0.4 ms to widen them and 0.9 ms to take).
    index = np.empty(BLOCK, dtype=np.intp)
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        at, x, r = index[: stop - start], out[start:stop], rate[start:stop]
        np.copyto(at, group[start:stop])
        np.take(table, at, out=x, mode="wrap")
        np.maximum(x, r, out=x)
        np.divide(r, x, out=x)
    return out


def _global_level(
    weight: FloatArray,
    own: FloatArray,
    loose: float,
    rest: float,
    target: float,
    start: float,
) -> float | None:
    """The global level M at which rest + loose / M + sum_h weight_h / max(own_h, M) =
    target (each host's moving x at the larger of its own level and M), or None when no
    positive M meets it. The sum falls as M rises; between two hosts' own levels it is
    rest + B + A / M, solved exactly, so each step lands on the root once it is in the
    right interval, and a bracket (halved when a step leaves it) keeps the search going
    across them. O(hosts) per step, a few steps."""
    lo, hi = 0.0, math.inf
    level = start
    for _ in range(64):
        held = own >= level
        free_weight = loose + float(weight[~held].sum())
        fixed = rest + float((weight[held] / own[held]).sum())
        fill = fixed + free_weight / level
        if abs(fill - target) <= 1e-12 * target:
            return level
        if fill > target:
            lo = level
        else:
            hi = level
        room = target - fixed
        step = free_weight / room if free_weight > 0 and room > 0 else math.nan
        if not lo < step < hi:
            if hi == math.inf:
                step = 2.0 * level
            elif lo == 0.0:
                step = 0.5 * level
            else:
                step = math.sqrt(lo * hi)
        if step == level or not math.isfinite(step) or step <= 0:
            break
        level = step
    if hi == math.inf or lo == 0.0:
        return None
    return level


def _put_unseen(rate: F32Array, observed: BoolArray, value: float) -> None:
    """rate = ``value`` (in float32) on the rows not ``observed``, block by block through
    buffers of ``BLOCK`` rows. The rows are chosen by bits, without a branch: where a row is
    unobserved its mask is all ones and rate ^ ((rate ^ value) & mask) is value, elsewhere
    the mask is 0 and the rate stays, bit for bit (a masked store, np.putmask, branches on
    every row: 4.6 ms at a million rows half of them unobserved, this 1.4 ms)."""
    fill = np.float32(value).view(np.uint32)
    bits = rate.view(np.uint32)
    n = rate.size
    flips = np.empty(min(n, BLOCK), dtype=np.uint32)
    mask = np.empty(min(n, BLOCK), dtype=np.uint32)
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        flip, m = flips[: stop - start], mask[: stop - start]
        m[:] = observed[start:stop]  # 1 where observed
        np.subtract(m, 1, out=m)  # all ones where unobserved (unsigned wrap-around), else 0
        block = bits[start:stop]
        np.bitwise_xor(block, fill, out=flip)
        np.bitwise_and(flip, m, out=flip)
        np.bitwise_xor(block, flip, out=block)


def _within_bounds(x: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """x clipped to [lo, hi], NaN to lo (the bounds are in [0, 1], lo <= hi): what
    clip(nan_to_num(x, nan=0), lo, hi) gives (an infinite x goes to a bound either way), in
    two passes instead of nan_to_num's copy and three tests before the clip."""
    out: FloatArray = np.fmin(np.fmax(x, lo), hi)
    return out


def _at_most_one(x: F32Array) -> None:
    """x = min(x, 1) in place (NaN stays NaN). The minimum is skipped only when the largest
    value is at most 1, when it changes nothing (a NaN anywhere makes the maximum NaN, and
    then the minimum runs): at a million rows NumPy's minimum with a scalar costs 0.4 ms,
    the maximum that rules it out 0.1 ms, and early in a run no value is above 1."""
    if x.size and not x.max() <= 1.0:
        np.minimum(x, np.float32(1.0), out=x)


def _log_ratios(hits: BoolArray, rt: FloatArray, k: float, misses: FloatArray) -> FloatArray:
    """A CUSUM step per poll: ``misses`` (the miss's log-likelihood ratio, computed by the
    caller) where the poll missed and ln((1 - e^(-k rt)) / (1 - e^(-rt))) where it hit,
    the logarithms taken on the hits only (a third of the polls, the costly part)."""
    hit = np.flatnonzero(hits)
    if hit.size:
        r = rt[hit]
        with np.errstate(divide="ignore", over="ignore"):
            misses[hit] = np.log(-np.expm1(-k * r)) - np.log(-np.expm1(-r))
    return misses


def _whole(x: F32Array, rate: F32Array, level: float) -> F32Array:
    """Round frequencies to 1 / (a whole number of slots): of the two whole intervals around
    1 / x keep the one with the larger value net of the multiplier, (1 - e^-rk - g) / k."""
    k1 = np.maximum(np.floor(1.0 / x.astype(np.float64)), 1.0)
    k2 = k1 + 1.0
    r = rate.astype(np.float64)
    v1 = (-np.expm1(-r * k1) - level) / k1
    v2 = (-np.expm1(-r * k2) - level) / k2
    return np.where(v1 >= v2, 1.0 / k1, 1.0 / k2).astype(np.float32)
