import sys

from zeroloop.cli import main

sys.exit(main())
