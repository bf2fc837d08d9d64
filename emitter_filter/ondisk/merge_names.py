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
   at once (`MethodClashes`), for the caller to answer with the flags that resolve
   them all (`resolving_flags`): `--drop` of a later input's constant method (the
   first input's value is kept: a runner reads one), `--method NAME_TAG=FILE:NAME`
   of any other method.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter.errors import InvariantError, MethodSetError
from emitter_filter.ondisk.read.byte_source import ByteSource, StoredSpan
from emitter_filter.ondisk.read.data_files import input_of, unique_tails
from emitter_filter.ondisk.read.read_pte import PteProgram
from emitter_filter.program.generated_fields import table_text

__all__ = [
    "Choice",
    "Clash",
    "MethodClashes",
    "TRAINING_PREFIX",
    "choose_methods",
    "parse_drop",
    "is_constant_method",
    "check_new_name",
    "parse_method",
    "parse_prefix",
    "plan_names",
    "resolving_flags",
    "same_method",
    "spans_open",
]

# ExecuTorch's training export adds, per method M, methods named `__et_training_*_M`
# (`gradients_index`, `parameters_index`, `fqn`) that the runtime's TrainingModule
# finds by M's name.
TRAINING_PREFIX = "__et_training_"


def parse_method(spec: str) -> tuple[str, str, str]:
    """`NEW=FILE:METHOD` as (new name, file, method); a `MethodSetError` if malformed."""
    new, equals, source = spec.partition("=")
    path, colon, method = source.rpartition(":")
    if not (equals and colon and new and path and method):
        raise MethodSetError(
            f"--method {spec!r}: expected NEW=FILE:METHOD, e.g. decode=decode.pte:forward"
        )
    try:
        new.encode("utf-8")  # a flatbuffer string; bytes that are not text came from argv
    except UnicodeEncodeError:
        raise MethodSetError(f"--method {spec!r}: the name {new!r} is not UTF-8 text") from None
    check_new_name(f"--method {spec!r}", new)
    return new, path, method


def check_new_name(flag: str, name: str) -> None:
    """Refuses a name no method of ExecuTorch's should be given: one with a control
    character (a newline, from a script's quoting), or a training method's prefix, which
    the runtime's TrainingModule reads as another method's gradients or parameters."""
    control = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        raise MethodSetError(f"{flag}: the name {name!r} has a control character {control!r}")
    if name.startswith(TRAINING_PREFIX):
        raise MethodSetError(
            f"{flag}: the name {name!r} starts with {TRAINING_PREFIX!r}, which ExecuTorch's "
            "training methods have (they follow their method's name on their own)"
        )


def parse_prefix(spec: str) -> tuple[str, str]:
    """`PREFIX=FILE` as (prefix, file)."""
    prefix, equals, path = spec.partition("=")
    if not (equals and prefix and path):
        raise MethodSetError(f"--prefix {spec!r}: expected PREFIX=FILE, e.g. ft_=ft/model.pte")
    check_new_name(f"--prefix {spec!r}", prefix)
    return prefix, path


def parse_drop(spec: str) -> tuple[str, str]:
    """`FILE:METHOD` as (file, method)."""
    path, colon, method = spec.rpartition(":")
    if not (colon and path and method):
        raise MethodSetError(
            f"--drop {spec!r}: expected FILE:METHOD, e.g. decode.pte:enable_dynamic_shape"
        )
    return path, method


def plan_names(read: PteProgram) -> list[str]:
    return [table_text(plan.name) or "" for plan in read.program.executionPlan or ()]


def _owner(name: str, methods: Sequence[str]) -> str | None:
    """The method a training method follows (the longest name it ends with), if any."""
    if not name.startswith(TRAINING_PREFIX):
        return None
    owners = [m for m in methods if not m.startswith(TRAINING_PREFIX) and name.endswith("_" + m)]
    return max(owners, key=len, default=None)


def _followed(name: str, owner: str, new: str) -> str:
    return name[: -len(owner)] + new


# --- what a method is --------------------------------------------------------------


def _same_tensor(a, b) -> bool:
    """Two Tensor tables alike but for where their data is (compared as bytes after)."""
    return all(getattr(a, f) == getattr(b, f) for f in a._attributes if f != "dataBufferIdx")


class _Spans:
    """Open sources of the files compared, by path, opened once."""

    def __init__(self) -> None:
        self.sources: dict[str, ByteSource] = {}

    def span(self, file: str, offset: int, nbytes: int) -> StoredSpan:
        if file not in self.sources:
            self.sources[file] = ByteSource(file)
        return StoredSpan(self.sources[file], offset, nbytes)

    def close(self) -> None:
        for source in self.sources.values():
            source.close()


