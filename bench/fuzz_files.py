"""`python bench/fuzz_files.py --cases 10000`: the fuzz harness of `tests/fuzz_files.py`, at scale.

The harness lives with the tests, which run a small corpus of it in CI; this
script is the documented way to run many cases. `--help` lists the options.
"""

import sys
from pathlib import Path

# Run as a script: the repository root holds the `tests` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz_files import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
