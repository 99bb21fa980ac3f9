"""Options objects (dataclasses) filled from a command's parsed arguments, in one place.

A command hands its runner a dataclass of options (loadtest's SweepOptions/OverheadOptions,
sim's Inputs) whose fields mostly mirror its flags. Spelling out `field=args.flag` for each is
where a flag gets dropped or crossed; here a field is read from the argument of the same name,
or of the name in `renames`, unless the caller gives it (values the command computes).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def options_from_args(
    cls: type[T], args: argparse.Namespace, renames: Mapping[str, str], /, **given: Any
) -> T:
    """`cls` with each field from `given`, else from `args.<renames.get(field, field)>`.

    Every field must come from one or the other (a missing argument is an AttributeError,
    never a silent default), so a new field is a visible decision in each command."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    unknown = set(given) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {', '.join(sorted(unknown))}")
    values = {
        f.name: given[f.name] if f.name in given else getattr(args, renames.get(f.name, f.name))
        for f in dataclasses.fields(cls)
    }
    return cls(**values)
