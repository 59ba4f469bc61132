import sys

from workflows.cli import main

sys.exit(main())
