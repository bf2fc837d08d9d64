"""Flatbuffer readers generated from ExecuTorch's own schemas; do not edit by hand.

The file side reads `.pte`, `.ptd` and XNNPACK delegate blobs with `flatbuffer_tables` (into
the object API's model, without importing these or `flatbuffers`), and packs a rewritten
program or FlatTensor with these, instead of importing `executorch.exir` (~11 s).

- `executorch_flatbuffer`: `schema/program.fbs` and `schema/scalar_type.fbs`
  (the `.pte` program), with the object API that `exir/_serialize` packs with.
- `flat_tensor_flatbuffer`: `extension/flat_tensor/serialize/flat_tensor.fbs`
  (the `.ptd` file).
- `fb_xnnpack`: `backends/xnnpack/serialization/schema.fbs` (the XNNPACK blob,
  read only for the named-data keys in `XNNGraph.constant_data`, and which node
  reads each).

Regenerate with the `flatc` in the executorch 1.5.1 wheel (version 24.3.25),
from the repository root::

    ET=$(python -c 'import executorch, os; print(os.path.dirname(executorch.__file__))')
    cd emitter_filter/_program_fbs
    rm -rf executorch_flatbuffer flat_tensor_flatbuffer
    rm -f fb_xnnpack/*.py  # not the .pyi stubs: those are written by hand
    $ET/data/bin/flatc --python --python-typing --gen-object-api --gen-mutable \\
        --gen-compare -o . $ET/schema/program.fbs $ET/schema/scalar_type.fbs \\
        $ET/extension/flat_tensor/serialize/flat_tensor.fbs
    $ET/data/bin/flatc --python -o . $ET/backends/xnnpack/serialization/schema.fbs
    # flatc imports each namespace as a top-level package; make it ours.
    sed -i -E 's/\\b(executorch_flatbuffer|flat_tensor_flatbuffer|fb_xnnpack)\\./emitter_filter._program_fbs.\\1./g' */*.py

`fb_xnnpack` is generated without `--python-typing`; the `.pyi` stubs beside the modules
`delegates` calls give mypy their types (`tests/test_flatbuffer_tables.py` checks that
they name the accessors the new `.py` files have; their types are checked by reading).

The flags for `executorch_flatbuffer` are the ones `exir/_serialize/generate_program.py`
uses, so `ProgramT.Pack` writes what ExecuTorch's own serializer writes.
"""
