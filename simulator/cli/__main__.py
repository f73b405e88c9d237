"""``python -m simulator.cli``: the same as the ``paraplan`` script."""
import sys

from simulator.cli.main import main

sys.exit(main())
