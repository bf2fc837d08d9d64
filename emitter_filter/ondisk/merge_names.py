"""Which methods of several programs `merge` writes, and under which names.

Every exporter adds constant methods to `forward` (`export_llama`: `get_max_seq_len`,
`use_kv_cache`, ...; optimum-executorch: `get_dtype`, `get_bos_id`, ...), so the
programs a user merges share most of their method names, and most of those
methods are equal. `choose_methods` decides, from the flags (FILE read by
`data_files.input_of`: the path as given, a unique tail of it, or `#N`):

- `--method NEW=FILE:METHOD`: METHOD of FILE is NEW.
- `--prefix PREFIX=FILE`: every method of FILE that is not kept once is PREFIX +
  its name (PREFIX as given: no separator is added; `ft_` gives `ft_forward`).
- `--drop FILE:METHOD`: METHOD of FILE is not written.

Rules, in order:

1. A method's training methods (`__et_training_*_M`, which the runtime finds by M's
   name) follow it: renamed, prefixed and dropped with it.
2. Methods of several inputs that end with one name and are the same method
   (`same_method`: equal plans once data and delegate indices are read as the
   bytes they point at) are one: written from the first input, the others
   recorded as `same_in`.
3. Refused in one line (`MethodSetError`): a FILE that names no input or several,
   a METHOD that FILE does not have, a method named twice (by `--method`,
   `--prefix`, `--drop`, or two of them), a name a flag gives that another
   method keeps (another method of the same input, or a different method of
   another input).
4. Names that differing methods share, no flag having asked for them: every one
   at once (`MethodClashes`), answered with the flags that resolve them all
   (`resolving_flags`): `--drop` of a later input's constant method (the first
   input's value is kept: a runner reads one), `--method NAME_TAG=FILE:NAME` of any
   other method.

`choose_names` applies the rules to the programs read (`same_method` and
`is_constant_method` of `same_method`), and ends the message of a clash with the
command that resolves it, checked to resolve it; `choose_methods` applies them to
names alone. The flags' own spelling, and the training methods, are `method_names`'.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from emitter_filter.errors import InvariantError, MethodSetError
from emitter_filter.ondisk.method_names import (
    followed_name,
    parse_drop,
    parse_method,
    plan_names,
    training_owner,
)
from emitter_filter.ondisk.read.data_files import input_of, unique_tails
from emitter_filter.ondisk.read.read_pte import PteProgram
from emitter_filter.ondisk.same_method import is_constant_method, same_method, spans_open

__all__ = [
    "Choice",
    "Clash",
    "MethodClashes",
    "choose_methods",
    "choose_names",
    "resolving_flags",
]

# --- choosing -----------------------------------------------------------------------


@dataclass
class Choice:
    """Each input's methods in the output.

    Attributes:
        names: Per input, per plan, its name in the output, or None where it is not
            written (dropped, or the same as a method written from another input).
        same_as: (input, plan) of a method not written because it is the same as the
            one written from (input, plan).
        originals: Per input, its methods' names in its file, in plan order.
    """

    names: list[list[str | None]]
    same_as: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    originals: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True)
class Clash:
    """A name that differing methods of several inputs have, no flag asking for it.

    Attributes:
        name: The name.
        methods: (input, plan) of each, in input order; the first is written under it.
        constant: Whether each is a constant method (`is_constant_method`).
        equals: For each method after the first, the position in `methods` of an
            earlier one it equals (and so takes the name of), or None.
    """

    name: str
    methods: tuple[tuple[int, int], ...]
    constant: tuple[bool, ...]
    equals: tuple[int | None, ...]


class MethodClashes(MethodSetError):
    """Names that differing methods share: `clashes`, every one."""

    def __init__(self, clashes: Sequence[Clash], message: str) -> None:
        super().__init__(message)
        self.clashes = tuple(clashes)


def choose_names(
    inputs: Sequence[str],
    reads: Sequence[PteProgram],
    renames: Sequence[tuple[str, str, str]],
    prefixes: Sequence[tuple[str, str]],
    drops: Sequence[tuple[str, str]],
    command: Callable[[list[str]], str],
) -> Choice:
    """`choose_methods` over the programs read; where names clash, the message ends with
    `command` of the flags that resolve every clash (checked to resolve them)."""
    originals = [plan_names(read) for read in reads]
    with spans_open() as spans:

        def same(a, b):
            return same_method(reads[a[0]], a[1], reads[b[0]], b[1], spans)

        def choose(more_renames=(), more_drops=()):
            return choose_methods(
                inputs,
                originals,
                renames=[*renames, *more_renames],
                prefixes=prefixes,
                drops=[*drops, *more_drops],
                same=same,
                constant=lambda m: is_constant_method(reads[m[0]], m[1]),
            )

        try:
            return choose()
        except MethodClashes as clashes:
            given = [new for new, _, _ in renames] + [
                prefix + name
                for prefix, path in prefixes
                for name in originals[input_of(path, inputs)]
            ]
            flags = resolving_flags(inputs, originals, clashes.clashes, given)
            pairs = list(zip(flags[::2], flags[1::2], strict=True))
            try:
                choose(
                    [parse_method(v) for f, v in pairs if f == "--method"],
                    [parse_drop(v) for f, v in pairs if f == "--drop"],
                )
            except MethodSetError as error:
                raise InvariantError(
                    f"merge: the flags offered do not resolve the clash: {error}"
                ) from error
            ways = (
                ["keep the first input's value of each constant method"]
                if "--drop" in flags
                else []
            )
            ways += ["name the other methods apart"] if "--method" in flags else []
            raise MethodClashes(
                clashes.clashes, f"{clashes}; to {' and '.join(ways)}: {command(flags)}"
            ) from None


@dataclass
class _Flags:
    renames: dict[tuple[int, str], tuple[str, str]]
    prefixes: dict[int, tuple[str, str]]
    drops: dict[tuple[int, str], str]


def _resolve_flags(inputs, originals, renames, prefixes, drops) -> _Flags:
    """Each flag's input and method, checked: refuses what is not there and what is
    named twice."""
    flags = _Flags({}, {}, {})
    named: dict[tuple[int, str], str] = {}

    def claim(index: int, method: str, spelled: str) -> None:
        if method not in originals[index]:
            raise MethodSetError(
                f"{spelled}: {inputs[index]} has no method {method!r} "
                f"(it has {', '.join(originals[index])})"
            )
        if (index, method) in named:
            raise MethodSetError(
                f"method {method!r} of {inputs[index]} is named twice: "
                f"by {named[index, method]} and {spelled}"
            )
        named[index, method] = spelled

    for new, path, method in renames:
        spelled = f"--method {new}={path}:{method}"
        index = input_of(path, inputs)
        claim(index, method, spelled)
        flags.renames[index, method] = (new, spelled)
    for path, method in drops:
        spelled = f"--drop {path}:{method}"
        index = input_of(path, inputs)
        claim(index, method, spelled)
        flags.drops[index, method] = spelled
    for prefix, path in prefixes:
        spelled = f"--prefix {prefix}={path}"
        index = input_of(path, inputs)
        if index in flags.prefixes:
            raise MethodSetError(
                f"{inputs[index]} is named twice: by {flags.prefixes[index][1]} and {spelled}"
            )
        renamed = [s for (i, _), s in named.items() if i == index and s.startswith("--method")]
        if renamed:
            raise MethodSetError(
                f"a method of {inputs[index]} is named twice: by {spelled} and {renamed[0]}"
            )
        flags.prefixes[index] = (prefix, spelled)
    return flags


def choose_methods(
    inputs: Sequence[str],
    originals: Sequence[Sequence[str]],
    *,
    renames: Sequence[tuple[str, str, str]] = (),
    prefixes: Sequence[tuple[str, str]] = (),
    drops: Sequence[tuple[str, str]] = (),
    same: Callable[[tuple[int, int], tuple[int, int]], bool],
    constant: Callable[[tuple[int, int]], bool] = lambda method: False,
) -> Choice:
    """Each input's methods' names in the output, by the rules of the module docstring.

    Args:
        inputs: The inputs' paths, as given.
        originals: Each input's methods' names, in plan order.
        renames, prefixes, drops: The flags, parsed (`parse_method`, `parse_prefix`,
            `parse_drop`).
        same: Whether two methods, (input, plan) each, are one (`same_method`).
        constant: Whether a method is a constant method (`is_constant_method`).

    Raises:
        MethodClashes: Differing methods share a name no flag gave them (every one).
        MethodSetError: Anything else refused (rule 3), the first found.
    """
    flags = _resolve_flags(inputs, originals, renames, prefixes, drops)
    choice = Choice([[None] * len(m) for m in originals], originals=[list(m) for m in originals])
    # Under each name, the differing methods written or clashing, and who asked for it.
    under: dict[str, list[tuple[tuple[int, int], str | None]]] = {}
    clashes: dict[str, list] = {}
    for index, methods in enumerate(originals):
        owners = {m: training_owner(m, methods) for m in methods}
        prefix = flags.prefixes.get(index)
        for position, method in enumerate(methods):
            owner = owners[method]
            if (
                owner is not None
                and (index, method) not in flags.renames
                and (index, method) not in flags.drops
            ):
                continue  # named with its method, below
            _place(choice, flags, under, clashes, inputs, index, position, method, prefix, same)
            new = choice.names[index][position]
            for follower, its_owner in owners.items():
                if (
                    its_owner != method
                    or (index, follower) in flags.renames
                    or (index, follower) in flags.drops
                ):
                    continue
                at = methods.index(follower)
                if new is None and (index, position) not in choice.same_as:
                    continue
                if new is None:
                    # The same method as another input's: its training methods are that one's.
                    kept = choice.same_as[index, position]
                    kept_name = choice.names[kept[0]][kept[1]]
                    if kept_name is None:  # `same_as` points at a method that is kept
                        raise InvariantError(f"merge: {method!r} is the same as a dropped method")
                    name = followed_name(follower, method, kept_name)
                else:
                    name = followed_name(follower, method, new)
                asked = flags.renames.get((index, method), (None, None))[1] or (
                    prefix[1] if prefix and new != method else None
                )
                _claim_name(choice, under, clashes, inputs, index, at, name, asked, same)
    if clashes:
        found = [
            Clash(
                name,
                tuple(m for m, _ in under[name]),
                tuple(constant(m) for m, _ in under[name]),
                tuple(equals),
            )
            for name, equals in clashes.items()
        ]
        raise MethodClashes(found, _clash_message(inputs, originals, found))
    return choice


def _place(choice, flags, under, clashes, inputs, index, position, method, prefix, same):
    """Names one method (not a training method that follows its method)."""
    if (index, method) in flags.drops:
        return
    if (index, method) in flags.renames:
        new, asked = flags.renames[index, method]
        _claim_name(choice, under, clashes, inputs, index, position, new, asked, same)
        return
    if prefix is not None:
        # Kept once where another input writes the same method under its name.
        for other, _ in under.get(method, ()):
            if other[0] != index and same(other, (index, position)):
                choice.same_as[index, position] = other
                return
        _claim_name(
            choice, under, clashes, inputs, index, position, prefix[0] + method, prefix[1], same
        )
        return
    _claim_name(choice, under, clashes, inputs, index, position, method, None, same)


def _claim_name(choice, under, clashes, inputs, index, position, name, asked, same) -> None:
    """Gives (index, position) `name`, or records it as the same as a method that has it
    (kept once), or refuses it (`asked` by a flag), or records a clash."""
    here = (index, position)
    holders = under.setdefault(name, [])
    for number, (other, _) in enumerate(holders):
        if other[0] != index and same(other, here):
            if number == 0:
                choice.same_as[here] = other
                return
            # The same as a method that clashes: it clashes as that one does.
            holders.append((here, asked))
            clashes[name].append(number)
            return
    if holders:
        first, first_asked = holders[0]
        if first[0] == index:
            raise MethodSetError(
                f"{asked or first_asked}: {inputs[index]} has a method {name!r} already"
            )
        if asked and first_asked:
            raise MethodSetError(
                f"the name {name!r} is given twice, to methods that differ: by {first_asked} "
                f"and {asked}"
            )
        if asked:
            raise MethodSetError(f"{asked}: {inputs[first[0]]} has a different method {name!r}")
        if first_asked:
            raise MethodSetError(f"{first_asked}: {inputs[index]} has a different method {name!r}")
        holders.append((here, asked))
        clashes.setdefault(name, []).append(None)
        return
    holders.append((here, asked))
    choice.names[index][position] = name


# --- the message -------------------------------------------------------------------


def _tag(path: str, tails: Mapping[str, str]) -> str:
    """The input's name in a method's: its stem (`decode.pte`: `decode`), or where inputs
    share a base name, the folders that tell it apart (`ft/model.pte`: `ft`)."""
    tail = tails[path].split(os.sep)
    words = tail[:-1] if len(tail) > 1 else [os.path.splitext(tail[0])[0]]
    return re.sub(r"[^A-Za-z0-9_]+", "_", "_".join(words)).strip("_") or "input"


def resolving_flags(
    inputs: Sequence[str],
    originals: Sequence[Sequence[str]],
    clashes: Sequence[Clash],
    taken: Iterable[str] = (),
) -> list[str]:
    """The flags that resolve every clash: the later inputs' constant methods dropped
    (the first's value is kept), their other methods renamed NAME_TAG (TAG: the
    shortest tail of the input's path that no other input has, as a name; never a
    name of `taken`, the names flags give already); methods equal to one renamed get
    its name, and are then kept once."""
    tails = dict(zip(inputs, unique_tails(inputs), strict=True))
    taken = {*taken, *(name for methods in originals for name in methods)}
    flags: dict[tuple[int, str], tuple[str, str]] = {}
    for clash in clashes:
        given: list[str | None] = [clash.name]
        for (index, position), is_constant, equal in zip(
            clash.methods[1:], clash.constant[1:], clash.equals, strict=True
        ):
            path, method = inputs[index], originals[index][position]
            # A training method is renamed with its method: the fix renames that.
            method = training_owner(method, originals[index]) or method
            if (index, method) in flags:
                given.append(flags[index, method][1].partition("=")[0] or None)
                continue
            if is_constant:
                flags[index, method] = ("--drop", f"{path}:{method}")
                given.append(None)
                continue
            if equal is not None and given[equal] is not None:
                new = given[equal]
            else:
                new, number = f"{method}_{_tag(path, tails)}", 2
                while new in taken:
                    new, number = f"{method}_{_tag(path, tails)}_{number}", number + 1
                taken.add(new)
            given.append(new)
            flags[index, method] = ("--method", f"{new}={path}:{method}")
    return [word for flag in flags.values() for word in flag]


def _clash_message(
    inputs: Sequence[str], originals: Sequence[Sequence[str]], clashes: Sequence[Clash]
) -> str:
    listed = "; ".join(
        f"{clash.name!r} in {', '.join(dict.fromkeys(inputs[i] for i, _ in clash.methods))}"
        for clash in clashes
    )
    count = len(clashes)
    return (
        f"{count} method name{'s' if count != 1 else ''} with different methods "
        f"behind {'them' if count != 1 else 'it'}: {listed}"
    )
