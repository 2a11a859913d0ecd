"""Where the tests find Tiny Shakespeare: never downloaded, always a local copy.

$ANATOMY_DATA (the Makefile sets it), else the shared folder beside the checkout, as CI lays it.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ANATOMY_DATA") or ROOT.parent / "shared" / "data")
