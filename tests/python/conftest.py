import os

# The tests import the installed kiln package (scripts/test.sh installs it into .venv with
# scripts/install.sh), not python/ in the source tree: PYTHONPATH=python tests that instead.


def pytest_report_header(config):
    try:
        import kiln  # noqa: PLC0415
    except ImportError as e:  # tests of the `kiln` command alone (scripts/sanitize.sh) need no package
        return f"kiln: not importable ({e})"
    return f"kiln {kiln.__version__} from {os.path.dirname(os.path.abspath(kiln.__file__))}"
