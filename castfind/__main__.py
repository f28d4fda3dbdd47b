"""`python -m castfind` runs the command line (a carried `where` answer first: :mod:`castfind.quick`)."""

from castfind.quick import main

if __name__ == "__main__":
    main()
