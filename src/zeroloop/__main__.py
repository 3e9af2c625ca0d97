"""The ``zeroloop`` program: the console script and ``python -m zeroloop``."""

import sys


def command() -> int:
    """:func:`zeroloop.apps.cli.main` as the whole of this process: no garbage
    collection until the command's work begins (``runtime.process``), its
    imports included."""
    from zeroloop.pipeline.runtime.process import start_up_without_collection

    start_up_without_collection()
    from zeroloop.apps.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(command())
