import os
import sys

# Import the package from the source tree (CMake builds _kiln into python/kiln/).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
