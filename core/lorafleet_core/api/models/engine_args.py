"""Which vLLM flags a ReplicaPool's `engine.extraArgs` may not carry.

lorafleet starts vLLM itself with flags its guarantees rest on: the model and the name it is
served under, loopback only (`--host 127.0.0.1 --port 8000`), the API key only the agent holds
(env VLLM_API_KEY), the LoRA slots and rank cap the agent's own settings repeat, and adapters
only from the registry (runtime loading of verified files, never `--lora-modules`). vLLM takes
the last of a flag given twice, and extraArgs come last, so without this check a pool could
open vLLM on the pod network (`--host 0.0.0.0`), replace its key (`--api-key`), serve
unverified adapters (`--lora-modules x=/any/path`), turn LoRA off (`--no-enable-lora`) or run
a model repository's code (`--trust-remote-code`). Refused as well: `--config` (a YAML file of
any flags, which cannot be checked here), `--uds`, `--grpc`, `--grpc-port` (other ways to open
the engine) and `--allowed-local-media-path` (requests reading the pod's files).

vLLM's parser (argparse, `allow_abbrev` on) also takes any unambiguous prefix of a flag
(`--trust-remote` is `--trust-remote-code`, `--api-ke x` is `--api-key x`), reads `_` as `-`
in a flag's name, and a value after `=` or a JSON field after `.`; every form is refused,
checked against the installed vLLM by tests/api/test_engine_args.py. Each reserved flag has
its own spec field or none on purpose.
"""

from __future__ import annotations

import re

RESERVED_FLAGS: tuple[str, ...] = (
    "model",
    "served-model-name",
    "host",
    "port",
    "uds",
    "grpc",
    "grpc-port",
    "api-key",
    "enable-lora",
    "no-enable-lora",
    "max-loras",
    "max-cpu-loras",
    "max-lora-rank",
    "lora-modules",
    "trust-remote-code",
    "config",
    "allowed-local-media-path",
)


def _prefixes(flag: str) -> str:
    """A regex for every non-empty prefix of `flag`, `-` also written `_`: `h(o(s(t)?)?)?`."""
    out = ""
    for char in reversed(flag):
        piece = "[-_]" if char == "-" else re.escape(char)
        out = f"{piece}({out})?" if out else piece
    return out


# One text for the CRD's CEL rule and the model's validator (no backslash: it sits in a CEL
# string). Go's `$` is the end of the text; Python's also matches before a final newline.
RESERVED_FLAG_PATTERN = "^--(" + "|".join(_prefixes(f) for f in RESERVED_FLAGS) + ")([=.]|$)"
_RESERVED = re.compile(RESERVED_FLAG_PATTERN.replace("$", r"\Z"))

# Whether an argument sets a reserved flag shows in its first characters: `--`, a name of at
# most 24 (allowed-local-media-path), then `=`, `.` or the end. The rule matches only that head:
# the API server charges a regex match (pattern length / 4) x (text length / 10) at run time and
# refuses an expression past 1,000,000 (k8s.io/apiserver/pkg/apis/cel PerCallLimit), so the
# whole of 14 arguments of 4,096 characters against this 720-character pattern was refused
# with a cost error instead of the rule's message (tests/api/test_cel_cost.py).
ARG_HEAD = max(len(f) for f in RESERVED_FLAGS) + 8
EXTRA_ARGS_RULE = (
    f"self.all(a, !(a.size() > {ARG_HEAD} ? a.substring(0, {ARG_HEAD}) : a)"
    f".matches('{RESERVED_FLAG_PATTERN}'))"
)
EXTRA_ARGS_MESSAGE = (
    "extraArgs may not set flags lorafleet sets or refuses (" + ", ".join(RESERVED_FLAGS) + "), "
    "nor an abbreviation of one: use the spec's fields (engine.gpuSlots, maxRank, ...)"
)


def reserved_flag(arg: str) -> str | None:
    """The reserved flag `arg` would set in vLLM (itself or an abbreviation), else None."""
    if not _RESERVED.match(arg):
        return None
    name = re.split(r"[=.]", arg[2:], maxsplit=1)[0].replace("_", "-")
    return next(f for f in RESERVED_FLAGS if f.startswith(name))


def check_extra_args(args: list[str]) -> list[str]:
    """The pydantic side of EXTRA_ARGS_RULE: `args` unchanged, or a ValueError naming the flag."""
    for arg in args:
        if (flag := reserved_flag(arg)) is not None:
            raise ValueError(
                f"{arg!r} sets vLLM's --{flag}, which lorafleet sets itself or refuses; "
                + EXTRA_ARGS_MESSAGE
            )
    return args
