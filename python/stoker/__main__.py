"""``python -m stoker ARGS``: the same as the ``stoker`` command."""
from .cli import main

if __name__ == "__main__":
    main()
