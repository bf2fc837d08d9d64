"""The hook into `to_executorch`: prune the emitter output just before it is serialized.

`install()` wraps `serialize_for_executorch` where `ExecutorchProgramManager`
looks it up (see `_upstream`). The wrapper prunes the constants
(`emitted.prune_emitter_output`) and the delegates' named data
(`named_data.prune_named_data`), but only when asked to: by
`config.prune_constants`, by an enclosing `pruning()` block in the same thread or
context, or process-wide by `enable()` (what `EMITTER_FILTER_PRUNE=1` calls).
Otherwise it calls the original with the same arguments and changes nothing.
Independently, `config.dedupe_constants`, `pruning(dedupe_constants=True)` or
`enable_dedupe()` (what `EMITTER_FILTER_DEDUPE=1` calls) pass the `.pte` bytes the
original returns through `dedupe.dedupe_pte`, after pruning when both are on.

It also wraps `emit_program`, which `ExecutorchProgramManager` calls just before,
only to hand the serializer wrapper the `ExportedProgram`s it emitted (held in
a per-thread slot until that call takes it): their graph signatures name the
constants for `keep_constants` and the report.

Every prune that changes the program is proven (`prune_proof`: each plan reads, after it,
the same instructions, values and bytes as before, paired index by index with a journal of
what it assigned), and every dedupe (of the bytes: `moved_proof.moved_only`, else
`proof.prove_rewrite`).

Fail-safe, the same for every mode (`fail_safe`): when the analysis finds the emitted
program inconsistent (`ProgramFormatError`: an index that points nowhere, which
ExecuTorch's own serializer does not check), nothing has been modified yet; when
the proof refuses a prune (`InvalidOutputError`), it is undone; the
program is written as ExecuTorch writes it (or, when only the dedupe fails,
as the prune left it), with one WARNING naming the modes skipped, and its
report says why (`skipped`, `dedupe_skipped`). Strict mode (`prune_strict=True`,
or `EMITTER_FILTER_STRICT=1`) raises instead. An `InvariantError` (a bug of
ours) always raises.

Installing is idempotent, thread-safe and reversible with `uninstall()`.

Observers (`add_observer`) see every program the installed hook serializes,
pruned or not, after ExecuTorch has serialized it: the pytest plugin audits them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from emitter_filter import _upstream
from emitter_filter.inprocess.fail_safe import fail_safe, skipped_report
from emitter_filter.program.reachability import keep_patterns

if TYPE_CHECKING:
    from executorch.exir._serialize._cord import Cord
    from executorch.exir.emit import EmitterOutput

    from emitter_filter.inprocess.reports import PruneReport

__all__ = [
    "install",
    "uninstall",
    "installed",
    "pruning",
    "enable",
    "disable",
    "is_enabled",
    "SerializedProgram",
    "add_observer",
    "remove_observer",
    "enable_dedupe",
    "disable_dedupe",
]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_original = None
_original_emit = None
_process_wide = False
# The keep_constants patterns `enable()` was given, for every program.
_process_keep: tuple[str, ...] = ()
_pruning_depth: contextvars.ContextVar[int] = contextvars.ContextVar(
    "emitter_filter_pruning_depth", default=0
)
# The keep_constants patterns of every enclosing pruning() block.
_pruning_keep: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "emitter_filter_pruning_keep", default=()
)
# (emitter output, its methods) from the last emit_program of this thread.
_emitted = threading.local()
_dedupe_process_wide = False
_dedupe_depth: contextvars.ContextVar[int] = contextvars.ContextVar(
    "emitter_filter_dedupe_depth", default=0
)


def _pruning_requested(config) -> bool:
    return bool(getattr(config, "prune_constants", False)) or is_enabled()


def _keep_constants(config) -> tuple[str, ...]:
    return (*(getattr(config, "keep_constants", ()) or ()), *_pruning_keep.get(), *_process_keep)


def _emit_program(original, methods, *args, **kwargs):
    emitter_output = original(methods, *args, **kwargs)
    _emitted.last = (emitter_output, methods)
    return emitter_output


def _take_emitted_methods(emitter_output) -> dict | None:
    """The methods `emitter_output` was emitted from, if this thread's last emit made it."""
    last = getattr(_emitted, "last", None)
    _emitted.last = None
    if last is None or last[0] is not emitter_output:
        return None
    methods = last[1]
    return dict(methods) if isinstance(methods, dict) else {"forward": methods}


