"""Properties every strategy must hold on random groups."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors import DEFAULT_POLICY, STRATEGIES, TopicPartition, assign
from assignors.ids import valid_claims
from assignors.quality import is_balanced, minimal_movement_uniform, movement, problems
from assignors.spec import build_spec

from .strategies_hyp import groups, lags, messy_current

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _shuffled(d: dict, rng: random.Random) -> dict:  # type: ignore[type-arg]
    items = list(d.items())
    rng.shuffle(items)
    return dict(items)


@SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_valid_complete_sorted_and_deterministic(strategy: str, data: st.DataObject) -> None:
    ppt, subs = data.draw(groups())
    current = data.draw(messy_current(ppt, list(subs)))
    lag = data.draw(lags(ppt))
    result = assign(strategy, ppt, subs, current=current, lag=lag)
    assert set(result) == set(subs)
    assert problems(result, ppt, subs) == []
    for v in result.values():
        assert v == sorted(v)
        assert all(isinstance(tp, TopicPartition) for tp in v)
    rng = random.Random(data.draw(st.integers()))
    again = assign(
        strategy,
        _shuffled(ppt, rng),
        {m: list(reversed(t)) for m, t in _shuffled(subs, rng).items()},
        current={m: list(reversed(v)) for m, v in _shuffled(current, rng).items()},
        lag=_shuffled(lag, rng),
    )
    assert again == result


@SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("strategy", ["sticky", "lagsticky"])
def test_sticky_strategies_are_kip54_balanced(strategy: str, data: st.DataObject) -> None:
    ppt, subs = data.draw(groups())
    current = data.draw(st.one_of(st.none(), messy_current(ppt, list(subs))))
    lag = data.draw(st.one_of(st.none(), lags(ppt)))
    result = assign(strategy, ppt, subs, current=current, lag=lag)
    assert is_balanced(result, subs), result


@SETTINGS
@given(data=st.data())
def test_identical_subscriptions_move_exactly_the_minimum(data: st.DataObject) -> None:
    ppt, subs = data.draw(groups(uniform=True))
    current = data.draw(messy_current(ppt, list(subs)))
    spec = build_spec(ppt, subs)
    kept = valid_claims(spec, current)
    total = sum(ppt.values())
    floor = minimal_movement_uniform(kept, list(subs), total)
    assert movement(kept, assign("sticky", ppt, subs, current=current), subs) == floor
    # Without lag, lagsticky has nothing to trade and must be just as sticky.
    assert movement(kept, assign("lagsticky", ppt, subs, current=current), subs) == floor


@SETTINGS
@given(data=st.data())
def test_lagsticky_lag_moves_stay_within_the_policy_budget(data: st.DataObject) -> None:
    ppt, subs = data.draw(groups(uniform=True))
    current = data.draw(messy_current(ppt, list(subs)))
    lag = data.draw(lags(ppt))
    kept = valid_claims(build_spec(ppt, subs), current)
    floor = minimal_movement_uniform(kept, list(subs), sum(ppt.values()))
    moved = movement(kept, assign("lagsticky", ppt, subs, current=current, lag=lag), subs)
    assert floor <= moved <= floor + DEFAULT_POLICY.max_moves


def test_deterministic_across_hash_seeds() -> None:
    code = (
        "from assignors import assign;"
        "ppt={f't{i}':7 for i in range(6)};"
        "subs={f'm{i}':[f't{j}' for j in range(6) if (i+j)%3] for i in range(9)};"
        "lag={('t1',p):p*100 for p in range(7)};"
        "print([(s, assign(s, ppt, subs, lag=lag)) for s in "
        "('range','roundrobin','fair','sticky','lag','lagsticky')])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "12345")
    }
    assert len(outs) == 1
