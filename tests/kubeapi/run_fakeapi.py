#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Start the Kubernetes API server test double: run_fakeapi.py --dir DIR [options].
See tests/kubeapi/README.md."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakeapi.main import main  # noqa: E402

if __name__ == "__main__":
    main()