def _prune(emitter_output, config, named_data_store, methods, dedupe: bool):
    """Prunes in place, proves it (`prune_proof`) and records the report; returns the named
    data to serialize and it.

    Both analyses run before anything is modified, so that a `ProgramFormatError`
    can still leave the program to be written as it came (see the module docstring);
    a prune the proof refuses is undone, and written as it came too. Then `dedupe`,
    if asked for too, is skipped with it, in the same warning.
    """
    from emitter_filter.errors import InvalidOutputError, ProgramFormatError
    from emitter_filter.inprocess.named_data import find_named_data_use, prune_named_data
    from emitter_filter.inprocess.prune_emitted import prune_emitter_output
    from emitter_filter.inprocess.prune_proof import PruneProof
    from emitter_filter.inprocess.reports import _record_report
    from emitter_filter.program.state_names import PlaceholderNames

    started = time.perf_counter()
    names = None if methods is None else PlaceholderNames(methods)
    blobs: dict = {}
    proof = None
    try:
        named_data_use = find_named_data_use(emitter_output.program, named_data_store, blobs)
        proof = PruneProof(emitter_output, named_data_store, blobs)
        prune_report = prune_emitter_output(
            emitter_output,
            keep_constants=_keep_constants(config),
            names=names,
            before_change=proof.take,
        )
        # After the constants, so that the duplicates reported are the bytes written.
        pruned_store, named_data_report = prune_named_data(
            emitter_output, named_data_store, use=named_data_use
        )
        proof.check(pruned_store)
    except (ProgramFormatError, InvalidOutputError) as error:
        if proof is not None and isinstance(error, ProgramFormatError):
            proof.undo()
        modes = "pruning nor deduplicating" if dedupe else "pruning"
        fail_safe(config, error, modes, "as ExecuTorch writes it")
        skipped = skipped_report(emitter_output, str(error), started, dedupe)
        _record_report(emitter_output, skipped)
        return named_data_store, skipped
    prune_report = dataclasses.replace(
        prune_report,
        named_data=named_data_report,
        seconds=time.perf_counter() - started,
    )
    _record_report(emitter_output, prune_report)
    # Passed as an object: the summary (its names, its duplicate search) is only built if logged.
    logger.info("emitter_filter: %s", prune_report)
    return pruned_store, prune_report


def _dedupe_requested(config) -> bool:
    return (
        bool(getattr(config, "dedupe_constants", False))
        or _dedupe_process_wide
        or _dedupe_depth.get() > 0
    )


def _serialize_for_executorch(
    original, emitter_output, config, data_serializer, named_data_store=None
):
    methods = _take_emitted_methods(emitter_output)
    prune_report = None
    dedupe = _dedupe_requested(config)
    if _pruning_requested(config):
        named_data_store, prune_report = _prune(
            emitter_output, config, named_data_store, methods, dedupe
        )
        # A program the prune could not prove consistent is not deduplicated either.
        dedupe = dedupe and prune_report.skipped is None
    serialize_started = time.perf_counter()
    serialized = original(emitter_output, config, data_serializer, named_data_store)
    serialize_seconds = time.perf_counter() - serialize_started
    if dedupe:
        serialized = _dedupe_serialized(emitter_output, serialized, config, prune_report)
    _notify_observers(emitter_output, serialized, prune_report, serialize_seconds, methods)
    return serialized


def _dedupe_serialized(emitter_output, serialized, config, prune_report):
    """Deduplicates the serialized `.pte` (`.ptd` files are left alone) and records the report.

    A `ProgramFormatError` from reading the file (an upstream quirk the prune did
    not meet, or no prune) leaves the `.pte` as serialized, under the fail-safe.
    """
    from emitter_filter.errors import InvalidOutputError, ProgramFormatError
    from emitter_filter.inprocess.reports import _record_dedupe_report, _record_dedupe_skipped

    started = time.perf_counter()
    pte, ptd_files = serialized
    try:
        deduplicated, dedupe_report = _dedupe_cord(pte, getattr(config, "segment_alignment", None))
    except (ProgramFormatError, InvalidOutputError) as error:
        written = "as ExecuTorch writes it" if prune_report is None else "pruned only"
        fail_safe(config, error, "deduplicating", written)
        _record_dedupe_skipped(emitter_output, str(error))
        return serialized
    dedupe_report = dataclasses.replace(dedupe_report, seconds=time.perf_counter() - started)
    _record_dedupe_report(emitter_output, dedupe_report)
    logger.info("emitter_filter: %s", dedupe_report)
    return deduplicated, ptd_files


