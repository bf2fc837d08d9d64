"""Read an ExecuTorch native package (`.ptn`): every byte of its zip, and who reads each constant.

`executorch.exir.native.to_native(...).save(path)` (ExecuTorch 1.5.1,
exir/_serialize/_ptn.py `write_ptn`; keep in sync) writes a zip of stored (uncompressed)
entries: `program.ptg` (the native graph, an "NPTG" flatbuffer), `program.safetensors`
(the constants: an 8-byte little-endian header length, a JSON header of key to dtype,
shape and `data_offsets`, then the data) and, when identical immutable constants were
stored once, `aliases.json` (alias key to the key that holds the bytes). With `zipfile`,
`json` and the flatbuffer tables alone: the package is never loaded.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.read.ptn_schema import GRAPH_ARG, NATIVE_GRAPH, NATIVE_GRAPH_IDENTIFIER
from emitter_filter.program.flatbuffer_verifier import verify_flatbuffer
from emitter_filter.program.generated_fields import table_text

__all__ = [
    "PTG_ENTRY",
    "SAFETENSORS_ENTRY",
    "ALIASES_ENTRY",
    "PtnSpan",
    "PtnConstant",
    "PtnPackage",
    "is_ptn",
    "read_ptn",
]

PTG_ENTRY, SAFETENSORS_ENTRY, ALIASES_ENTRY = (
    "program.ptg",
    "program.safetensors",
    "aliases.json",
)
_ZIP_MAGIC = b"PK\x03\x04"
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # the zip's local file header, before its name


@dataclass(frozen=True)
class PtnSpan:
    """A run of the package's bytes: `name` (a constant's key, an entry's, or the zip's own
    structure), what it is (`storage`), where and how long."""

    name: str
    storage: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class PtnConstant:
    """One safetensors entry: its bytes in the package, and the methods that read its key
    or one of its aliases (`readers`; none: dead)."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    aliases: tuple[str, ...]
    readers: tuple[str, ...]
    mutated: bool


@dataclass(frozen=True)
class PtnPackage:
    """A `.ptn` as read: every byte in `spans` (in file order, summing to `size`), the
    constants, the methods, and the keys each method reads."""

    path: str
    size: int
    version: str
    methods: tuple[str, ...]
    spans: tuple[PtnSpan, ...]
    constants: tuple[PtnConstant, ...]
    aliases: dict[str, str]
    method_keys: dict[str, tuple[str, ...]]


def is_ptn(path: str | os.PathLike) -> bool:
    """Whether `path` is a zip holding `program.ptg` (a `.ptn` package, whatever its name)."""
    try:
        # A FIFO or a device would block the read: only a regular file can be a package.
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as file:
            if file.read(4) != _ZIP_MAGIC:
                return False
        with zipfile.ZipFile(path) as package:
            return PTG_ENTRY in package.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _graph_keys(graph) -> Iterator[str]:
    """The quantisation keys a graph's values carry, its subgraphs' included (a worklist)."""
    stack = [graph]
    while stack:
        current = stack.pop()
        for value in current.tensorValues or ():
            yield from _meta_keys(value.meta)
        for node in current.nodes or ():
            for argument in node.inputs or ():
                arg = argument.arg
                if arg is not None and arg.valueType == GRAPH_ARG and arg.value.graph is not None:
                    stack.append(arg.value.graph)


def _meta_keys(meta) -> Iterator[str]:
    scheme = None if meta is None or meta.quant is None else meta.quant.scheme
    for key in (getattr(scheme, "scaleDataKey", None), getattr(scheme, "zeroPointDataKey", None)):
        if key:
            yield table_text(key) or ""


def _read_methods(path: str, ptg: bytes, offset: int):
    if ptg[4:8] != NATIVE_GRAPH_IDENTIFIER:
        raise PteFormatError(
            path, f"{PTG_ENTRY}: flatbuffer identifier {ptg[4:8]!r}, expected b'NPTG'", offset
        )
    problem = verify_flatbuffer(NATIVE_GRAPH, ptg)
    if problem is not None:
        raise PteFormatError(path, f"{PTG_ENTRY}: {problem}", offset)
    program = NATIVE_GRAPH.read(ptg)
    keys: dict[str, tuple[str, ...]] = {}
    mutated: set[str] = set()
    for method in program.methods or ():
        found: dict[str, None] = {}
        for constant in method.constants or ():
            key = table_text(constant.dataKey) or ""
            found[key] = None
            found.update(dict.fromkeys(_meta_keys(constant.meta)))
            if constant.mutated:
                mutated.add(key)
        if method.graph is not None:
            found.update(dict.fromkeys(_graph_keys(method.graph)))
        keys[table_text(method.name) or ""] = tuple(found)
    return table_text(program.version) or "", keys, mutated


def _local_header_size(path: str, data: bytes, info: zipfile.ZipInfo) -> int:
    """The bytes of an entry's local header (its name and extra field included)."""
    fields = _LOCAL_HEADER.unpack_from(data, info.header_offset)
    if fields[0] != _ZIP_MAGIC:
        raise PteFormatError(path, f"{info.filename}: no local file header", info.header_offset)
    return _LOCAL_HEADER.size + fields[-2] + fields[-1]


