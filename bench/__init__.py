"""Benchmarks of emitter_filter: bytes saved and time and memory spent, per model.

Run `python -m bench --help`. The modules, by concern:

- `zoo`, `llama`: the models, built in code from seeded random weights;
- `measure`: one `to_executorch` call, its bytes and its memory;
- `worker`: the same in a fresh process, for peak memory;
- `bench_models` (+ `conftest`): the pytest-benchmark suite;
- `results`, `table`, `compare`, `dashboard`: reading `results.json` back
  (no torch, no ExecuTorch);
- `history`: the runs of several commits on one page (`--history`);
- `page` (+ `charts.js`): the self-contained page and the charts its script draws;
- `cli`: the command line.

Scripts stand beside the suite: for files on disk, `bench_files.py` times
`emitter-filter audit` and `prune` on a generated 1 GiB `.pte` against `cp` and
ExecuTorch's own round trip, `bench_share.py` times `emitter-filter share` on a
generated set of programs that share most of their bytes against `cp`, and
`fuzz_files.py` runs mutated files through audit and prune;
`startup.py` times `python -c pass` with and without the start-up hook;
`bench_proof_llama.py` times the hook's proofs within `to_executorch` on the llama
example with its tied embedding stored twice.

Kept out of the default test run: the project's `testpaths` is `tests/`.
"""