def _dedupe_cord(pte, alignment):
    """`dedupe_pieces` of the serializer's `Cord`, and the `Cord` to write (`pte` itself when
    nothing is shared).

    On the Cord's own buffers: no join, no copy of any weight. A `FileBackedData`
    buffer stays on disk: it is read through its file only where the transform
    reads (a prefix, a chunked compare), and goes into the new Cord as itself.
    """
    from emitter_filter.ondisk.dedupe import dedupe_pieces, dedupe_pte
    from emitter_filter.ondisk.read.byte_source import ByteSource, Compared, Piece
    from emitter_filter.ondisk.read.read_pte import read_pte_program
    from emitter_filter.regular_files import open_regular_input

    buffers = _upstream.cord_pieces(pte)
    if buffers is None:
        whole = bytes(pte)
        deduplicated, report = dedupe_pte(whole, alignment)
        if report.shared:
            _prove_deduplicated([whole], [deduplicated])
        return (_upstream.cord(deduplicated) if report.shared else pte), report
    with contextlib.ExitStack() as opened:
        pieces, owners = [], {}
        for buffer in buffers:
            path = _upstream.file_backed_path(buffer)
            if path is None:
                pieces.append(buffer)
                continue
            fd = open_regular_input(path)
            opened.callback(os.close, fd)
            pieces.append(Piece(fd, 0, len(buffer)))
            owners[id(pieces[-1])] = buffer
        # What the dedupe reads and compares, the proof need not again (`Compared`).
        compared = Compared()
        serialized = opened.enter_context(ByteSource(list(pieces), compared=compared))
        read = read_pte_program(serialized)
        deduplicated, report = dedupe_pieces(pieces, alignment, compared, read=read)
        if not report.shared:
            return pte, report
        _prove_deduplicated(serialized, deduplicated, compared, read)
        return _upstream.cord_of(_cord_buffer(part, owners) for part in deduplicated), report


def _prove_deduplicated(before, after, compared=None, read=None) -> None:
    """The structural proof of the deduplicated `.pte` against the serialized one, both read
    where they lie (the serializer's buffers, the weights' files): each method reads the
    same bytes. `before` is a list of parts, or their `ByteSource` with `read`, its reading
    (the dedupe's). Two ranges of the same `bytes` objects the dedupe found equal by a
    memcmp (`compared`) are not compared again.

    The dedupe changes only numbers in the program, and the serializer's program was packed
    by a flatbuffers builder (no other field shares their bytes), so `moved_only` proves it
    from the ranges they place; where it cannot, `prove_rewrite` walks every method. An
    `InvalidOutputError` is a `ProgramFormatError`'s sibling: the caller's fail-safe writes
    the `.pte` as serialized. (A `ByteSource` of parts opens nothing: none is closed.)"""
    moved_proof, proof, byte_source, read_pte = _proof_modules()
    if not isinstance(before, byte_source.ByteSource):
        before = byte_source.ByteSource(list(before), "serialized", compared)
    new = byte_source.ByteSource(list(after), "deduplicated", compared)
    read = read_pte.read_pte_program(before) if read is None else read
    if not moved_proof.moved_only(read, before, new, proof.key_sizes(read, before)):
        proof.prove_rewrite([proof.Side(before, read=read)], proof.Side(new))


@functools.cache
def _proof_modules():
    """The proof's modules, imported on the first dedupe (they import `flatbuffers`), once."""
    from emitter_filter.ondisk.analyse import moved_proof, proof
    from emitter_filter.ondisk.read import byte_source, read_pte

    return moved_proof, proof, byte_source, read_pte


def _cord_buffer(part, owners: dict):
    """A part of the deduplicated file as a `Cord` buffer: bytes, or a file-backed buffer
    as itself. A part of one (never a whole blob: the transform cuts only the constant
    segment, which the serializer holds as bytes) is read here, that part alone."""
    from emitter_filter.ondisk.read.byte_source import Piece

    if not isinstance(part, Piece):
        return part
    if id(part) in owners:
        return owners[id(part)]
    return os.pread(part.fd, part.nbytes, part.offset)


def install() -> None:
    """Wraps ExecuTorch's `serialize_for_executorch`; a no-op when already installed.

    Raises:
        UnsupportedExecutorchError: executorch is not the supported version.
    """
    global _original, _original_emit
    module = _upstream.program_module()
    with _lock:
        if _original is not None:
            return
        original = module.serialize_for_executorch
        wrapper = functools.wraps(original)(functools.partial(_serialize_for_executorch, original))
        # A marker on the wrapper (how `_upstream` finds what it wrapped): not an
        # attribute functools.wraps' type knows of.
        wrapper.__emitter_filter_original__ = original  # type: ignore[attr-defined]
        original_emit = module.emit_program
        emit_wrapper = functools.wraps(original_emit)(
            functools.partial(_emit_program, original_emit)
        )
        emit_wrapper.__emitter_filter_original__ = original_emit  # type: ignore[attr-defined]
        module.serialize_for_executorch = wrapper
        module.emit_program = emit_wrapper
        _original, _original_emit = original, original_emit
    logger.debug("installed the emitter_filter hook")


def uninstall() -> None:
    """Restores ExecuTorch's own `serialize_for_executorch`; a no-op when not installed."""
    global _original, _original_emit
    with _lock:
        if _original is None:
            return
        module = _upstream.program_module()
        module.serialize_for_executorch = _original
        module.emit_program = _original_emit
        _original = _original_emit = None
    logger.debug("uninstalled the emitter_filter hook")


