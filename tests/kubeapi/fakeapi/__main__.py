# SPDX-License-Identifier: MIT
from .main import main

main()
