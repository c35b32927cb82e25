import os
import sys

# The installed kiln package (scripts/install.sh; PYTHONPATH=python for the source tree's) and the
# zoo's list.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "zoo"))


def pytest_report_header(config):
    try:
        import kiln  # noqa: PLC0415
    except ImportError as e:  # tests of the `kiln` command alone (scripts/sanitize.sh) need no package
        return f"kiln: not importable ({e})"
    return f"kiln {kiln.__version__} from {os.path.dirname(os.path.abspath(kiln.__file__))}"
