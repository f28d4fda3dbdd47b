"""`python -m castfind` runs the command line."""

from castfind.cli import main

if __name__ == "__main__":
    main()
