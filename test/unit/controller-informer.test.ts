// The informer's recovery, against a small HTTP server that speaks the watch protocol and
// misbehaves on cue: ends streams, expires resourceVersions, falls silent.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { type PodView, parsePod } from "../../src/controller/objects.js";
import { ApiClient, type ListPage } from "../../src/runtime/api-client.js";
import { Informer } from "../../src/runtime/informer.js";

type Behaviour = (request: IncomingMessage, response: ServerResponse, query: URLSearchParams) => void;

interface FakeApi {
  server: Server;
  kubeConfig: KubeConfig;
  watches: URLSearchParams[];
  behaviours: Behaviour[];
}

const podEvent = (type: string, name: string, rv: string) =>
  `${JSON.stringify({ type, object: { metadata: { name, namespace: "ops", resourceVersion: rv } } })}\n`;

async function fakeApi(): Promise<FakeApi> {
  const api: FakeApi = { server: createServer(), kubeConfig: new KubeConfig(), watches: [], behaviours: [] };
  api.server.on("request", (request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? "/", "http://localhost");
    api.watches.push(url.searchParams);
    const behaviour = api.behaviours.shift();
    response.writeHead(200, { "content-type": "application/json" });
    // The API server answers a watch at once, before any event.
    response.flushHeaders();
    if (behaviour) behaviour(request, response, url.searchParams);
    // Without a behaviour the watch stays open and silent.
  });
  await new Promise<void>((resolve) => api.server.listen(0, "127.0.0.1", resolve));
  const { port } = api.server.address() as AddressInfo;
  api.kubeConfig.loadFromOptions({
    clusters: [{ name: "fake", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "fake" }],
    contexts: [{ name: "fake", cluster: "fake", user: "fake" }],
    currentContext: "fake",
  });
  return api;
}

const log = pino({ level: "silent" });
let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const step of cleanup.reverse()) await step();
  cleanup = [];
});

function startInformer(api: FakeApi, lists: (ListPage | Error)[], watchTimeoutMs = 60_000) {
  const counts = { lists: 0, reconnects: 0, relists: 0 };
  /** Each problem the informer reported, in order; undefined: current again. */
  const problems: (string | undefined)[] = [];
  const informer = new Informer<PodView>({
    resource: "pods",
    api: new ApiClient(api.kubeConfig),
    watchPath: "/api/v1/pods",
    list: async () => {
      const list = lists[Math.min(counts.lists, lists.length - 1)] as ListPage | Error;
      counts.lists++;
      if (list instanceof Error) throw list;
      return list;
    },
    parse: parsePod,
    keyOf: (pod) => `${pod.metadata.namespace}/${pod.metadata.name}`,
    resourceVersionOf: (pod) => pod.metadata.resourceVersion,
    watchTimeoutMs,
    resyncMs: 0,
    log,
    onReconnect: () => counts.reconnects++,
    onRelist: () => counts.relists++,
    onProblemChange: () => problems.push(informer.problem),
    random: () => 0,
  });
  informer.start();
  cleanup.push(async () => {
    await informer.stop();
    api.server.closeAllConnections();
    await new Promise((resolve) => api.server.close(resolve));
  });
  return { informer, counts, problems };
}

