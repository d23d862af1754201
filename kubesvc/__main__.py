import sys

from kubesvc.cli import main

sys.exit(main())
