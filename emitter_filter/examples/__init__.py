"""A small program with dead constants, shipped for the file tools' first example.

`model.pte` is `tests/golden/plain/dirty/model.pte` (written by ExecuTorch 1.5.1 from the
tests' model: forward(x) = x + 2 * w, with two constants nothing reads); after
`python -m tests.programs` rewrites the golden files, copy it here again
(`tests/test_demo_files.py` checks that they are one file).
"""

__all__: list[str] = []
