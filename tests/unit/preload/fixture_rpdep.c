/* SPDX-License-Identifier: MIT */
/* rp/libfixture_rpdep.so: only reachable through its loader's search path. */
int fixture_rpdep_value(void)
{
	return 42;
}
