# SPDX-License-Identifier: MIT
# A package, so that its modules (e2e.conftest, e2e.chain, ...) never collide with
# tests/integration's top-level `conftest` when pytest collects both folders in one run.