async function until(check: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const pod = (name: string, rv: string) => ({ metadata: { name, namespace: "ops", resourceVersion: rv } });

describe("the informer", () => {
  it("lists, then watches from the list's resourceVersion and keeps the cache current", async () => {
    const api = await fakeApi();
    api.behaviours.push((_req, res) =>
      res.write(podEvent("ADDED", "b", "11") + podEvent("DELETED", "a", "12")),
    );
    const { informer } = startInformer(api, [{ items: [pod("a", "10")], resourceVersion: "10" }]);
    await informer.waitForSync();
    await until(() => informer.get("ops/b") !== undefined && informer.get("ops/a") === undefined);
    expect(api.watches[0]?.get("resourceVersion")).toBe("10");
    expect(api.watches[0]?.get("allowWatchBookmarks")).toBe("true");
  });

  it("resumes from the last resourceVersion after the stream ends, without a relist", async () => {
    const api = await fakeApi();
    api.behaviours.push((_req, res) => res.end(podEvent("ADDED", "b", "15")));
    const { informer, counts } = startInformer(api, [{ items: [], resourceVersion: "10" }]);
    await until(() => api.watches.length >= 2);
    expect(api.watches[1]?.get("resourceVersion")).toBe("15");
    expect(counts.lists).toBe(1);
    expect(counts.reconnects).toBeGreaterThanOrEqual(1);
    expect(informer.get("ops/b")).toBeDefined();
  });

  it("follows bookmarks", async () => {
    const api = await fakeApi();
    api.behaviours.push((_req, res) => res.end(podEvent("BOOKMARK", "", "42")));
    startInformer(api, [{ items: [], resourceVersion: "10" }]);
    await until(() => api.watches.length >= 2);
    expect(api.watches[1]?.get("resourceVersion")).toBe("42");
  });

  it("relists on 410 Gone and drops what the new list no longer has", async () => {
    const api = await fakeApi();
    api.behaviours.push((_req, res) =>
      res.end(
        `${JSON.stringify({ type: "ERROR", object: { kind: "Status", code: 410, message: "too old resource version" } })}\n`,
      ),
    );
    const { informer, counts } = startInformer(api, [
      { items: [pod("a", "10")], resourceVersion: "10" },
      { items: [pod("c", "30")], resourceVersion: "30" },
    ]);
    await until(() => counts.relists >= 2 && api.watches.length >= 2);
    expect(informer.get("ops/a")).toBeUndefined();
    expect(informer.get("ops/c")).toBeDefined();
    expect(api.watches[1]?.get("resourceVersion")).toBe("30");
  });

  it("restarts a watch that went silent", async () => {
    const api = await fakeApi();
    const { counts } = startInformer(api, [{ items: [], resourceVersion: "10" }], 300);
    await until(() => api.watches.length >= 2, 5000);
    expect(counts.reconnects).toBeGreaterThanOrEqual(1);
    expect(api.watches[1]?.get("resourceVersion")).toBe("10");
  });

  it("says it has not listed yet, then that the API server cannot be reached, until a list succeeds", async () => {
    const api = await fakeApi();
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6443"), { code: "ECONNREFUSED" });
    const { informer, problems } = startInformer(api, [refused, { items: [], resourceVersion: "10" }]);
    expect(informer.problem).toBe("has not listed yet");
    await informer.waitForSync();
    expect(problems).toEqual([
      "list failed: API server unreachable: connect ECONNREFUSED 127.0.0.1:6443",
      undefined,
    ]);
  });

  it("says its cache is not current while it relists after 410 Gone, and nothing once the new list is in", async () => {
    const api = await fakeApi();
    api.behaviours.push((_req, res) =>
      res.end(
        `${JSON.stringify({ type: "ERROR", object: { kind: "Status", code: 410, message: "too old resource version" } })}\n`,
      ),
    );
    const { informer, counts, problems } = startInformer(api, [
      { items: [], resourceVersion: "10" },
      { items: [], resourceVersion: "30" },
    ]);
    await until(() => counts.relists >= 2);
    expect(problems).toEqual([undefined, "watch expired (410 Gone), relisting", undefined]);
    expect(informer.problem).toBeUndefined();
  });

  it("says its watch went silent until a new one is answered", async () => {
    const api = await fakeApi();
    const { problems } = startInformer(api, [{ items: [], resourceVersion: "10" }], 300);
    await until(() => problems.length >= 3);
    expect(problems.slice(0, 3)).toEqual([
      undefined,
      "watch delivered nothing for 300ms (API server frozen or the connection dead), restarting it",
      undefined,
    ]);
  });

  it("hands every cached object to its handlers on resync", async () => {
    const api = await fakeApi();
    const { informer } = startInformer(api, [
      { items: [pod("a", "10"), pod("b", "10")], resourceVersion: "10" },
    ]);
    await informer.waitForSync();
    const seen: string[] = [];
    informer.addHandlers({ onUpsert: (p, old) => seen.push(`${p.metadata.name}:${old === p}`) });
    informer.resync();
    expect(seen.sort()).toEqual(["a:true", "b:true"]);
  });
});
