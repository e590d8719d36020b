# SPDX-License-Identifier: MIT
"""fakeapi: a test double of the Kubernetes API server (see ../README.md)."""
