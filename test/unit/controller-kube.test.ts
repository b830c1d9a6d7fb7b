// The controller's API client: what it sends (the same requests client-node's generated client
// sent, so the API server's audit log counts the same), the error facts the controller decides
// on, and calls against a server that accepts the connection and never answers, as a dead path
// or a frozen API server does.
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import {
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderMiddleware,
  type V1Lease,
} from "@kubernetes/client-node";
import { afterEach, describe, expect, it } from "vitest";
import { ApiClient } from "../../src/runtime/api-client.js";
import { ApiCredentials } from "../../src/runtime/api-credentials.js";
import { apiErrorMessage, isConflict, isNotFound, statusCodeOf } from "../../src/runtime/api-errors.js";
import { makeClients } from "../../src/runtime/kube-config.js";

let server: Server | undefined;
afterEach(async () => {
  const running = server;
  server = undefined;
  if (!running) return;
  running.closeAllConnections();
  await new Promise((resolve) => running.close(resolve));
});

function kubeConfigFor(port: number): KubeConfig {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: "silent", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "silent" }],
    contexts: [{ name: "silent", cluster: "silent", user: "silent" }],
    currentContext: "silent",
  });
  return kubeConfig;
}

async function silentApi(): Promise<KubeConfig> {
  server = createServer(() => {
    // Never answers.
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return kubeConfigFor((server.address() as AddressInfo).port);
}

interface Received {
  method: string;
  path: string;
  query: Record<string, string>;
  contentType: string | undefined;
  userAgent: string | undefined;
  body: unknown;
}

/** A server that records each request and answers it with `answer` (an empty list by default). */
async function recordingApi(
  answer: (request: IncomingMessage) => { status: number; body: unknown } = () => ({
    status: 200,
    body: { kind: "List", metadata: { resourceVersion: "7" }, items: [] },
  }),
) {
  const received: Received[] = [];
  const connections = { count: 0 };
  server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const url = new URL(request.url ?? "/", "http://localhost");
      const text = Buffer.concat(chunks).toString("utf8");
      received.push({
        method: request.method ?? "",
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        contentType: text === "" ? undefined : request.headers["content-type"],
        userAgent: request.headers["user-agent"],
        body: text === "" ? undefined : JSON.parse(text),
      });
      const { status, body } = answer(request);
      response.writeHead(status, { "content-type": "application/json" });
      response.end(JSON.stringify(body));
    });
  });
  server.on("connection", () => connections.count++);
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return { kubeConfig: kubeConfigFor((server.address() as AddressInfo).port), received, connections };
}

describe("an API call to a server that never answers", () => {
  it("fails at the clients' deadline instead of waiting forever", async () => {
    const { api } = makeClients(await silentApi(), 300);
    const started = performance.now();
    await expect(api.readNamespacedPod({ name: "p", namespace: "ops" })).rejects.toThrow(/timeout|abort/i);
    expect(performance.now() - started).toBeLessThan(5000);
  });

  it("fails as soon as its own signal aborts, before the clients' deadline", async () => {
    const { api } = makeClients(await silentApi(), 60_000);
    const started = performance.now();
    await expect(
      api.readNamespacedLease({ name: "l", namespace: "ops" }, { signal: AbortSignal.timeout(200) }),
    ).rejects.toThrow(/timeout|abort/i);
    expect(performance.now() - started).toBeLessThan(5000);
  });
});