def _safetensors(path: str, blob: bytes, start: int) -> tuple[dict, int]:
    """The safetensors header (key to its entry, `__metadata__` left out) and its length."""
    if len(blob) < 8:
        raise PteFormatError(path, f"{SAFETENSORS_ENTRY}: only {len(blob)} bytes", start)
    (length,) = struct.unpack_from("<Q", blob)
    if 8 + length > len(blob):
        raise PteFormatError(
            path, f"{SAFETENSORS_ENTRY}: header of {length} bytes > the entry's {len(blob)}", start
        )
    try:
        header = json.loads(blob[8 : 8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PteFormatError(path, f"{SAFETENSORS_ENTRY}: header: {error}", start + 8) from error
    if not isinstance(header, dict):
        raise PteFormatError(path, f"{SAFETENSORS_ENTRY}: header is not an object", start + 8)
    header.pop("__metadata__", None)
    return header, 8 + length


def _constants(path, blob, start, keys, aliases, mutated) -> tuple[list[PtnConstant], list]:
    header, data_start = _safetensors(path, blob, start)
    readers: dict[str, list[str]] = {}
    for method, method_keys in keys.items():
        for key in method_keys:
            readers.setdefault(aliases.get(key, key), []).append(method)
    constants, spans = [], [PtnSpan("safetensors header", "ptn_header", start, data_start)]
    end = data_start
    for key, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, stop = entry["data_offsets"]
        if not data_start + begin >= end or data_start + stop > len(blob) or stop < begin:
            raise PteFormatError(
                path,
                f"{SAFETENSORS_ENTRY}: {key!r} data_offsets {begin}..{stop} overlap or "
                f"pass the entry's {len(blob) - data_start} data bytes",
                start,
            )
        if data_start + begin > end:
            spans.append(PtnSpan("", "padding", start + end, data_start + begin - end))
        end = data_start + stop
        constants.append(
            PtnConstant(
                key=key,
                dtype=str(entry.get("dtype", "")),
                shape=tuple(int(n) for n in entry.get("shape", ())),
                offset=start + data_start + begin,
                nbytes=stop - begin,
                aliases=tuple(sorted(a for a, owner in aliases.items() if owner == key)),
                readers=tuple(dict.fromkeys(readers.get(key, ()))),
                mutated=key in mutated,
            )
        )
        spans.append(PtnSpan(key, "constant", start + data_start + begin, stop - begin))
    if end < len(blob):
        spans.append(PtnSpan("", "padding", start + end, len(blob) - end))
    return constants, spans


def read_ptn(path: str | os.PathLike) -> PtnPackage:
    """Reads a `.ptn` package: every byte attributed, each constant's readers.

    Raises:
        PteFormatError: Not a zip holding `program.ptg`, a compressed entry, a malformed
            graph, safetensors header or `aliases.json`, or an alias of a missing key.
    """
    name = os.fspath(path)
    with open(name, "rb") as file:
        data = file.read()
    try:
        package = zipfile.ZipFile(name)
    except zipfile.BadZipFile as error:
        raise PteFormatError(name, f"not a .ptn package: {error}", 0) from error
    with package:
        infos = sorted(package.infolist(), key=lambda i: i.header_offset)
        start_of = {}
        spans: list[PtnSpan] = []
        end = 0
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED:
                raise PteFormatError(name, f"{info.filename}: compressed entry", info.header_offset)
            if info.header_offset > end:
                spans.append(PtnSpan("", "padding", end, info.header_offset - end))
            header = _local_header_size(name, data, info)
            spans.append(PtnSpan(info.filename, "zip_header", info.header_offset, header))
            start_of[info.filename] = info.header_offset + header
            end = start_of[info.filename] + info.compress_size
        if PTG_ENTRY not in start_of:
            raise PteFormatError(name, f"not a .ptn package: no {PTG_ENTRY}", 0)
        blobs = {info.filename: _read_entry(name, package, info) for info in infos}
    aliases = _aliases(name, blobs.get(ALIASES_ENTRY), start_of.get(ALIASES_ENTRY, 0))
    version, keys, mutated = _read_methods(name, blobs[PTG_ENTRY], start_of[PTG_ENTRY])
    constants: list[PtnConstant] = []
    for info in infos:
        start = start_of[info.filename]
        if info.filename == SAFETENSORS_ENTRY:
            constants, inner = _constants(
                name, blobs[SAFETENSORS_ENTRY], start, keys, aliases, mutated
            )
            spans.extend(inner)
        else:
            storage = {PTG_ENTRY: "ptg", ALIASES_ENTRY: "aliases"}.get(info.filename, "other")
            spans.append(PtnSpan(info.filename, storage, start, info.compress_size))
    spans.append(PtnSpan("", "zip_directory", end, len(data) - end))
    stored = {c.key for c in constants}
    missing = sorted({owner for owner in aliases.values() if owner not in stored})
    if missing:
        raise PteFormatError(name, f"{ALIASES_ENTRY}: aliases of keys not stored: {missing}")
    return PtnPackage(
        path=name,
        size=len(data),
        version=version,
        methods=tuple(keys),
        spans=tuple(sorted(spans, key=lambda s: s.offset)),
        constants=tuple(constants),
        aliases=aliases,
        method_keys=keys,
    )


def _read_entry(path: str, package: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    try:
        return package.read(info)
    except (zipfile.BadZipFile, OSError) as error:
        raise PteFormatError(path, f"{info.filename}: {error}", info.header_offset) from error


def _aliases(path: str, blob: bytes | None, start: int) -> dict[str, str]:
    if blob is None:
        return {}
    try:
        aliases = json.loads(blob)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PteFormatError(path, f"{ALIASES_ENTRY}: {error}", start) from error
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in aliases.items()
    ):
        raise PteFormatError(path, f"{ALIASES_ENTRY}: not an object of key to key", start)
    return aliases
