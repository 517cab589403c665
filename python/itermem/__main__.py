"""``python -m itermem ...`` runs the ``itermem`` command with the same arguments."""

from itermem import _main

_main()
