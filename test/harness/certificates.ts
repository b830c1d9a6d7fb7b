import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface ClientCertificate {
  certFile: string;
  keyFile: string;
}

export interface ClusterCertificates {
  caFile: string;
  caKeyFile: string;
  serving: ClientCertificate;
  admin: ClientCertificate;
  controllerManager: ClientCertificate;
  scheduler: ClientCertificate;
  /** The real node's kubelet: `system:node:real-node` in `system:nodes`, as the Node authorizer expects. */
  node: ClientCertificate;
  /** What the API server shows a kubelet it connects to (logs, exec). */
  kubeletClient: ClientCertificate;
  serviceAccountKeyFile: string;
  serviceAccountPublicKeyFile: string;
  /**
   * The aggregation layer's: a CA of its own (the requestheader client CA an aggregated API
   * server trusts) and the client certificate the API server shows it when it proxies a request.
   */
  frontProxyCaFile: string;
  frontProxyClient: ClientCertificate;
}

/** The name the API server's front-proxy client certificate carries (--requestheader-allowed-names). */
export const FRONT_PROXY_CLIENT_NAME = "front-proxy-client";

/** Runs openssl; a failure carries its stderr. */
export async function openssl(args: string[]): Promise<void> {
  try {
    await run("openssl", args);
  } catch (error) {
    const { stderr } = error as { stderr?: string };
    throw new Error(`openssl ${args[0]} failed: ${stderr ?? String(error)}`, { cause: error });
  }
}

// P-256 keys: generating them takes milliseconds, which keeps a warm start fast.
async function newKey(file: string): Promise<void> {
  await openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", file]);
}

async function signedCertificate(
  dir: string,
  name: string,
  subject: string,
  extensions: string,
  caFile: string,
  caKeyFile: string,
): Promise<ClientCertificate> {
  const keyFile = path.join(dir, `${name}.key`);
  const certFile = path.join(dir, `${name}.crt`);
  const csrFile = path.join(dir, `${name}.csr`);
  const extFile = path.join(dir, `${name}.ext`);
  await newKey(keyFile);
  await openssl(["req", "-new", "-key", keyFile, "-subj", subject, "-out", csrFile]);
  await writeFile(extFile, extensions);
  await openssl([
    "x509",
    "-req",
    "-in",
    csrFile,
    "-CA",
    caFile,
    "-CAkey",
    caKeyFile,
    // A random serial instead of -CAcreateserial: the certificates are signed in parallel.
    "-set_serial",
    `0x${randomBytes(16).toString("hex")}`,
    "-days",
    "30",
    "-sha256",
    "-extfile",
    extFile,
    "-out",
    certFile,
  ]);
  return { certFile, keyFile };
}

/** The real node's name (`npm run cluster:up`); its certificate names it. */
export const NODE_NAME = "real-node";

const clientExtensions =
  "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n";

/** A client certificate for `subject` (e.g. `/CN=someone`) signed by the cluster's CA, as a user is given one. */
export function signClientCertificate(
  dir: string,
  name: string,
  subject: string,
  ca: { caFile: string; caKeyFile: string },
): Promise<ClientCertificate> {
  return signedCertificate(dir, name, subject, clientExtensions, ca.caFile, ca.caKeyFile);
}

/**
 * A serving certificate for `subjectAltNames` (e.g. `IP:127.0.0.1`) signed by the cluster's CA:
 * what a webhook server on loopback shows the API server, which trusts it through the CA as caBundle.
 */
export function signServingCertificate(
  dir: string,
  name: string,
  subjectAltNames: string[],
  ca: { caFile: string; caKeyFile: string },
): Promise<ClientCertificate> {
  const extensions = [
    "basicConstraints=CA:FALSE",
    "keyUsage=digitalSignature,keyEncipherment",
    "extendedKeyUsage=serverAuth",
    `subjectAltName=${subjectAltNames.join(",")}`,
    "",
  ].join("\n");
  return signedCertificate(dir, name, `/CN=${name}`, extensions, ca.caFile, ca.caKeyFile);
}

/** A self-signed CA (`ca.crt` and `ca.key` under `name`) in `dir`. */
export async function generateCa(
  dir: string,
  name: string,
  commonName: string,
): Promise<{ caFile: string; caKeyFile: string }> {
  const caKeyFile = path.join(dir, `${name}.key`);
  const caFile = path.join(dir, `${name}.crt`);
  await newKey(caKeyFile);
  await openssl([
    "req",
    "-x509",
    "-new",
    "-key",
    caKeyFile,
    "-subj",
    `/CN=${commonName}`,
    "-days",
    "30",
    "-sha256",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    "-out",
    caFile,
  ]);
  return { caFile, caKeyFile };
}

/** A fresh CA, the apiserver's serving certificate, client certificates and service-account keys. */
export async function generateClusterCertificates(dir: string): Promise<ClusterCertificates> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const [{ caFile, caKeyFile }, frontProxyCa] = await Promise.all([
    generateCa(dir, "ca", "playbook-controller-dev-ca"),
    generateCa(dir, "front-proxy-ca", "playbook-controller-dev-front-proxy-ca"),
  ]);

  const servingExtensions = [
    "basicConstraints=CA:FALSE",
    "keyUsage=digitalSignature,keyEncipherment",
    "extendedKeyUsage=serverAuth",
    "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local",
    "",
  ].join("\n");

  const [serving, admin, controllerManager, scheduler, node, kubeletClient, frontProxyClient] =
    await Promise.all([
      signedCertificate(dir, "apiserver", "/CN=kube-apiserver", servingExtensions, caFile, caKeyFile),
      signedCertificate(dir, "admin", "/O=system:masters/CN=admin", clientExtensions, caFile, caKeyFile),
      signedCertificate(
        dir,
        "controller-manager",
        "/CN=system:kube-controller-manager",
        clientExtensions,
        caFile,
        caKeyFile,
      ),
      signedCertificate(dir, "scheduler", "/CN=system:kube-scheduler", clientExtensions, caFile, caKeyFile),
      signedCertificate(
        dir,
        "node",
        `/O=system:nodes/CN=system:node:${NODE_NAME}`,
        clientExtensions,
        caFile,
        caKeyFile,
      ),
      signedCertificate(
        dir,
        "kubelet-client",
        "/O=system:masters/CN=kube-apiserver-kubelet-client",
        clientExtensions,
        caFile,
        caKeyFile,
      ),
      signedCertificate(
        dir,
        FRONT_PROXY_CLIENT_NAME,
        `/CN=${FRONT_PROXY_CLIENT_NAME}`,
        clientExtensions,
        frontProxyCa.caFile,
        frontProxyCa.caKeyFile,
      ),
    ]);

  const serviceAccountKeyFile = path.join(dir, "service-account.key");
  const serviceAccountPublicKeyFile = path.join(dir, "service-account.pub");
  await newKey(serviceAccountKeyFile);
  await openssl(["pkey", "-in", serviceAccountKeyFile, "-pubout", "-out", serviceAccountPublicKeyFile]);

  return {
    caFile,
    caKeyFile,
    serving,
    admin,
    controllerManager,
    scheduler,
    node,
    kubeletClient,
    serviceAccountKeyFile,
    serviceAccountPublicKeyFile,
    frontProxyCaFile: frontProxyCa.caFile,
    frontProxyClient,
  };
}
