#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""An independent SigV4 signer for tests/unit/test_sigv4.c: Debian's python3-botocore.

Reads one JSON request a line on stdin:
  {"method", "path" (raw, unencoded), "query": [[k, v|null]...], "headers": [[k, v]...],
   "payload_hash", "region", "service", "amz_date", "access_key", "secret_key"}
and prints one JSON line per request: {"canonical_request", "string_to_sign", "signature"}.

botocore encodes the path (percent_encode(path, safe='/~'), as its S3 serializer does for
keys) and the query parameters itself, so the C signer's encoding is checked too.
Exits 77 when botocore is not installed (the C test then skips).
"""
import json
import sys

try:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from botocore.utils import percent_encode
except ImportError:
    sys.exit(77)


def sign(req):
    creds = Credentials(req["access_key"], req["secret_key"])
    auth = S3SigV4Auth(creds, req["service"], req["region"])
    url = "https://example.invalid" + percent_encode(req["path"], safe="/~")
    r = AWSRequest(method=req["method"], url=url)
    # params as (name, value) pairs: botocore quotes each itself
    r.params = [(k, "" if v is None else v) for k, v in req["query"]]
    for k, v in req["headers"]:
        r.headers[k] = v        # HTTPHeaders: repeated names are kept in order
    r.context["timestamp"] = req["amz_date"]
    cr = auth.canonical_request(r)
    sts = auth.string_to_sign(r, cr)
    return {"canonical_request": cr, "string_to_sign": sts,
            "signature": auth.signature(sts, r)}


def main():
    for line in sys.stdin:
        line = line.strip()
        if line:
            print(json.dumps(sign(json.loads(line))), flush=False)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
