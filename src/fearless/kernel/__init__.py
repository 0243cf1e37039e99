"""Kernel objects: ``base.py`` (what both tracks share), ``simt.py`` (``@fearless.kernel``) and
``tile.py`` (``@fearless.tile.kernel``)."""
from fearless.kernel.base import DeviceFunction, func  # noqa: F401 (the package's surface)
from fearless.kernel.simt import Kernel, kernel, unchecked, unsafe  # noqa: F401
