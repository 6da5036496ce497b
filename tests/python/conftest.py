import os
import sys

# Tests import the installed package (make python), never the source tree,
# so that the C extension is the one built by `pip install .`.
here = os.path.dirname(os.path.abspath(__file__))
repo_python = os.path.join(os.path.dirname(os.path.dirname(here)), "python")
sys.path[:] = [p for p in sys.path if os.path.abspath(p) != repo_python]
