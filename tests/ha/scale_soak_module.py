"""``bench/scale_soak.py`` as a module for its tests (the bench is a script, not a package):
loaded once per process; loading it puts ``bench/`` and ``deploy/`` on the path, so
``soak_clusters`` imports after it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def scale_soak() -> ModuleType:
    """The loaded ``bench/scale_soak.py`` (the same module object at every call)."""
    loaded = sys.modules.get("scale_soak")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("scale_soak", ROOT / "bench" / "scale_soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_soak"] = module
    spec.loader.exec_module(module)
    return module
