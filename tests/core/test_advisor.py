"""The checkpoint-period advisor: the goodput model against hand-computed cases, the search against brute force,
and the figures read from the local workload's events."""

from __future__ import annotations

import math

import pytest

from mtc_provider.core.view.advisor import (
    Costs,
    FailureRates,
    advice_after_run,
    advise,
    apply_advice,
    expected_goodput,
    measure_events,
    measured_goodput,
    young_daly_steps,
)
from mtc_provider.core.basics.errors import SpecError

# Case D of the docs: step 1 s, saves 1 s (local) / 3 s (persistent step), restores 2 s / 6 s, restart 20 s.
COSTS = Costs(step_s=1.0, save_local_s=1.0, save_persistent_s=3.0, restore_local_s=2.0, restore_persistent_s=6.0,
              restart_s=20.0)
RATES = FailureRates(host_loss=1 / 200, slice_loss=1 / 1000, preemption=1 / 2000)


def test_general_case_by_hand():
    e = expected_goodput(COSTS, RATES, 10, 50)
    # tau = 1 + 1*(1/10 - 1/50) + 3/50 = 1.14
    assert e.step_cost_s == pytest.approx(1.14)
    # host 10*1.14/2 + 20 + 2 = 27.7; slice 50*1.14/2 + 20 + 6 = 54.5; preemption 3 + 20 + 6 = 29
    assert e.per_failure_s == pytest.approx({"host_loss": 27.7, "slice_loss": 54.5, "preemption": 29.0})
    # F = 27.7/200 + 54.5/1000 + 29/2000 = 0.2075
    assert e.failure_load == pytest.approx(0.2075)
    assert e.goodput == pytest.approx((1 / 1.14) * (1 - 0.2075))


def test_a_finite_run_pays_its_startup_once():
    e = expected_goodput(COSTS, RATES, 10, 50, total_steps=100, startup_s=30)
    assert e.goodput == pytest.approx(100 * 1 * (1 - 0.2075) / (100 * 1.14 + 30))


def test_periods_that_are_not_nested_count_shared_steps_once():
    # L=4, P=6: local-only save steps are 1/4 - 1/12 of all steps
    e = expected_goodput(Costs(step_s=1.0, save_local_s=1.0, save_persistent_s=2.0), FailureRates(), 4, 6)
    assert e.step_cost_s == pytest.approx(1 + (1 / 4 - 1 / 12) + 2 / 6)


def test_no_failures_goodput_is_the_save_overhead_alone_and_the_advice_is_as_rare_as_allowed():
    costs = Costs(step_s=1.0, save_local_s=0.1, save_persistent_s=0.5)
    e = expected_goodput(costs, FailureRates(), 5, 20)
    assert e.goodput == pytest.approx(1 / (1 + 0.1 * (1 / 5 - 1 / 20) + 0.5 / 20))  # 1/1.04
    assert expected_goodput(costs, FailureRates(), 5, 20, total_steps=100, startup_s=4).goodput == \
        pytest.approx(100 / 108)
    advice = advise(costs, FailureRates(), total_steps=100)
    assert (advice.local_period, advice.persistent_period) == (50, 100)
    assert advice.expected.goodput == pytest.approx(100 / (100 * (1 + 0.1 * (1 / 50 - 1 / 100) + 0.005)))
    assert advice.young_daly_local is None and advice.young_daly_persistent is None
    assert any("no failures" in note for note in advice.notes)


def test_zero_save_cost_saves_every_step_allowed():
    costs = Costs(step_s=1.0, restore_local_s=2.0, restore_persistent_s=5.0, restart_s=10.0)
    rates = FailureRates(host_loss=0.01, slice_loss=0.001)
    advice = advise(costs, rates)
    assert (advice.local_period, advice.persistent_period) == (1, 2)
    # F = 0.01*(1/2 + 12) + 0.001*(2/2 + 15) = 0.141
    assert advice.expected.goodput == pytest.approx(1 - 0.141)
    assert any("cost nothing" in note for note in advice.notes)


def test_failures_faster_than_a_save_leave_no_feasible_schedule():
    costs = Costs(step_s=1.0, save_local_s=10.0, save_persistent_s=20.0)
    rates = FailureRates.from_mtbf(host_loss_s=5, slice_loss_s=5)  # a failure every 5 s, a save takes 10 s
    assert expected_goodput(costs, rates, 1, 2).goodput == 0.0
    advice = advise(costs, rates, total_steps=1000)
    assert not advice.feasible and advice.expected.goodput == 0.0
    assert any("no schedule makes progress" in note for note in advice.notes)


