"""``python -m mtb`` (and ``torchrun -m mtb``) enter the same CLI as ``mtb``."""

from mtb.cli import main

if __name__ == "__main__":
    main()
