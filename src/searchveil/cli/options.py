"""Option groups: the options several commands take, each declared once.

A group is a type whose constructor, or a builder function registered for it, declares its
options as keyword parameters annotated ``Annotated[T, typer.Option(...)]`` (a dataclass: its
fields). A command decorated with :func:`command` that takes a parameter of a group's type
shows the group's options in its ``--help`` — under the group's panel, if it has one — and
receives the built object; a group's builder may itself take a group (expanded the same way).
The command's body, the groups' building included, runs under :func:`~searchveil.cli._common.run`:
a user error exits 2 with its message, a bug exits 1.

Typer reads a command's options from ``inspect.signature``, which honours ``__signature__``:
the wrapper :func:`command` returns carries the expanded signature."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import os
import typing
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from searchveil.cli._common import (
    BudgetOpt,
    OutDirOpt,
    OutFmtOpt,
    OverwriteOpt,
    ProvenanceOpt,
    SeedOpt,
    budget_result,
    build_reader_options,
    charged,
    run,
)
from searchveil.errors import InputFormatError
from searchveil.io.ledger import check_release_dir, provenance_path
from searchveil.io.paths import InputPaths
from searchveil.io.readers import ReaderOptions
from searchveil.mechanisms.budget import Charge, NoGuarantee, PrivacyCost
from searchveil.rng import RandomSource, make_rng

T = TypeVar("T")
KW = inspect.Parameter.KEYWORD_ONLY


@dataclass(frozen=True)
class Group:
    """How a group type is built (``build``'s keyword parameters are its options) and the
    ``--help`` panel its options are listed under (``None``: with the command's own)."""

    build: Callable[..., Any]
    panel: str | None = None


GROUPS: dict[type, Group] = {}


def register_group(
    cls: type, *, build: Callable[..., Any] | None = None, panel: str | None = None
) -> None:
    """Make ``cls`` an option group, built by ``build`` (default: ``cls`` itself)."""
    GROUPS[cls] = Group(build or cls, panel)


def option_group(panel: str | None = None) -> Callable[[type[T]], type[T]]:
    """Class decorator: the dataclass is an option group; its fields are the options."""

    def mark(cls: type[T]) -> type[T]:
        register_group(cls, panel=panel)
        return cls

    return mark


def _parameters(build: Callable[..., Any]) -> list[inspect.Parameter]:
    """``build``'s parameters with their annotations evaluated (a dataclass: its fields)."""
    if isinstance(build, type) and dataclasses.is_dataclass(build):
        hints = typing.get_type_hints(build, include_extras=True)
        return [
            inspect.Parameter(
                f.name,
                KW,
                default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
                annotation=hints[f.name],
            )
            for f in dataclasses.fields(build)
        ]
    return list(inspect.signature(build, eval_str=True).parameters.values())


def _in_panel(annotation: Any, panel: str | None) -> Any:
    """``annotation`` with its typer option moved to ``panel``."""
    if panel is None or typing.get_origin(annotation) is not Annotated:
        return annotation
    base, *meta = typing.get_args(annotation)
    meta = [copy.copy(m) for m in meta]
    for m in meta:
        if isinstance(m, typer.models.ParameterInfo):
            m.rich_help_panel = panel
    return Annotated[tuple([base, *meta])]


@dataclass
class _Plan:
    """How to build one object from the options: its builder, the options it takes directly,
    and the groups among its parameters (each a plan of its own)."""

    build: Callable[..., Any]
    direct: list[str]
    nested: dict[str, _Plan]
    omitted: list[str]

    def options(self) -> set[str]:
        """The names of every option of the groups, those omitted included."""
        nested = (plan.options() for plan in self.nested.values())
        return set(self.direct).union(self.omitted, *nested)

    def make(self, values: dict[str, Any]) -> Any:
        kwargs = {name: plan.make(values) for name, plan in self.nested.items()}
        kwargs.update((name, values[name]) for name in self.direct)
        return self.build(**kwargs)


def _expand(
    build: Callable[..., Any],
    panel: str | None,
    omit: Iterable[str],
    replace: Mapping[str, Any],
    out: list[inspect.Parameter],
) -> _Plan:
    """Append to ``out`` the options of ``build`` (groups expanded); the plan that builds it."""
    plan = _Plan(build, [], {}, [])
    for p in _parameters(build):
        group = GROUPS.get(p.annotation) if isinstance(p.annotation, type) else None
        if group is not None:
            plan.nested[p.name] = _expand(group.build, group.panel, omit, replace, out)
            continue
        if p.name in omit:
            if p.default is p.empty:
                raise TypeError(f"{p.name} has no default: it cannot be omitted")
            plan.omitted.append(p.name)
            continue
        if any(q.name == p.name for q in out):
            raise TypeError(f"two options are named {p.name}")
        ann = _in_panel(replace.get(p.name, p.annotation), panel)
        out.append(p.replace(kind=KW, annotation=ann))
        plan.direct.append(p.name)
    return plan


def command(
    fn: Callable[..., None] | None = None,
    *,
    omit: Iterable[str] = (),
    replace: Mapping[str, Any] | None = None,
) -> Any:
    """Decorate a command: every parameter whose type is an option group becomes the group's
    options; the body runs under :func:`~searchveil.cli._common.run`. ``omit``: options of
    the groups this command does not take (the built object gets their defaults);
    ``replace``: an option's annotation for this command (its own help)."""

    def decorate(f: Callable[..., None]) -> Callable[..., None]:
        params: list[inspect.Parameter] = []
        plan = _expand(f, None, set(omit), replace or {}, params)
        unknown = (set(omit) | set(replace or {})) - plan.options()
        if unknown:
            raise TypeError(f"{f.__name__}: no such options to omit or replace: {unknown}")

        @functools.wraps(f)
        def wrapper(**values: Any) -> None:
            run(lambda: plan.make(values))

        del wrapper.__wrapped__  # typer must read the expanded signature, not f's
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate if fn is None else decorate(fn)


# -- the groups of several command modules ------------------------------------------------------

register_group(ReaderOptions, build=build_reader_options, panel="Reading the input")


@option_group()
@dataclass(frozen=True)
class Output:
    """Where a release is written (``--out``, ``--output-format``, ``--overwrite``, the private
    ``--provenance`` record), the ``--budget`` it is charged to and its ``--seed``."""

    out: OutDirOpt
    output_format: OutFmtOpt = "tsv"
    overwrite: OverwriteOpt = False
    provenance: ProvenanceOpt = None
    budget: BudgetOpt = None
    seed: SeedOpt = None

    def check(self, inputs: InputPaths = ()) -> None:
        """Refuse the destination before anything is read (:func:`check_release_dir`), and an
        input that does not exist (before ``--budget`` charges: a typo costs no budget)."""
        inputs = list(inputs)
        for name, path in inputs:
            if path is not None and not os.path.exists(path):
                raise InputFormatError(
                    str(path), f"no such file or directory (--{name}): nothing was read or charged"
                )
        check_release_dir(
            self.out,
            fmt=self.output_format,
            overwrite=self.overwrite,
            provenance=self.provenance,
            inputs=inputs,
        )

    def rng(self) -> RandomSource:
        return make_rng(self.seed)

    def charged(self, cost: PrivacyCost | NoGuarantee, what: str) -> AbstractContextManager[Charge]:
        """:func:`~searchveil.cli._common.charged` to ``--budget``, for the release at
        ``--out``."""
        return charged(self.budget, cost, what, self.out)

    def budget_result(self, ch: Charge) -> dict[str, Any] | None:
        return budget_result(self.budget, ch)

    @property
    def provenance_path(self) -> Path:
        """Where the private provenance record goes."""
        return provenance_path(self.out, self.provenance)
