// The controller's log API (src/controller/log-archive/log-api.ts) made reachable through the
// test control plane's aggregation layer, as the chart's APIService makes it on a cluster: a
// Service without a selector, an EndpointSlice naming the address the controller listens on, and
// the APIService v1alpha1.logs.playbook.dev with the serving certificate's CA.
//
// The API server (--enable-aggregator-routing) dials the EndpointSlice's address from this
// machine's network namespace. An endpoint may not be in 127.0.0.0/8, so the controller listens
// on a private /32 added to the loopback interface (LOG_API_ADDRESS; no dummy-interface module is
// needed), which no other machine routes to: the traffic stays on this machine.
import { execFile } from "node:child_process";
import { networkInterfaces } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { LOG_API_GROUP, LOG_API_VERSION } from "../../src/api/log-archive.js";
import type { ApiClient } from "../../src/runtime/api-client.js";
import { statusCodeOf } from "../../src/runtime/api-errors.js";
import { type ClientCertificate, generateCa, signServingCertificate } from "./certificates.js";
import { type RecordedProcess, stopProcess, waitFor } from "./processes.js";
import { NODE_API_ADDRESS, publishHostPortOnNode } from "./real-node/real-node.js";

const run = promisify(execFile);

/** The address on the loopback interface the test controllers' log APIs listen on. */
export const LOG_API_ADDRESS = "10.254.58.1";

export const LOG_API_SERVICE = "playbook-log-api";

/**
 * An address of this machine the API server may dial as an endpoint: LOG_API_ADDRESS, added to
 * the loopback interface when missing (root); without root, the first other IPv4 address the
 * machine has.
 */
export async function logApiHostAddress(): Promise<string> {
  const has = (address: string) =>
    Object.values(networkInterfaces()).some((list) => list?.some((i) => i.address === address));
  if (has(LOG_API_ADDRESS)) return LOG_API_ADDRESS;
  if (process.getuid?.() === 0) {
    // Another test process may add it at the same moment: "exists" is no failure.
    await run("ip", ["addr", "add", `${LOG_API_ADDRESS}/32`, "dev", "lo"]).catch(() => undefined);
    if (has(LOG_API_ADDRESS)) return LOG_API_ADDRESS;
  }
  for (const list of Object.values(networkInterfaces()))
    for (const entry of list ?? [])
      if (entry.family === "IPv4" && !entry.internal && !entry.address.startsWith("169.254."))
        return entry.address;
  throw new Error(
    "this machine has no address the API server could dial as an endpoint (and no root to make one)",
  );
}

/**
 * Where a test controller's log API listens and the address its EndpointSlice names. With a real
 * node the API server dials out of the node's network namespace (its cluster egress): a relay
 * there listens on NODE_API_ADDRESS (the node's non-loopback address of its own) and forwards to
 * the controller on this machine's loopback. Without one, logApiHostAddress(). `stop` ends the relays.
 */
export async function logApiEndpoint(
  stateDir: string,
  port: number,
  /** The dev cluster's: relays that outlive this process, recorded in its state. */
  options: { daemon?: boolean; record?: (process: RecordedProcess) => Promise<void> } = {},
): Promise<{ listen: string; endpoint: string; stop: () => Promise<void> }> {
  const relays: RecordedProcess[] = [];
  const published = await publishHostPortOnNode(stateDir, `log-api-${port}`, port, {
    daemon: options.daemon ?? false,
    record: async (process) => {
      relays.push(process);
      await options.record?.(process);
    },
    nodeAddress: NODE_API_ADDRESS,
  });
  const stop = async () => {
    for (const relay of relays) await stopProcess(relay).catch(() => undefined);
  };
  if (published.length > 0) return { listen: "127.0.0.1", endpoint: NODE_API_ADDRESS, stop };
  const address = await logApiHostAddress();
  return { listen: address, endpoint: address, stop };
}

/** A serving certificate for the log API's Service name, from a CA of its own (the caBundle). */
export async function logApiServingCertificate(
  dir: string,
  namespace: string,
): Promise<ClientCertificate & { caFile: string }> {
  const ca = await generateCa(dir, "log-api-ca", "playbook-log-api-test-ca");
  const serving = await signServingCertificate(
    dir,
    "log-api",
    [`DNS:${LOG_API_SERVICE}.${namespace}.svc`, "DNS:localhost"],
    ca,
  );
  return { ...serving, caFile: ca.caFile };
}

/** The test control plane's front-proxy client certificate (test/harness/certificates.ts), beside its kubeconfig. */
export function frontProxyClientOf(kubeconfig: string): ClientCertificate & { caFile: string } {
  const pki = path.join(path.dirname(kubeconfig), "pki");
  return {
    certFile: path.join(pki, "front-proxy-client.crt"),
    keyFile: path.join(pki, "front-proxy-client.key"),
    caFile: path.join(pki, "front-proxy-ca.crt"),
  };
}

export const APISERVICE_NAME = `${LOG_API_VERSION}.${LOG_API_GROUP}`;

async function apply(api: ApiClient, path: string, name: string, body: object): Promise<void> {
  try {
    await api.call({ method: "POST", path, body });
  } catch (error) {
    if (statusCodeOf(error) !== 409) throw error;
    await api.call({ method: "DELETE", path: `${path}/${name}` });
    await api.call({ method: "POST", path, body });
  }
}

/**
 * Registers the log API listening on `address:port` in `namespace` and waits until the API
 * server finds it Available. Returns what removes it again.
 */
export async function registerLogApi(
  api: ApiClient,
  options: { namespace: string; address: string; port: number; caBundle: Buffer },
): Promise<() => Promise<void>> {
  const { namespace, address, port } = options;
  await apply(api, `/api/v1/namespaces/${namespace}/services`, LOG_API_SERVICE, {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: LOG_API_SERVICE, namespace },
    spec: { ports: [{ name: "https", port: 443, targetPort: port, protocol: "TCP" }] },
  });
  await apply(api, `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices`, LOG_API_SERVICE, {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: LOG_API_SERVICE,
      namespace,
      labels: {
        "kubernetes.io/service-name": LOG_API_SERVICE,
        "endpointslice.kubernetes.io/managed-by": "playbook-tests",
      },
    },
    addressType: "IPv4",
    endpoints: [{ addresses: [address], conditions: { ready: true } }],
    ports: [{ name: "https", port, protocol: "TCP" }],
  });
  await apply(api, "/apis/apiregistration.k8s.io/v1/apiservices", APISERVICE_NAME, {
    apiVersion: "apiregistration.k8s.io/v1",
    kind: "APIService",
    metadata: { name: APISERVICE_NAME },
    spec: {
      group: LOG_API_GROUP,
      version: LOG_API_VERSION,
      service: { namespace, name: LOG_API_SERVICE, port: 443 },
      caBundle: options.caBundle.toString("base64"),
      groupPriorityMinimum: 1000,
      versionPriority: 15,
    },
  });
  await waitFor(
    `APIService ${APISERVICE_NAME} Available`,
    async () => {
      const raw = (await api.call({
        method: "GET",
        path: `/apis/apiregistration.k8s.io/v1/apiservices/${APISERVICE_NAME}`,
      })) as { status?: { conditions?: { type: string; status: string; message?: string }[] } };
      const available = raw.status?.conditions?.find((c) => c.type === "Available");
      return available?.status === "True" ? true : undefined;
    },
    { timeoutMs: 60_000 },
  );
  return async () => {
    await api
      .call({ method: "DELETE", path: `/apis/apiregistration.k8s.io/v1/apiservices/${APISERVICE_NAME}` })
      .catch(() => undefined);
  };
}