def brute_force(costs, rates, total_steps=None, startup_s=0.0, limit=400):
    best = None
    for L in range(1, limit // 2 + 1):
        for P in range(2 * L, limit + 1, L):
            g = expected_goodput(costs, rates, L, P, total_steps, startup_s).goodput
            if best is None or g > best[0] + 1e-12:
                best = (g, L, P)
    return best


@pytest.mark.parametrize("costs,rates,steps", [
    (COSTS, RATES, None),
    (Costs(0.12, 0.12, 0.2, 0.5, 0.45, 10.8), FailureRates.from_mtbf(60, 120), 200),
    (Costs(2.0, 0.3, 5.0, 1.0, 30.0, 60.0), FailureRates.from_mtbf(5000, 20000, 3000), None),
    (Costs(1.0, 4.0, 4.5, 1.0, 1.0, 5.0), FailureRates(0.02, 0.0001, 0.001), 300),
])
def test_the_search_finds_the_brute_force_optimum(costs, rates, steps):
    limit = steps or 400
    g, L, P = brute_force(costs, rates, steps, 5.0 if steps else 0.0, limit)
    advice = advise(costs, rates, steps, 5.0 if steps else 0.0, max_period=limit)
    assert advice.expected.goodput == pytest.approx(g, rel=1e-9)
    assert advice.local_period < advice.persistent_period <= limit
    assert advice.persistent_period % advice.local_period == 0


def test_young_daly_agrees_with_the_model_when_failures_are_rare():
    costs = Costs(step_s=1.0, save_local_s=2.0, save_persistent_s=10.0, restart_s=60.0)
    rates = FailureRates.from_mtbf(host_loss_s=86_400, slice_loss_s=864_000)
    advice = advise(costs, rates)
    assert young_daly_steps(2.0, 1 / 86_400, 1.0) == pytest.approx(math.sqrt(2 * 2 * 86_400))  # 587.9
    assert advice.young_daly_local == pytest.approx(587.87, abs=0.01)
    assert advice.local_period == pytest.approx(advice.young_daly_local, rel=0.05)
    # P: the marginal cost of a persistent save (10 - 2 s): sqrt(2 * 8 * 864000) = 3718
    assert advice.persistent_period == pytest.approx(advice.young_daly_persistent, rel=0.1)


def test_preemptions_cost_the_same_whatever_the_periods():
    base = expected_goodput(COSTS, FailureRates(RATES.host_loss, RATES.slice_loss), 10, 50)
    more = expected_goodput(COSTS, FailureRates(RATES.host_loss, RATES.slice_loss, 1 / 100), 10, 50)
    # each preemption costs 3 + 20 + 6 = 29 s whatever L and P: F grows by 29/100
    assert more.failure_load == pytest.approx(base.failure_load + 0.29)
    assert more.goodput == pytest.approx(base.goodput - 0.29 / 1.14)


def test_the_ramdisk_holding_two_checkpoints_bounds_the_local_period():
    free = advise(COSTS, RATES)
    assert free.local_period < 30
    bounded = advise(Costs(**{**COSTS.__dict__, "local_write_s": 29.5}), RATES)
    assert bounded.min_local_period == 30 and bounded.local_period == 30
    assert bounded.expected.goodput < free.expected.goodput


def test_fleet_mtbf_per_host_scales_with_hosts():
    rates = FailureRates.from_mtbf(host_loss_s=1_000_000, slice_loss_s=None, hosts=250)
    assert rates.host_loss == pytest.approx(250 / 1_000_000) and rates.slice_loss == 0.0


@pytest.mark.parametrize("call,field", [
    (lambda: Costs(step_s=0), "step_s"),
    (lambda: Costs(step_s=1, save_local_s=-1), "save_local_s"),
    (lambda: Costs(step_s="fast"), "step_s"),
    (lambda: FailureRates(host_loss=float("nan")), "rates.host_loss"),
    (lambda: FailureRates.from_mtbf(host_loss_s=0), "host_loss_mtbf_s"),
    (lambda: FailureRates.from_mtbf(hosts=0), "hosts"),
    (lambda: expected_goodput(COSTS, RATES, 20, 20), "local_checkpoint_period"),
    (lambda: expected_goodput(COSTS, RATES, 0, 20), "local_checkpoint_period"),
    (lambda: expected_goodput(COSTS, RATES, 2, 2.5), "checkpoint_period"),
    (lambda: advise(COSTS, RATES, total_steps=1), "total_steps"),
    (lambda: advise(Costs(1.0, local_write_s=60), RATES, total_steps=100), "local_write_s"),
])
def test_bad_inputs_name_the_field(call, field):
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.field == field and "allowed" in str(err.value)


# ---- measurements from events ------------------------------------------------------------------------------
def run_events():
    """Two processes; L=2, P=4; step 1 s, a local save blocks 0.3 s, a persistent-save step 0.8 s.

    Attempt 0: start 0, first step at 5 (4 s start-up), killed after step 9. Attempt 1 restores step 8 from the
    local tier (a host loss), is preempted after step 12 (autocheckpoint). Attempt 2 restores 12 from the
    persistent tier, finishes at 16.
    """
    events = []

    def add(ts, event, process=0, **kw):
        events.append({"ts": ts, "event": event, "process": process, **kw})

    def steps(first, last, t):
        for step in range(first, last + 1):
            if step > first:
                t += 1.0
            add(t, "step", 0, step=step)
            add(t, "step", 1, step=step)
            if step % 4 == 0:
                add(t, "save_start", 0, step=step, tier="persistent")
                add(t, "save_start", 1, step=step, tier="local")
                add(t + 0.5, "save_end", 1, step=step, tier="local", duration_s=0.5)
                t += 0.8
            elif step % 2 == 0:
                add(t, "save_start", 1, step=step, tier="local")
                add(t + 0.4, "save_end", 1, step=step, tier="local", duration_s=0.4)
                t += 0.3
        return t

    for p in (0, 1):
        add(0.0, "start", p)
    end0 = steps(1, 9, 5.0)  # step 9 is not a save step: the attempt ends at its step event
    for p in (0, 1):
        add(end0 + 2, "start", p)
        add(end0 + 5, "restore", p, step=8, tier="local", duration_s=0.5)
    end1 = steps(9, 12, end0 + 5 + 2.5)  # first step 1.5 s over the step time (compilation)
    for p in (0, 1):
        add(end1 + 0.1, "preempted", p, step=12, saved=True)
        add(end1 + 3, "start", p)
        add(end1 + 6, "restore", p, step=12, tier="persistent", duration_s=0.4)
    end2 = steps(13, 16, end1 + 6 + 1.0)
    for p in (0, 1):
        add(end2 + 0.2, "finish", p, step=16)
    return events, end2 + 0.2


def test_measurements_from_the_workload_events():
    events, _ = run_events()
    m = measure_events(events)
    assert m.step_s == pytest.approx(1.0)
    assert m.save_local_s == pytest.approx(0.3) and m.save_persistent_s == pytest.approx(0.8)
    assert m.local_write_s == pytest.approx(0.45)  # local saves took 0.4 s (L steps) or 0.5 s (P steps), 4 each
    assert (m.restore_local_s, m.restore_persistent_s) == pytest.approx((0.5, 0.4))
    # attempt 1: first step 7.5 s after the attempt's end, less 0.5 s restore and 1 s step = 6;
    # attempt 2: 7 s after the restore-less start, less the 0.1 s to the preempted event, 0.4 s restore, 1 s
    assert m.restart_s == pytest.approx((6.0 + 5.5) / 2)
    assert m.startup_s == pytest.approx(4.0)
    assert m.failures == {"host_loss": 1, "slice_loss": 0, "preemption": 1}
    assert (m.local_period, m.persistent_period, m.total_steps) == (2, 4, 16)


def test_after_a_run_the_advice_line_names_periods_and_both_goodputs():
    events, end = run_events()
    out = advice_after_run(events)
    advice = out["advice"]
    assert out["line"].startswith(f"with L={advice['local_period']}, P={advice['persistent_period']} "
                                  f"expected goodput {advice['expected']['goodput']:.1%} (this run: ")
    # 16 steps x 1 s over the run's wall time (first start at 0 to finish)
    assert out["this_run_goodput"] == pytest.approx(16 / end)
    assert measured_goodput(events, 1.0) == pytest.approx(16 / end)
    assert out["current"]["local_period"] == 2 and out["current"]["persistent_period"] == 4


def test_no_failures_measured_gives_no_advice():
    events = [{"ts": 0.0, "event": "start", "process": 0}] + [
        {"ts": float(s), "event": "step", "process": 0, "step": s} for s in range(1, 6)]
    out = advice_after_run(events)
    assert out["advice"] is None and out["line"].startswith("no advice")


def test_apply_advice_sets_both_periods_or_says_there_is_none():
    params, said = apply_advice({"checkpointing": {"checkpoint_period": 20, "local_checkpoint_period": 4, "steps": 70}},
                                {"advice": {"local_period": 8, "persistent_period": 24}})
    section = params["checkpointing"]  # the run description's section (core.definition.description.run)
    assert (section["local_checkpoint_period"], section["checkpoint_period"], section["steps"]) == (8, 24, 70)
    assert "(4, 20) -> (8, 24)" in said
    unchanged, said = apply_advice({"checkpointing": {"checkpoint_period": 20}}, None)
    assert unchanged == {"checkpointing": {"checkpoint_period": 20}} and "no stored advice" in said
    with pytest.raises(SpecError):
        apply_advice({}, {"advice": {"local_period": 30, "persistent_period": 24}})


# ---- `mtc advise` ---------------------------------------------------------------------------------------------
HAND = ["--step-s", "1", "--save-local-s", "1", "--save-persistent-s", "3", "--restore-local-s", "2",
        "--restore-persistent-s", "6", "--restart-s", "20", "--host-mtbf-s", "200", "--slice-mtbf-s", "1000",
        "--preemption-mtbf-s", "2000"]


def cli(*args):
    from typer.testing import CliRunner

    from mtc_provider.cli.app import app

    return CliRunner().invoke(app, ["advise", *args])


def test_cli_advise_by_hand_human_and_json_agree_with_the_model():
    import json

    expected = advise(COSTS, RATES)
    human = cli(*HAND, "--current", "10,50")
    assert human.exit_code == 0, human.output
    lines = human.stdout.splitlines()
    assert lines[0] == (f"advice: local_checkpoint_period={expected.local_period}, checkpoint_period="
                        f"{expected.persistent_period} -> expected goodput {expected.expected.goodput:.1%}")
    assert lines[1] == f"now:    local_checkpoint_period=10, checkpoint_period=50 -> expected goodput " \
                       f"{(1 / 1.14) * (1 - 0.2075):.1%}"
    data = json.loads(cli(*HAND, "--output", "json").stdout)
    assert (data["advice"]["local_period"], data["advice"]["persistent_period"]) == \
        (expected.local_period, expected.persistent_period)
    assert data["rates"]["host_loss"] == pytest.approx(1 / 200)


def test_cli_advise_from_events_of_earlier_runs(tmp_path):
    import json

    events, _ = run_events()
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "process-0.jsonl").write_text("\n".join(json.dumps(e) for e in events))
    data = json.loads(cli("--events", str(tmp_path / "events"), "--output", "json").stdout)
    assert data["costs"]["save_persistent_s"] == pytest.approx(0.8)
    assert data["current"]["local_period"] == 2 and data["total_steps"] == 16
    # rates measured over the events: two failures in the exposure time
    exposure = data["measurements"]["exposure_s"]
    assert data["rates"]["host_loss"] == pytest.approx(1 / exposure)
    hand = json.loads(cli("--events", str(tmp_path / "events"), "--step-s", "2", "--host-mtbf-s", "100",
                          "--output", "json").stdout)
    assert hand["costs"]["step_s"] == 2.0 and hand["rates"] == {"host_loss": 0.01, "slice_loss": 0.0,
                                                                "preemption": 0.0}


