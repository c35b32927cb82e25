"""`python -m kiln ...`: the `kiln` command (kiln/_cli.py), e.g. `python -m kiln serve --model-repository DIR`."""

from kiln._cli import main

main()