const pod = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name: "p", namespace: "ops" },
  spec: { containers: [] },
};
const lease = {
  apiVersion: "coordination.k8s.io/v1",
  kind: "Lease",
  metadata: { name: "l", namespace: "ops", resourceVersion: "3" },
  spec: { holderIdentity: "a", leaseDurationSeconds: 15, renewTime: "2026-11-30T10:00:00.000000Z" },
  // MicroTime goes out as preformatted text, as leader election sends it.
} as unknown as V1Lease;
const at = new Date("2026-11-30T10:00:00.123Z");
const event = {
  apiVersion: "v1",
  kind: "Event",
  metadata: { name: "run.1", namespace: "ops" },
  involvedObject: { apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", name: "run", namespace: "ops" },
  type: "Normal",
  reason: "Started",
  message: "started",
  source: { component: "playbook-controller" },
  firstTimestamp: at,
  lastTimestamp: at,
  count: 1,
};
const custom = { group: "playbook.dev", version: "v1alpha1", plural: "playbooks", namespace: "ops" };
const status = {
  apiVersion: "playbook.dev/v1alpha1",
  kind: "Playbook",
  metadata: { name: "run" },
  status: {},
};

type Calls = {
  ours: (api: ApiClient) => Promise<unknown>;
  theirs: (kubeConfig: KubeConfig) => Promise<unknown>;
};

// Each call the controller makes, as it makes it now and as client-node's generated client made it.
const calls: Record<string, Calls> = {
  "read a pod": {
    ours: (api) => api.readNamespacedPod({ name: "p", namespace: "ops" }),
    theirs: (kc) => kc.makeApiClient(CoreV1Api).readNamespacedPod({ name: "p", namespace: "ops" }),
  },
  "create a pod": {
    ours: (api) => api.createNamespacedPod({ namespace: "ops", body: pod }),
    theirs: (kc) => kc.makeApiClient(CoreV1Api).createNamespacedPod({ namespace: "ops", body: pod }),
  },
  "lower a pod's deadline by JSON patch": {
    ours: (api) =>
      api.patchNamespacedPod({
        name: "p",
        namespace: "ops",
        body: [{ op: "replace", path: "/spec/activeDeadlineSeconds", value: 5 }],
      }),
    theirs: (kc) =>
      kc.makeApiClient(CoreV1Api).patchNamespacedPod(
        {
          name: "p",
          namespace: "ops",
          body: [{ op: "replace", path: "/spec/activeDeadlineSeconds", value: 5 }],
        },
        {
          middleware: [setHeaderMiddleware("Content-Type", PatchStrategy.JsonPatch)],
          middlewareMergeStrategy: "append",
        },
      ),
  },
  "delete a pod at once in the background": {
    ours: (api) =>
      api.deleteNamespacedPod({
        name: "p",
        namespace: "ops",
        gracePeriodSeconds: 0,
        propagationPolicy: "Background",
      }),
    theirs: (kc) =>
      kc.makeApiClient(CoreV1Api).deleteNamespacedPod({
        name: "p",
        namespace: "ops",
        gracePeriodSeconds: 0,
        propagationPolicy: "Background",
      }),
  },
  "record an event": {
    ours: (api) => api.createNamespacedEvent({ namespace: "ops", body: event }),
    theirs: (kc) => kc.makeApiClient(CoreV1Api).createNamespacedEvent({ namespace: "ops", body: event }),
  },
  "read the Lease": {
    ours: (api) => api.readNamespacedLease({ name: "l", namespace: "ops" }),
    theirs: (kc) => kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ name: "l", namespace: "ops" }),
  },
  "create the Lease": {
    ours: (api) => api.createNamespacedLease({ namespace: "ops", body: lease }),
    theirs: (kc) =>
      kc.makeApiClient(CoordinationV1Api).createNamespacedLease({ namespace: "ops", body: lease }),
  },
  "renew the Lease": {
    ours: (api) => api.replaceNamespacedLease({ name: "l", namespace: "ops", body: lease }),
    theirs: (kc) =>
      kc
        .makeApiClient(CoordinationV1Api)
        .replaceNamespacedLease({ name: "l", namespace: "ops", body: lease }),
  },
  "write a Playbook's status": {
    ours: (api) => api.replaceNamespacedCustomObjectStatus({ ...custom, name: "run", body: status }),
    theirs: (kc) =>
      kc
        .makeApiClient(CustomObjectsApi)
        .replaceNamespacedCustomObjectStatus({ ...custom, name: "run", body: status }),
  },
  "list a page of a namespace's Playbooks": {
    ours: (api) =>
      api.listPage("/apis/playbook.dev/v1alpha1/namespaces/ops/playbooks", { limit: 500, continue: "abc" }),
    theirs: (kc) =>
      kc
        .makeApiClient(CustomObjectsApi)
        .listNamespacedCustomObject({ ...custom, limit: 500, _continue: "abc" }),
  },
  "list the first page of all Playbooks": {
    ours: (api) => api.listPage("/apis/playbook.dev/v1alpha1/playbooks", { limit: 500 }),
    theirs: (kc) =>
      kc.makeApiClient(CustomObjectsApi).listClusterCustomObject({
        group: custom.group,
        version: custom.version,
        plural: custom.plural,
        limit: 500,
      }),
  },
  "list a page of the controller's pods": {
    ours: (api) =>
      api.listPage("/api/v1/pods", {
        limit: 500,
        continue: "abc",
        labelSelector: "app.kubernetes.io/managed-by=playbook-controller",
      }),
    theirs: (kc) =>
      kc.makeApiClient(CoreV1Api).listPodForAllNamespaces({
        limit: 500,
        _continue: "abc",
        labelSelector: "app.kubernetes.io/managed-by=playbook-controller",
      }),
  },
};

