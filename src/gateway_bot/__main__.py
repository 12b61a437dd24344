import sys

from gateway_bot.cli import main

sys.exit(main())
