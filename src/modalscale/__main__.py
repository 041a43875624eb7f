"""``python -m modalscale``: the ``modalscale`` command (:func:`modalscale.cli.main`), for a checkout without the
console script on PATH."""

import sys

from modalscale.cli import main

if __name__ == "__main__":
    sys.exit(main())
