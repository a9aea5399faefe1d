"""`python -m sundial_cron --registry MODULE[:ATTRIBUTE] run NAME | list | check PATH...`"""

import sys

from sundial_cron.cli import console

sys.exit(console())