@pytest.mark.parametrize("args,field,allowed", [
    (["--step-s", "fast", *HAND[2:]], "step_s", "a number >= 0"),
    ([*HAND, "--current", "4"], "--current", "two integers L,P"),
    ([*HAND, "--current", "20,4"], "local_checkpoint_period", "< checkpoint_period"),
    ([*HAND[:-6]], "failure rates", "--host-mtbf-s"),
    (["--step-s", "1", "--host-mtbf-s", "10"], "save_local_s", "mtc advise --save-local-s"),
    ([*HAND, "--hosts", "0"], "hosts", "an integer >= 1"),
    (["--events", "/nonexistent/events"], "--events", "files or directories holding workload events"),
])
def test_cli_advise_bad_input_exits_2_naming_field_value_and_allowed(args, field, allowed):
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert f"error: {field}:" in result.stderr and allowed in result.stderr


def test_periods_are_read_from_regular_saves_only():
    # P=20 over a 24-step run: one regular persistent save (20) and the final one (24); local every 4 steps
    events = [{"ts": 0.0, "event": "start", "process": 0}]
    for step in range(1, 25):
        events.append({"ts": float(step), "event": "step", "process": 0, "step": step})
        if step % 20 == 0 or step == 24:
            events.append({"ts": float(step), "event": "save_start", "process": 0, "step": step, "tier": "persistent"})
        if step % 4 == 0:
            events.append({"ts": float(step), "event": "save_start", "process": 1, "step": step, "tier": "local"})
    events.append({"ts": 24.5, "event": "finish", "process": 0, "step": 24})
    m = measure_events(events)
    assert (m.local_period, m.persistent_period) == (4, 20)
