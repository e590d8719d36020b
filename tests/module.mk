# tests/: unit tests (cmocka), test doubles, workloads, fuzz targets, benchmarks.
include tests/unit/module.mk
include tests/unit/preload/module.mk
-include tests/doubles/module.mk
-include tests/workloads/module.mk
-include tests/bench/module.mk
include tests/gpu/module.mk
include tests/s3/module.mk
