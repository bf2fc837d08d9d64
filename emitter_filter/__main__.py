import sys

from emitter_filter.cli import main

sys.exit(main())
