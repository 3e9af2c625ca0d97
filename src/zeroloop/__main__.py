import sys

from zeroloop.apps.cli import main

sys.exit(main())
