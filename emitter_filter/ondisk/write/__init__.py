"""Writing files: every output atomically and all or none of a command's (`output`), and a `.ptd`
laid out as ExecuTorch's own writer lays it (`ptd_writer`). Built on `read/` alone."""