@contextlib.contextmanager
def spans_open():
    """The files `same_method` compares, each opened once, closed on leaving."""
    spans = _Spans()
    try:
        yield spans
    finally:
        spans.close()


def _same_bytes(spans: _Spans, a: tuple[str, int, int], b: tuple[str, int, int]) -> bool:
    if a[2] != b[2]:
        return False
    return a[2] == 0 or bool(spans.span(*a).same_bytes(spans.span(*b)))


def _delegate_blob(read: PteProgram, delegate) -> tuple[tuple[str, int, int], frozenset | None]:
    """Where a plan's delegate reads its blob, and the named-data keys the blob uses."""
    location = "inline" if delegate.processed.location == DataLocation.INLINE else "segment"
    for blob in read.pte.delegates:
        if blob.location == location and blob.index == delegate.processed.index:
            return (read.pte.path, blob.offset, blob.nbytes), blob.named_keys
    raise MethodSetError(
        f"{read.pte.path}: a delegate's blob {delegate.processed.index} is not in the file"
    )


def _named(read: PteProgram) -> dict[str, tuple[str, int, int]]:
    return {e.key: (e.file, e.offset, e.nbytes) for e in read.pte.named_data}


def same_method(a: PteProgram, i: int, b: PteProgram, j: int, spans: _Spans) -> bool:
    """Whether plan `i` of `a` and plan `j` of `b` are one method: equal plans (names
    aside) once each data index and delegate is read as the bytes it points at, and
    the named data their delegates use equal. Bytes are compared only where
    everything else is equal, a chunk at a time, and only up to the first difference."""
    pa, pb = a.program.executionPlan[i], b.program.executionPlan[j]
    refs_a, refs_b = a.pte.plans[i], b.pte.plans[j]
    for attribute in pa._attributes:
        if attribute not in ("name", "values", "delegates") and (
            getattr(pa, attribute) != getattr(pb, attribute)
        ):
            return False
    values_a, values_b = pa.values or [], pb.values or []
    if len(values_a) != len(values_b) or set(refs_a.data_refs) != set(refs_b.data_refs):
        return False
    data = []
    for number, (va, vb) in enumerate(zip(values_a, values_b, strict=True)):
        if number not in refs_a.data_refs:
            if va != vb:
                return False
            continue
        ra, rb = refs_a.data_refs[number], refs_b.data_refs[number]
        if va.valType != vb.valType or ra.space != rb.space or not _same_tensor(va.val, vb.val):
            return False
        ea, eb = a.pte.entries[ra.space][ra.index], b.pte.entries[rb.space][rb.index]
        data.append(((ea.file, ea.offset, ea.nbytes), (eb.file, eb.offset, eb.nbytes)))
    delegates_a, delegates_b = pa.delegates or [], pb.delegates or []
    if len(delegates_a) != len(delegates_b):
        return False
    keys_a: set[str] = set()
    keys_b: set[str] = set()
    for da, db in zip(delegates_a, delegates_b, strict=True):
        if (da.id, da.compileSpecs, da.processed.location) != (
            db.id,
            db.compileSpecs,
            db.processed.location,
        ):
            return False
        (blob_a, used_a), (blob_b, used_b) = _delegate_blob(a, da), _delegate_blob(b, db)
        data.append((blob_a, blob_b))
        # A blob whose keys are unknown (an opaque backend) may read any key.
        keys_a |= set(_named(a)) if used_a is None else used_a
        keys_b |= set(_named(b)) if used_b is None else used_b
    if keys_a != keys_b:
        return False
    named_a, named_b = _named(a), _named(b)
    if any((key in named_a) != (key in named_b) for key in keys_a):
        return False
    data += [(named_a[key], named_b[key]) for key in sorted(keys_a) if key in named_a]
    if any(x[2] != y[2] for x, y in data):
        return False
    return all(_same_bytes(spans, x, y) for x, y in data)


def is_constant_method(read: PteProgram, position: int) -> bool:
    """A method that runs no instruction: it returns values stored in its plan
    (ExecuTorch's `constant_methods`: `get_max_seq_len`, `use_kv_cache`, ...)."""
    plan = read.program.executionPlan[position]
    return not plan.delegates and all(not chain.instructions for chain in plan.chains or ())


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
        owners = {m: _owner(m, methods) for m in methods}
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
                    name = _followed(follower, method, kept_name)
                else:
                    name = _followed(follower, method, new)
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
            method = _owner(method, originals[index]) or method
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
