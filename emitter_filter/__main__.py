import sys

from emitter_filter.cli import console_main

sys.exit(console_main())
