"""``python -m searchveil`` (also the script to hand to ``spark-submit``)."""

from searchveil.cli import main

if __name__ == "__main__":
    main()
