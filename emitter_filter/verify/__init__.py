"""`--verify`: load a written program and the one it was written from in a runtime, run
each method of both on the same inputs, and require bit-identical outputs.

A third side beside `ondisk/` and `inprocess/`: it needs a runtime (ExecuTorch's
pybindings, or executorch-numpy-runtime without torch), imported only when a
verification runs (`runtimes.find_runtime`, in a child process: `child`). It reads each
program's methods, signatures and arenas with the on-disk readers (`plan`, torch-free)
and imports nothing of `inprocess/`. `compare` pairs and compares the methods, `sides`
runs each side, `inputs` builds what they run on.
"""
