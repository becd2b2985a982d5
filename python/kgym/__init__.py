"""kgym: bindings to libkgym, clients and trainer glue.

Submodules are imported on demand (``import kgym.rl``); importing this
package loads nothing else.
"""

__version__ = "0.1.0"
