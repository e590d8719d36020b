# tests/s3/: curl_sigv4_probe, which sends the S3 client's requests signed by libcurl's own
# SigV4 signer (CURLOPT_AWS_SIGV4) to a real S3 server
# (tests/integration/test_s3.py::test_curl_7_88_sigv4_against_radosgw).
$(BUILD)/tests/s3/curl_sigv4_probe: $(BUILD)/tests/s3/curl_sigv4_probe.o $(BUILD)/libcommon.a
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcurl -lcrypto

TEST_PROGRAMS += $(BUILD)/tests/s3/curl_sigv4_probe
