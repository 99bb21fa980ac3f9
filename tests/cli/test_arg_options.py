"""Options objects filled from parsed arguments (lorafleet_cli.arg_options), and the three
commands' mappings: every flag reaches its field, under its own name or a renamed one."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from lorafleet_cli import cmd_loadtest, cmd_sim
from lorafleet_cli.arg_options import options_from_args
from lorafleet_cli.main import build_parser
from lorafleet_loadtest import session
from lorafleet_loadtest.plan import LengthLimits


@dataclasses.dataclass(frozen=True)
class Options:
    rate: float
    duration_s: float
    extra: int = 7


def test_fields_come_from_same_named_args_renamed_args_or_the_caller():
    args = argparse.Namespace(rate=2.5, duration=9.0, extra=99)
    got = options_from_args(Options, args, {"duration_s": "duration"}, extra=3)
    assert got == Options(rate=2.5, duration_s=9.0, extra=3)


def test_a_field_with_no_argument_is_an_error_not_its_default():
    with pytest.raises(AttributeError, match="extra"):
        options_from_args(Options, argparse.Namespace(rate=1.0, duration_s=2.0), {})


def test_a_given_value_for_no_field_is_an_error():
    args = argparse.Namespace(rate=1.0, duration_s=2.0, extra=1)
    with pytest.raises(TypeError, match="no field"):
        options_from_args(Options, args, {}, typo=1)


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_loadtest_flags_reach_the_sweep_and_overhead_options():
    args = _parse(
        "loadtest", "--rates", "2,4", "--duration", "11", "--max-requests", "13", "--zipf",
        "1.3", "--seed", "17", "--concurrency", "19", "--timeout", "23", "--tokens-per-word",
        "1.5", "--adapter-counts", "1,3", "--overhead-concurrency", "29", "--overhead-duration",
        "31", "--overhead-max-tokens", "37", "--overhead-prompt-tokens", "41",
        "--overhead-rounds", "5", "--engine-direct",
    )  # fmt: skip
    limits = LengthLimits(48, 16, 256)
    sweep = options_from_args(
        session.SweepOptions, args, cmd_loadtest.SWEEP_ARGS,
        trace=Path("t.csv"), limits=limits, progress=False,
    )  # fmt: skip
    assert sweep == session.SweepOptions(
        rates=[2.0, 4.0], duration_s=11.0, max_requests=13, zipf_s=1.3, seed=17,
        trace=Path("t.csv"), limits=limits, concurrency=19, timeout_s=23.0,
        tokens_per_word=1.5, progress=False,
    )  # fmt: skip
    overhead = options_from_args(
        session.OverheadOptions, args, cmd_loadtest.OVERHEAD_ARGS,
        engine_url=None, engine_key="none", progress=True,
    )  # fmt: skip
    assert overhead == session.OverheadOptions(
        counts=[1, 3], concurrency=29, duration_s=31.0, max_tokens=37, prompt_tokens=41,
        tokens_per_word=1.5, timeout_s=23.0, engine_url=None, engine_key="none",
        progress=True, engine_direct=True, rounds=5,
    )  # fmt: skip


def test_sim_flags_reach_the_scenario_inputs(tmp_path: Path):
    mix = tmp_path / "mix.csv"
    args = _parse(
        "sim", "--rate", "3", "--duration", "60", "--warmup", "7", "--adapters", "50",
        "--zipf", "1.2", "--seed", "4", "--poisson", "--mix", str(mix), "--router", "random",
        "--replicas", "5", "--set", "gpu_slots=8",
    )  # fmt: skip
    inputs = cmd_sim.inputs_from_args(args)
    assert (inputs.rate, inputs.duration_s, inputs.warmup_s) == (3.0, 60.0, 7.0)
    assert (inputs.adapters, inputs.zipf_s, inputs.seed) == (50, 1.2, 4)
    assert (inputs.poisson, inputs.mix_file, inputs.router, inputs.trace) == (
        True, mix, "random", None
    )  # fmt: skip
    assert inputs.fleet.replicas == 5
    assert inputs.replica.gpu_slots == 8
