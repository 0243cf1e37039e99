"""``python -m fearless`` is the ``fearless`` command."""
import sys

from fearless.cli import main

sys.exit(main())
