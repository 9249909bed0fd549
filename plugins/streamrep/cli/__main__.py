"""``python -m streamrep.cli``: the command line where streamrep is not installed (a folder
deployment, with the plugins folder on ``PYTHONPATH``), the same as the ``streamrep`` script."""

from streamrep.cli.main import main

main()
