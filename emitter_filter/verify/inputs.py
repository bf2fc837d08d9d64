"""The inputs both programs of a pair run on: seeded from the method's own metadata, or
read from `--inputs FILE.npz`.

Seeded: floats standard normal, integers in [0, `SMALL_INTEGERS`) so that token ids,
positions and class labels stay in range of any vocabulary, cache and loss, bools half true; the sizes are the
metadata's (a dynamic dimension's upper bound). `--inputs` is numpy's `.npz`, which needs
no torch to write or read: one array per input, named `METHOD/INDEX` after the method's
name in the new program (`forward/0`, `decode/1`); a method the file does not name is
seeded. A 0-d array gives a method's non-tensor input (an int, a bool).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from emitter_filter.errors import VerifyError
from emitter_filter.verify.runtimes import InputSpec

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SEED", "SMALL_INTEGERS", "seeded_inputs", "InputFile"]

#: The seed of every method's inputs (a fresh generator per method).
SEED = 0
#: Seeded integers are drawn from [0, SMALL_INTEGERS).
SMALL_INTEGERS = 2

# numpy's dtype of each ScalarType an input can be given in; bfloat16 travels as float32
# values that the runtime rounds (`runtimes.py`).
_FLOATS = {"HALF": "float16", "FLOAT": "float32", "DOUBLE": "float64", "BFLOAT16": "float32"}
_INTEGERS = {
    "BYTE": "uint8",
    "CHAR": "int8",
    "SHORT": "int16",
    "INT": "int32",
    "LONG": "int64",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
}
_NUMPY = {**_FLOATS, **_INTEGERS, "BOOL": "bool"}


def seeded_inputs(method: str, specs: Sequence[InputSpec], seed: int = SEED) -> list:
    """(spec, array) for each input of `method`, drawn from a generator seeded with `seed`.

    Raises:
        VerifyError: An input is of a kind with no seeded value (not a tensor, a
            quantized type): it must come from `--inputs`.
    """
    import numpy as np

    generator = np.random.default_rng(seed)
    inputs = []
    for index, spec in enumerate(specs):
        array: np.ndarray
        if spec.dtype in _FLOATS:
            array = generator.standard_normal(spec.shape, dtype=np.float32)
        elif spec.dtype in _INTEGERS:
            array = generator.integers(0, SMALL_INTEGERS, spec.shape)
        elif spec.dtype == "BOOL":
            array = generator.random(spec.shape) < 0.5
        else:
            kind = "not a tensor" if spec.dtype is None else f"a {spec.dtype} tensor"
            raise VerifyError(
                f"method {method!r} input {index} is {kind}: give it with "
                f"--inputs FILE.npz (an array named {method}/{index})"
            )
        inputs.append((spec, array.astype(_NUMPY[spec.dtype])))
    return inputs


class InputFile:
    """`--inputs FILE.npz`: the arrays it names `METHOD/INDEX`, by method."""

    def __init__(self, path: str | os.PathLike) -> None:
        import numpy as np

        self.path = os.fspath(path)
        self.methods: dict[str, dict[int, np.ndarray]] = {}
        try:
            with np.load(self.path, allow_pickle=False) as arrays:
                named = {key: arrays[key] for key in arrays.files}
        except (OSError, ValueError) as error:
            raise VerifyError(f"{self.path}: not an .npz of arrays ({error})") from error
        for key, array in named.items():
            method, slash, index = key.rpartition("/")
            if not (slash and method and index.isdigit()):
                raise VerifyError(
                    f"{self.path}: array {key!r}: name each array METHOD/INDEX, e.g. forward/0"
                )
            self.methods.setdefault(method, {})[int(index)] = array

    def check_methods(self, methods: Sequence[str]) -> None:
        """Refuses a file that names a method the new program does not have."""
        unknown = [m for m in self.methods if m not in methods]
        if unknown:
            raise VerifyError(
                f"{self.path}: names method {unknown[0]!r}, which the new "
                f"program does not have (it has {', '.join(methods)})"
            )

    def inputs_for(self, method: str, specs: Sequence[InputSpec]) -> list | None:
        """(spec, array) for each input of `method`, or None if the file names none."""
        given = self.methods.get(method)
        if given is None:
            return None
        if sorted(given) != list(range(len(specs))):
            listed = ", ".join(f"{method}/{i}" for i in sorted(given))
            raise VerifyError(
                f"{self.path}: method {method!r} takes {len(specs)} input(s); "
                f"the file gives {listed}"
            )
        inputs = []
        for index, spec in enumerate(specs):
            array = given[index]
            if spec.dtype is not None:
                want = _NUMPY.get(spec.dtype)
                if want is None or not _castable(array, want):
                    raise VerifyError(
                        f"{self.path}: {method}/{index} is {array.dtype}; the "
                        f"method takes {spec.dtype}"
                    )
                array = array.astype(want)
            inputs.append((spec, array))
        return inputs


def _castable(array, dtype: str) -> bool:
    import numpy as np

    return np.can_cast(array.dtype, dtype, casting="same_kind")
