import os
import sys

# The kiln package from the source tree (CMake builds _kiln into python/kiln/) and the zoo's list.
_root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(_root, "python"))
sys.path.insert(0, os.path.join(_root, "bench", "zoo"))