def installed() -> bool:
    """Whether the hook is in place."""
    return _original is not None


def enable(keep_constants: Sequence[str] = ()) -> None:
    """Prunes every program serialized from now on, in every thread.

    Args:
        keep_constants: `fnmatch` patterns of FQNs to keep although no instruction
            reads them, in every program (`emitter-filter run --keep`,
            `EMITTER_FILTER_KEEP`); they replace those of an earlier `enable`.
    """
    global _process_wide, _process_keep
    keep = keep_patterns(keep_constants)
    install()
    _process_wide, _process_keep = True, keep


def disable() -> None:
    """Stops what `enable()` started; `pruning()` blocks and configs still prune."""
    global _process_wide, _process_keep
    _process_wide, _process_keep = False, ()


def is_enabled() -> bool:
    """Whether programs serialized now, in this context, are pruned regardless of config."""
    return _process_wide or _pruning_depth.get() > 0


def enable_dedupe() -> None:
    """Deduplicates every program serialized from now on, in every thread (pruned or not)."""
    global _dedupe_process_wide
    install()
    _dedupe_process_wide = True


def disable_dedupe() -> None:
    """Stops what `enable_dedupe()` started."""
    global _dedupe_process_wide
    _dedupe_process_wide = False


@contextlib.contextmanager
def pruning(
    keep_constants: Sequence[str] = (), *, dedupe_constants: bool = False
) -> Iterator[None]:
    """Prunes every program serialized inside the block, in this thread or task.

    Args:
        keep_constants: `fnmatch` patterns of FQNs to keep although no
            instruction reads them (see `ExecutorchBackendConfig.keep_constants`);
            added to the config's and any enclosing block's.
        dedupe_constants: Also store named data that repeats a constant once
            (`ExecutorchBackendConfig.dedupe_constants`).

    Raises:
        TypeError: `keep_constants` is not a sequence of str.

    Example::

        with emitter_filter.pruning(keep_constants=["metadata.*"]):
            manager = edge.to_executorch()   # any config, any third-party code
    """
    keep_constants = keep_patterns(keep_constants)
    install()
    token = _pruning_depth.set(_pruning_depth.get() + 1)
    keep_token = _pruning_keep.set((*_pruning_keep.get(), *keep_constants))
    dedupe_token = _dedupe_depth.set(_dedupe_depth.get() + 1) if dedupe_constants else None
    try:
        yield
    finally:
        if dedupe_token is not None:
            _dedupe_depth.reset(dedupe_token)
        _pruning_keep.reset(keep_token)
        _pruning_depth.reset(token)


# --- Observers: see each serialized program, change nothing. --------------------


@dataclasses.dataclass(frozen=True)
class SerializedProgram:
    """One program the hook serialized, as an observer gets it.

    Attributes:
        emitter_output: ExecuTorch's `EmitterOutput`, after pruning if it was pruned.
            Not to be modified.
        pte: The `.pte` file, as ExecuTorch's `Cord` (`bytes(pte)` copies it).
        ptd: The `.ptd` files by the name `write_tensor_data_to_file` gives them
            (without the extension), as `Cord`s.
        prune_report: What pruning dropped; None when the program was not pruned.
        serialize_seconds: Wall time of ExecuTorch's own serializer.
        methods: The `ExportedProgram`s it was emitted from, by method name (what names
            its values: `state_names.PlaceholderNames`); None when not seen.
    """

    emitter_output: EmitterOutput
    pte: Cord
    ptd: dict[str, Cord]
    prune_report: PruneReport | None
    serialize_seconds: float
    methods: dict | None = None


_observers: tuple = ()


def add_observer(callback) -> None:
    """Calls `callback(SerializedProgram)` after each program is serialized; installs the hook.

    The callback runs in the serializing thread, before `to_executorch` returns;
    an exception it raises propagates out of `to_executorch`. Adding a callback
    twice calls it twice.
    """
    global _observers
    install()
    with _lock:
        _observers = (*_observers, callback)


def remove_observer(callback) -> None:
    """Stops calling `callback` (its last registration); the hook stays installed.

    Raises:
        ValueError: `callback` is not registered.
    """
    global _observers
    with _lock:
        if callback not in _observers:
            raise ValueError(f"{callback!r} is not an emitter_filter observer")
        index = len(_observers) - 1 - _observers[::-1].index(callback)
        _observers = _observers[:index] + _observers[index + 1 :]


def _notify_observers(
    emitter_output, serialized, prune_report, seconds: float, methods=None
) -> None:
    observers = _observers
    if not observers:
        return
    pte, ptd = serialized
    program = SerializedProgram(emitter_output, pte, ptd, prune_report, seconds, methods)
    for callback in observers:
        callback(program)
