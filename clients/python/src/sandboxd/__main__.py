"""``python -m sandboxd ARGS...`` runs the sandboxd binary this package
carries (``python -m sandboxd run guest.wasm --invoke add --arg 2 --arg
40``), with its exit status: the process becomes the binary (exec), so
signals and the terminal reach it directly. A package used from its
checkout (``pip install -e``, ``PYTHONPATH=src``) carries none and runs the
checkout's ``bin/sandboxd``.
"""

import os
import sys

from ._process import bundled_binary, checkout_binary
from .errors import SidecarError


def main() -> None:
    try:
        path = bundled_binary() or checkout_binary()
    except SidecarError as e:
        print("python -m sandboxd: %s" % e, file=sys.stderr)
        sys.exit(127)
    sys.stdout.flush()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