describe("the controller's API client", () => {
  it.each(Object.entries(calls))("sends %s as client-node's generated client did", async (_name, call) => {
    const { kubeConfig, received } = await recordingApi();
    await call.theirs(kubeConfig);
    await call.ours(new ApiClient(kubeConfig));
    const [theirs, ours] = received;
    expect(ours).toEqual({ ...theirs, userAgent: "playbook-controller" });
  });

  it("carries the HTTP status and the Status message of a refused call", async () => {
    const message =
      'Operation cannot be fulfilled on playbooks.playbook.dev "run": the object has been modified';
    const { kubeConfig } = await recordingApi((request) =>
      request.method === "PUT"
        ? { status: 409, body: { kind: "Status", status: "Failure", message, reason: "Conflict", code: 409 } }
        : {
            status: 404,
            body: { kind: "Status", status: "Failure", message: 'pods "p" not found', code: 404 },
          },
    );
    const api = new ApiClient(kubeConfig);
    const conflict = await api
      .replaceNamespacedCustomObjectStatus({ ...custom, name: "run", body: status })
      .catch((error: unknown) => error);
    expect(isConflict(conflict)).toBe(true);
    expect(apiErrorMessage(conflict)).toBe(`409 ${message}`);
    const missing = await api
      .readNamespacedPod({ name: "p", namespace: "ops" })
      .catch((error: unknown) => error);
    expect(isNotFound(missing)).toBe(true);
    expect(statusCodeOf(missing)).toBe(404);
    expect(apiErrorMessage(missing)).toBe('404 pods "p" not found');
  });

  it("keeps its connection to the API server open from one call to the next", async () => {
    const { kubeConfig, connections } = await recordingApi();
    const api = new ApiClient(kubeConfig);
    for (let i = 0; i < 3; i++) await api.readNamespacedPod({ name: "p", namespace: "ops" });
    api.close();
    expect(connections.count).toBe(1);
  });
});

describe("a watch", () => {
  it("goes out as the calls do: the same User-Agent, credentials and connection, and a trailing slash of the server dropped", async () => {
    const seen: { path: string; userAgent?: string | undefined; authorization?: string | undefined }[] = [];
    const connections = { count: 0 };
    server = createServer((request, response) => {
      const url = new URL(request.url ?? "/", "http://localhost");
      seen.push({
        path: url.pathname,
        userAgent: request.headers["user-agent"],
        authorization: request.headers.authorization,
      });
      response.writeHead(200, { "content-type": "application/json" });
      if (url.searchParams.get("watch") === "true") response.end('{"type":"BOOKMARK","object":{}}\n');
      else response.end('{"kind":"List","metadata":{"resourceVersion":"7"},"items":[]}');
    });
    server.on("connection", () => connections.count++);
    await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [
        {
          name: "c",
          server: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
          skipTLSVerify: true,
        },
      ],
      users: [{ name: "u", token: "the-token" }],
      contexts: [{ name: "c", cluster: "c", user: "u" }],
      currentContext: "c",
    });
    const api = new ApiClient(kubeConfig);
    const lines: string[] = [];
    await api.listPage("/api/v1/pods", { limit: 1 });
    await api.watch(
      "/api/v1/pods",
      { resourceVersion: "7" },
      { onOpen: () => {}, onLine: (line) => lines.push(line) },
      { signal: new AbortController().signal },
    );
    api.close();
    expect(lines).toEqual(['{"type":"BOOKMARK","object":{}}']);
    expect(seen).toEqual([
      { path: "/api/v1/pods", userAgent: "playbook-controller", authorization: "Bearer the-token" },
      { path: "/api/v1/pods", userAgent: "playbook-controller", authorization: "Bearer the-token" },
    ]);
    expect(connections.count).toBe(1);
  });

  it("refused says what the API server said", async () => {
    const message =
      'pods is forbidden: User "u" cannot watch resource "pods" in API group "" at the cluster scope';
    const { kubeConfig } = await recordingApi(() => ({
      status: 403,
      body: { kind: "Status", status: "Failure", message, reason: "Forbidden", code: 403 },
    }));
    const api = new ApiClient(kubeConfig);
    const refused = await api
      .watch(
        "/api/v1/pods",
        {},
        { onOpen: () => {}, onLine: () => {} },
        { signal: new AbortController().signal },
      )
      .catch((error: unknown) => error);
    api.close();
    expect(statusCodeOf(refused)).toBe(403);
    expect(apiErrorMessage(refused)).toBe(`403 ${message}`);
  });
});

describe("the TLS settings", () => {
  it("are read from their files once per change, not on every call", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "pb-tls-"));
    const caFile = path.join(dir, "ca.crt");
    writeFileSync(caFile, "first CA");
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [{ name: "c", server: "https://127.0.0.1:6443", caFile, skipTLSVerify: false }],
      users: [{ name: "u", token: "t" }],
      contexts: [{ name: "c", cluster: "c", user: "u" }],
      currentContext: "c",
    });
    const credentials = new ApiCredentials(kubeConfig);
    try {
      const first = await credentials.current();
      const again = await credentials.current();
      // The same object, the same bytes: nothing was read again, and the connections stay.
      expect(again.tls).toBe(first.tls);
      expect(again.tls.ca).toBe(first.tls.ca);
      writeFileSync(`${caFile}.new`, "rotated CA");
      renameSync(`${caFile}.new`, caFile);
      const rotated = await credentials.current();
      expect(rotated.tls).not.toBe(first.tls);
      expect(rotated.tls.ca?.toString()).toBe("rotated CA");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
