"""``python3 -m kvtier ARGS`` runs the ``kvtier`` command with ARGS.

The command is looked up in this order: $KVTIER_CLI; the build folder's
``kvtier`` when this package is ``<build>/python/kvtier``; the install
prefix's ``bin/kvtier`` when it is ``<prefix>/lib/python3*/*-packages/kvtier``;
``kvtier`` on $PATH (a wheel installs it in the environment's ``bin/``, which
is the prefix's). ``python3 -m kvtier --version`` prints the command's version
line, or ``kvtier VERSION`` (the module's) when there is no command.
"""

import os
import shutil
import sys


def _is_program(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_cli():
    """Path of the kvtier command, or None."""
    env = os.environ.get("KVTIER_CLI")
    if env and _is_program(env):
        return env
    package = os.path.dirname(os.path.abspath(__file__))
    up = [package]
    for _ in range(4):
        up.append(os.path.dirname(up[-1]))
    for candidate in (os.path.join(up[2], "kvtier"), os.path.join(up[4], "bin", "kvtier")):
        if _is_program(candidate):
            return candidate
    return shutil.which("kvtier")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cli = find_cli()
    if cli is None and list(argv) == ["--version"]:
        from . import __version__
        print("kvtier " + __version__)
        return 0
    if cli is None:
        sys.stderr.write("kvtier: the kvtier command is not installed (set KVTIER_CLI or put "
                         "it on PATH); the Python module works without it\n")
        return 2
    sys.stdout.flush()
    os.execv(cli, [cli] + list(argv))
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
