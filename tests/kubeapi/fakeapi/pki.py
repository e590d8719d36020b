# SPDX-License-Identifier: MIT
"""A throwaway CA, a server certificate for 127.0.0.1, a client certificate, and a kubeconfig
that points at the double — made with the openssl command line (fixed argv, no shell)."""
import base64
import os
import subprocess

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(args, cwd):
    r = subprocess.run(["openssl"] + args, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {r.stderr.strip()}")


def _issue(d, name, subject, ext_lines):
    ext = os.path.join(d, f"{name}.ext")
    with open(ext, "w") as f:
        f.write("\n".join(ext_lines) + "\n")
    _openssl(["req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject], d)
    _openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
              "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", "3650",
              "-out", f"{name}.crt", "-extfile", ext], d)
    os.unlink(os.path.join(d, f"{name}.csr"))
    os.unlink(ext)
    os.chmod(os.path.join(d, f"{name}.key"), 0o600)


def make_pki(d):
    """Write ca.crt/ca.key, server.crt/key (SAN 127.0.0.1, localhost) and client.crt/key
    (CN aiprof-admin, O system:masters) into d."""
    os.makedirs(d, exist_ok=True)
    _openssl(["req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
              "-subj", "/CN=fakeapi-ca", "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)
    os.chmod(os.path.join(d, "ca.key"), 0o600)
    _issue(d, "server", "/CN=fakeapi-server", [
        "basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth",
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"])
    _issue(d, "client", "/O=system:masters/CN=aiprof-admin", [
        "basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=clientAuth"])


def _b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def write_kubeconfig(d, server_url, token, sa_token_file, namespace="default"):
    """kubeconfig with three users: admin (bearer token, current context), cert-user (client
    certificate) and controller-sa (tokenFile, re-read on change)."""
    path = os.path.join(d, "kubeconfig")
    text = f"""apiVersion: v1
kind: Config
clusters:
- name: fakeapi
  cluster:
    server: {server_url}
    certificate-authority-data: {_b64(os.path.join(d, "ca.crt"))}
contexts:
- name: fakeapi
  context:
    cluster: fakeapi
    user: admin
    namespace: {namespace}
- name: fakeapi-cert
  context:
    cluster: fakeapi
    user: cert-user
    namespace: {namespace}
- name: fakeapi-sa
  context:
    cluster: fakeapi
    user: controller-sa
    namespace: {namespace}
current-context: fakeapi
users:
- name: admin
  user:
    token: {token}
- name: cert-user
  user:
    client-certificate-data: {_b64(os.path.join(d, "client.crt"))}
    client-key-data: {_b64(os.path.join(d, "client.key"))}
- name: controller-sa
  user:
    tokenFile: {sa_token_file}
preferences: {{}}
"""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def write_service_account(d, token, namespace):
    """The in-cluster layout: d/serviceaccount/{token,ca.crt,namespace}."""
    sa = os.path.join(d, "serviceaccount")
    os.makedirs(sa, exist_ok=True)
    for name, data in (("ca.crt", open(os.path.join(d, "ca.crt")).read()), ("namespace", namespace),
                       ("token", token)):
        tmp = os.path.join(sa, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, os.path.join(sa, name))
    return sa
